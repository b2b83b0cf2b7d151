"""The real TPU compiler on a machine without a TPU: libtpu compiles an HLO module for a
slice's topology (JAX's compile-only topologies) and reports what the executable needs.

The only module of trm_spmd that touches JAX's compile-only machinery. Those are internal
JAX APIs, so the versions are pinned (PINS; requirements.lock installs them on Linux x86_64)
and a missing or different install fails with one line saying what to run. Never import
this module in a process that runs torch_xla on a TPU: it loads a second libtpu.

What comes back is the compiler's view of one SPMD program per chip: HBM for arguments,
outputs and temporaries, its FLOP count, its cost-model time when it gives one, and the
collectives of the partitioned, optimised module. These are compiler estimates, not
measurements.
"""

import contextlib
import dataclasses
import os
import re
import tempfile
import time

from trm_spmd.errors import UserError

PINS = {'jax': '0.10.2', 'jaxlib': '0.10.2', 'libtpu': '0.0.42.1'}
SETUP_HINT = ('run `bash launch/setup.sh` (Linux x86_64) and use the python it prints; an environment '
              'built with --tpu holds torch_xla[tpu]\'s own libtpu instead')
GIB = 2 ** 30

# Generation -> (HBM bytes per chip, chip_config_name, chips per host of a multi-host slice,
# {chips: topology}). v4/v5p chips are one device each with megacore, as PyTorch sees them.
_CUBE = {4: '2x2x1', 8: '2x2x2', 16: '2x2x4', 32: '2x4x4', 64: '4x4x4', 128: '4x4x8', 256: '4x8x8'}
_PLANE = {1: '1x1', 4: '2x2', 8: '2x4', 16: '4x4', 32: '4x8', 64: '8x8', 128: '8x16', 256: '16x16'}
_GENERATIONS = {
    'v4': (32 * GIB, 'megacore', (2, 2, 1), _CUBE),
    'v5p': (95 * GIB, 'megacore', (2, 2, 1), _CUBE),
    'v5e': (16 * GIB, 'default', (2, 2, 1), _PLANE),
    'v6e': (32 * GIB, 'default', (2, 2, 1), _PLANE),
}
# A single-host slice holds all its chips on one host (up to 8 on v5e/v6e).
_SINGLE_HOST_BOUNDS = {'v5e': {1: (1, 1, 1), 8: (2, 4, 1)}, 'v6e': {1: (1, 1, 1), 8: (2, 4, 1)}}

COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all', 'collective-permute',
               'collective-broadcast', 'ragged-all-to-all')
_DTYPE_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 's16': 2, 'u16': 2, 'f16': 2, 'bf16': 2, 's32': 4, 'u32': 4,
                'f32': 4, 's64': 8, 'u64': 8, 'f64': 8, 'c64': 8, 'c128': 16, 'f8e4m3fn': 1, 'f8e5m2': 1,
                's4': 0.5, 'u4': 0.5}


class TpuCompilerError(UserError):
    """The TPU compiler is missing, of another version, or refused a module; the message says why."""


class HbmExhausted(TpuCompilerError):
    """libtpu refused the module: it needs more HBM than a chip has (the message says how much)."""


@dataclasses.dataclass(frozen=True)
class Topology:
    generation: str          # 'v4'
    chips: int
    name: str                # libtpu's topology name, 'v4:2x4x4'
    chip_config_name: str
    chips_per_host_bounds: tuple
    hbm_bytes: int           # per chip

    @property
    def hosts(self):
        per_host = 1
        for b in self.chips_per_host_bounds:
            per_host *= b
        return self.chips // per_host


def supported():
    """'v4-8 ... v4-512, ...' for messages and docs (v4/v5p names count TensorCores, 2 per chip)."""
    def name(g, chips):
        return f'{g}-{chips * 2 if g in ("v4", "v5p") else chips}'
    return ', '.join(f'{name(g, min(spec[3]))} ... {name(g, max(spec[3]))}' for g, spec in _GENERATIONS.items())


def topology(generation, chips):
    """The compile-only topology of a slice of `chips` chips of `generation` ('v4', 'v5e')."""
    if generation not in _GENERATIONS or chips not in _GENERATIONS[generation][3]:
        raise TpuCompilerError(f'no compile-only topology for a {generation} slice of {chips} chips; '
                               f'supported: {supported()} (powers of two)')
    hbm, config_name, multi_host_bounds, shapes = _GENERATIONS[generation]
    bounds = _SINGLE_HOST_BOUNDS.get(generation, {}).get(chips, multi_host_bounds)
    return Topology(generation, chips, f'{generation}:{shapes[chips]}', config_name, tuple(bounds), hbm)


# ---- the environment ---------------------------------------------------------------------
def installed_versions():
    from importlib import metadata
    out = {}
    for name in PINS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def check_environment():
    """Raises TpuCompilerError (one line: the cause and what to run) unless the pinned
    jax, jaxlib and libtpu are installed."""
    found = installed_versions()
    missing = [n for n, v in found.items() if v is None]
    if missing:
        raise TpuCompilerError(f'the TPU compiler needs {", ".join(f"{n}=={PINS[n]}" for n in missing)}, '
                               f'not installed here: {SETUP_HINT}')
    wrong = [f'{n} {found[n]} (pinned {PINS[n]})' for n in PINS if found[n] != PINS[n]]
    if wrong:
        raise TpuCompilerError(f'the TPU compiler is pinned to versions this environment does not hold: '
                               f'{", ".join(wrong)}; {SETUP_HINT}')
    return found


@contextlib.contextmanager
def quiet_stderr():
    """libtpu warns on stderr that this is no TPU VM (accelerator type, worker hostnames):
    harmless for compile-only use. The lines are kept and shown only if the call fails."""
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode='w+b') as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield sink
        except Exception as error:
            os.dup2(saved, 2)
            sink.seek(0)
            tail = sink.read().decode(errors='replace').strip().splitlines()[-5:]
            if tail:
                error.add_note('libtpu stderr: ' + ' | '.join(tail))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


_TOPOLOGY_CACHE = {}


def _devices(topo):
    if topo not in _TOPOLOGY_CACHE:
        from jax.experimental import topologies
        desc = topologies.get_topology_desc(topology_name=topo.name, platform='tpu',
                                            chip_config_name=topo.chip_config_name,
                                            chips_per_host_bounds=topo.chips_per_host_bounds, num_slices=1)
        devices = list(desc.devices)
        if len(devices) != topo.chips:
            raise TpuCompilerError(f'libtpu gave {len(devices)} devices for {topo.name} '
                                   f'({topo.chip_config_name}), expected {topo.chips}')
        _TOPOLOGY_CACHE[topo] = devices
    return _TOPOLOGY_CACHE[topo]


def devices(topo):
    """The compile-only devices of `topo`, to compile JAX functions for (no TPU is opened)."""
    check_environment()
    os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
    with quiet_stderr():
        return _devices(topo)


def device_kind(topo):
    return devices(topo)[0].device_kind


def compile_module(module_proto, topo):
    """Compiles a serialized HloModuleProto (SPMD-annotated, one program for all chips) for
    `topo` -> dict: memory (bytes per chip), cost (compiler FLOPs and bytes per chip, the
    cost-model seconds when given), collectives and matmul dtypes of the optimised module,
    compile seconds, libtpu's device kind, and the optimised module's text."""
    check_environment()
    # Compile-only use opens no TPU: libtpu's one-process lock (/tmp/libtpu_lockfile) would
    # only stop two compiles (two users, or a test beside a benchmark) from running at once.
    os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
    from jax._src import compiler
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir
    with quiet_stderr():
        devices = _devices(topo)
        try:
            stablehlo = _jax.mlir.hlo_to_stablehlo(module_proto)
        except Exception as e:  # noqa: BLE001 - any conversion failure is the module's
            raise TpuCompilerError(f'the HLO module could not be converted to StableHLO: {e}') from None
        options = compiler.get_compile_options(num_replicas=1, num_partitions=len(devices),
                                               device_assignment=[devices])
        options.executable_build_options.use_spmd_partitioning = True
        build = options.executable_build_options
        build.use_shardy_partitioner = False   # torch_xla 2.9 emits GSPMD shardings
        # As torch_xla compiles a sharded graph: outputs keep the shardings the partitioner
        # propagates to them (a carry stays sharded) instead of being gathered.
        build.allow_spmd_sharding_propagation_to_output = [True]
        start = time.perf_counter()
        with jax_mlir.make_ir_context():
            module = ir.Module.parse(stablehlo)
            try:
                executable = devices[0].client.compile(module, executable_devices=_jax.DeviceList(tuple(devices)),
                                                       compile_options=options)
            except _jax.JaxRuntimeError as e:
                line = str(e).splitlines()[0]
                error = HbmExhausted if 'RESOURCE_EXHAUSTED' in line else TpuCompilerError
                raise error(f'libtpu refused the module for {topo.name}: {line}') from None
        seconds = time.perf_counter() - start
        stats = executable.get_compiled_memory_stats()
        cost = executable.cost_analysis()
        text = executable.hlo_modules()[0].to_string()
    cost = cost[0] if isinstance(cost, (list, tuple)) else dict(cost or {})
    memory = {
        'argument_bytes': stats.argument_size_in_bytes,
        'output_bytes': stats.output_size_in_bytes,
        'alias_bytes': stats.alias_size_in_bytes,
        'temp_bytes': stats.temp_size_in_bytes,
        'generated_code_bytes': stats.generated_code_size_in_bytes,
    }
    memory['total_bytes'] = (memory['argument_bytes'] + memory['output_bytes'] - memory['alias_bytes']
                             + memory['temp_bytes'] + memory['generated_code_bytes'])
    memory['hbm_bytes'] = topo.hbm_bytes
    return {
        'topology': topo.name, 'chips': topo.chips, 'device_kind': devices[0].device_kind,
        'compile_s': seconds,
        'memory': memory,
        'flops': float(cost.get('flops', 0.0)),
        'bytes_accessed': float(cost.get('bytes accessed', 0.0)),
        'transcendentals': float(cost.get('transcendentals', 0.0)),
        'optimal_seconds': cost_model_seconds(cost.get('optimal_seconds'), text),
        'optimal_seconds_raw': cost.get('optimal_seconds'),
        'collectives': collective_inventory(text),
        'matmuls': matmul_inventory(text),
        'cycles': instruction_cycles(text),
        'mosaic_kernels': mosaic_kernels(text),
        'instructions': text.count('\n'),
        'optimized_hlo': text,
    }


# ---- reading the optimised module (plain text, no JAX needed) -----------------------------
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+'
                          r'(?P<op>[a-z][a-z0-9\-]*)\((?P<args>.*)$')
_ARRAY = re.compile(r'\b(?P<dtype>pred|[subfc]\d+|bf16|f8e4m3fn|f8e5m2)\[(?P<dims>[\d,]*)\]')
_OPERAND = re.compile(r'%([\w.\-]+)')


def shape_bytes(shape_text):
    """Bytes of an HLO shape as printed ('(f32[256,256]{1,0}, bf16[8]{0})' or 'f32[]')."""
    total = 0
    for m in _ARRAY.finditer(shape_text):
        count = 1
        for d in filter(None, m.group('dims').split(',')):
            count *= int(d)
        total += count * _DTYPE_BYTES.get(m.group('dtype'), 4)
    return int(total)


def _instructions(text):
    """(name, op, result shape text, operand text) of every instruction of every computation."""
    for line in text.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            yield m.group('name'), m.group('op'), m.group('shape'), m.group('args')


MOSAIC_TARGET = 'custom_call_target="tpu_custom_call"'


def unestimated_custom_calls(text):
    """Custom calls outside fusions (X64SplitLow/High around 64-bit values, ...): libtpu's
    cost model has no time for them and counts each as -1 s in 'optimal_seconds'. Mosaic
    kernels (tpu_custom_call) count 0 s instead: see mosaic_kernels."""
    fused = set(re.findall(r'\sfusion\(.*?calls=%?([\w.\-]+)', text))
    count, computation = 0, ''
    for line in text.splitlines():
        header = re.match(r'^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$', line)
        if header and not line.startswith(' '):
            computation = header.group(1)
        elif ' custom-call(' in line and computation not in fused and MOSAIC_TARGET not in line:
            count += 1
    return count


def mosaic_kernels(text):
    """[(result dims, [operand dims])] of each Mosaic (Pallas) kernel call of the module, dims
    as tuples (a tuple result gives one per element). The cost model gives these no time and
    no FLOPs: whoever adds them to an estimate must say how."""
    dims = {}
    calls = []
    for name, op, shape, args in _instructions(text):
        arrays = [tuple(int(d) for d in m.group('dims').split(',') if d) for m in _ARRAY.finditer(shape)]
        dims[name] = arrays[0] if len(arrays) == 1 else None
        if op == 'custom-call' and MOSAIC_TARGET in args:
            operands = [dims.get(n) for n in _OPERAND.findall(args.split(')')[0])]
            calls.append((arrays, operands))
    return calls


def cost_model_seconds(raw, text):
    """The cost model's time of one execution, or None when it gives none: 'optimal_seconds'
    with the -1 s of each custom call it cannot estimate taken back out."""
    if raw is None:
        return None
    seconds = float(raw) + unestimated_custom_calls(text)
    return seconds if seconds > 0 else None


def collective_inventory(text):
    """{op: {'count', 'bytes'}} of the collectives one execution of the module runs, counted
    once per operation: a synchronous op, or the '-done' half of an asynchronous one (whose
    result is the data received); bytes are the op's result, i.e. per chip."""
    inventory = {}
    for _, op, shape, _ in _instructions(text):
        base = op[:-len('-done')] if op.endswith('-done') else op
        if base not in COLLECTIVES or op.endswith('-start'):
            continue
        entry = inventory.setdefault(base, {'count': 0, 'bytes': 0})
        entry['count'] += 1
        entry['bytes'] += shape_bytes(shape)
    return inventory


def matmul_inventory(text):
    """{'lhs x rhs -> out': count} of the dot and convolution ops (TPU lowers matmuls to
    convolutions), by element types: which matmuls run in bfloat16 and which in float32."""
    instructions = list(_instructions(text))
    dtype = {}
    for name, _, shape, _ in instructions:
        m = _ARRAY.search(shape)
        if m:
            dtype[name] = m.group('dtype')
    counts = {}
    for _, op, shape, args in instructions:
        if op not in ('dot', 'convolution'):
            continue
        inline = [m.group('dtype') for m in _ARRAY.finditer(args.split('),')[0])]
        operands = inline or [dtype.get(n, '?') for n in _OPERAND.findall(args.split('),')[0])]
        out = _ARRAY.search(shape)
        key = f'{" x ".join(operands[:2]) or "?"} -> {out.group("dtype") if out else "?"}'
        counts[key] = counts.get(key, 0) + 1
    return counts


def _computations(text):
    """{name: [instruction lines]} of the module's computations, and the entry's name."""
    computations, current, entry = {}, None, None
    for line in text.splitlines():
        header = re.match(r'^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$', line)
        if header and not line.startswith(' '):
            current = header.group(2)
            computations[current] = []
            if header.group(1):
                entry = current
        elif current is not None:
            computations[current].append(line)
    return computations, entry


def _matmul_shapes(lines):
    """The result and operand shapes (size-1 dimensions dropped) of the first dot or
    convolution among `lines`, or None."""
    shapes = {}
    for line in lines:
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        array = _ARRAY.search(m.group('shape'))
        if array:
            shapes[m.group('name')] = tuple(int(d) for d in array.group('dims').split(',') if d and d != '1')
        if m.group('op') in ('dot', 'convolution'):
            operands = _OPERAND.findall(m.group('args').split(')')[0])
            return [shapes.get(m.group('name'), ())] + [shapes.get(o, ()) for o in operands]
    return None


def instruction_cycles(text):
    """The cost model's estimated cycles of each instruction of the entry computation, as
    [(op, cycles, matmul shapes)]: op is the opcode, or 'fusion:KIND' (kLoop, kOutput, ...)
    for a fusion; matmul shapes, for a fusion holding a matmul, are its result's and
    operands' dimensions (size-1 dimensions dropped), else None."""
    computations, entry = _computations(text)
    out = []
    for line in computations.get(entry, []):
        cycles = re.search(r'"estimated_cycles":"(\d+)"', line)
        m = _INSTRUCTION.match(line)
        if not (cycles and m):
            continue
        op, shapes = m.group('op'), None
        if op == 'fusion':
            kind = re.search(r'kind=(\w+)', line)
            op = f'fusion:{kind.group(1) if kind else "?"}'
            called = re.search(r'calls=%?([\w.\-]+)', line)
            shapes = _matmul_shapes(computations.get(called.group(1), [])) if called else None
        out.append((op, int(cycles.group(1)), shapes))
    return out
