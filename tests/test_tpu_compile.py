"""The TPU compiler in the loop (benchmarks/tpu_compile.py, trm_spmd/runtime/tpu_aot.py).

The end-to-end test traces a CPU-sized train step on 4 virtual CPU devices and has libtpu
compile it for a v4-8 topology (no TPU involved): the gradients are all-reduced once, in
float32, no activation is gathered, the matmuls run in bfloat16 and the step fits.
libtpu comes with `bash launch/setup.sh` on Linux x86_64; where it is missing there, the
test fails with the setup command. The other tests read HLO text and need no compiler.
"""

import json
import os
import platform
import re
import sys

import pytest
import torch

from conftest import REPO
from trm_spmd.errors import UserError
from trm_spmd.runtime import tpu_aot

sys.path.insert(0, REPO)
from benchmarks import tpu_compile  # noqa: E402

# An optimised TPU module in miniature: an async all-reduce of a tuple, a synchronous
# all-gather, a fused computation holding a dot, 64-bit split custom calls outside fusions,
# a Pallas kernel (tpu_custom_call).
HLO = """HloModule m, entry_computation_layout={(f32[8,4]{1,0})->f32[8,4]{1,0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%fused_computation (param_0: bf16[8,4], param_1: bf16[4,4]) -> bf16[8,4] {
  %param_0 = bf16[8,4]{1,0} parameter(0)
  %param_1 = bf16[4,4]{1,0} parameter(1)
  %c = s32[] custom-call(), custom_call_target="AssumeGatherIndicesInBound"
  ROOT %convolution.1 = bf16[8,4]{1,0} convolution(%param_0, %param_1), dim_labels=bf_io->bf
}

ENTRY %main (p0: f32[8,4], p1: s64[]) -> f32[8,4] {
  %p0 = f32[8,4]{1,0} parameter(0)
  %p1 = s64[] parameter(1)
  %lo = u32[] custom-call(%p1), custom_call_target="X64SplitLow"
  %hi = u32[] custom-call(%p1), custom_call_target="X64SplitHigh"
  %cv = bf16[8,4]{1,0} convert(%p0)
  %w = bf16[4,4]{1,0} constant({...})
  %fusion.1 = bf16[8,4]{1,0} fusion(%cv, %w), kind=kOutput, calls=%fused_computation
  %dot.2 = f32[8,4]{1,0} dot(f32[8,4]{1,0} %p0, f32[4,4]{1,0} %p0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %all-reduce-start.1 = (f32[8,4]{1,0}, bf16[8,4]{1,0}) all-reduce-start(%dot.2, %fusion.1), replica_groups={{0,1}}, to_apply=%add
  %all-reduce-done.1 = (f32[8,4]{1,0}, bf16[8,4]{1,0}) all-reduce-done(%all-reduce-start.1)
  %all-gather.3 = f32[16,4]{1,0} all-gather(%p0), dimensions={0}, replica_groups={{0,1}}
  %k = (bf16[8,4]{1,0:T(8,128)}, f32[2,4,4]{2,1,0}) custom-call(%cv, %w), custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {}}
  ROOT %r = f32[8,4]{1,0} get-tuple-element(%all-reduce-done.1), index=0
}
"""


def test_collectives_are_counted_once_with_the_bytes_received():
    inventory = tpu_aot.collective_inventory(HLO)
    assert inventory == {'all-reduce': {'count': 1, 'bytes': 8 * 4 * 4 + 8 * 4 * 2},
                         'all-gather': {'count': 1, 'bytes': 16 * 4 * 4}}


def test_matmul_types_from_operands_inline_or_by_name():
    assert tpu_aot.matmul_inventory(HLO) == {'bf16 x bf16 -> bf16': 1, 'f32 x f32 -> f32': 1}


CYCLES = """HloModule m

%fused_mm (param_0: bf16[6,1,97,4], param_1: bf16[8,97]) -> bf16[6,4,8] {
  %param_0 = bf16[6,1,97,4]{3,2,1,0} parameter(0)
  %param_1 = bf16[8,97]{1,0} parameter(1)
  ROOT %convolution.1 = bf16[6,4,8]{2,1,0} convolution(%param_0, %param_1), dim_labels=0bf_oi0->0bf
}

%fused_wg (param_0: bf16[6,4,8], param_1: bf16[6,4,97]) -> f32[8,97] {
  %param_0 = bf16[6,4,8]{2,1,0} parameter(0)
  %param_1 = bf16[6,4,97]{2,1,0} parameter(1)
  ROOT %convolution.2 = f32[8,97,1]{2,1,0} convolution(%param_0, %param_1), dim_labels=0fb_0io->bf0
}

%fused_add (param_0: f32[6,4]) -> f32[6,4] {
  %param_0 = f32[6,4]{1,0} parameter(0)
  ROOT %add.1 = f32[6,4]{1,0} add(%param_0, %param_0)
}

ENTRY %main (p0: bf16[6,1,97,4], p1: bf16[8,97], p2: f32[6,4]) -> f32[6,4] {
  %p0 = bf16[6,1,97,4]{3,2,1,0} parameter(0)
  %p1 = bf16[8,97]{1,0} parameter(1)
  %p2 = f32[6,4]{1,0} parameter(2)
  %f1 = bf16[6,4,8]{2,1,0} fusion(%p0, %p1), kind=kOutput, calls=%fused_mm, backend_config={"estimated_cycles":"600"}
  %f2 = f32[8,97]{1,0} fusion(%f1, %p0), kind=kOutput, calls=%fused_wg, backend_config={"estimated_cycles":"200"}
  %f3 = f32[6,4]{1,0} fusion(%p2), kind=kLoop, calls=%fused_add, backend_config={"estimated_cycles":"150"}
  %ar = f32[8,97]{1,0} all-reduce(%f2), to_apply=%fused_add, backend_config={"estimated_cycles":"40"}
  ROOT %copy.1 = f32[6,4]{1,0} copy(%f3), backend_config={"estimated_cycles":"10"}
}
"""


def test_cost_model_cycles_by_weight_and_kind():
    cycles = tpu_aot.instruction_cycles(CYCLES)
    assert cycles == [('fusion:kOutput', 600, [(6, 4, 8), (6, 97, 4), (8, 97)]),
                      ('fusion:kOutput', 200, [(8, 97), (6, 4, 8), (6, 4, 97)]),
                      ('fusion:kLoop', 150, None), ('all-reduce', 40, None), ('copy', 10, None)]
    shares = tpu_compile.time_by_category(cycles, {'mlp_t.gate_up_proj': [8, 97], 'mlp.down_proj': [4, 6]})
    assert shares == {'matmul mlp_t.gate_up_proj': 0.6, 'matmul mlp_t.gate_up_proj (weight gradient)': 0.2,
                      'elementwise and reductions (fusions)': 0.15, 'collectives': 0.04, 'copy': 0.01}


def test_cost_model_time_takes_back_the_custom_calls_it_cannot_estimate():
    assert tpu_aot.unestimated_custom_calls(HLO) == 2       # neither the fused one nor the kernel
    assert tpu_aot.cost_model_seconds(-2 + 0.05, HLO) == pytest.approx(0.05)
    assert tpu_aot.cost_model_seconds(-3.0, HLO) is None
    assert tpu_aot.cost_model_seconds(None, HLO) is None


def test_pallas_kernels_are_found_with_their_operand_shapes():
    assert tpu_aot.mosaic_kernels(HLO) == [([(8, 4), (2, 4, 4)], [(8, 4), (4, 4)])]


def test_a_step_with_kernels_adds_their_roofline_to_the_estimate_and_says_so():
    tpu_slice, _ = tpu_compile.slice_topology('v4-64')
    x, wgu, wd = (192, 97, 512), (1024, 97), (97, 512)
    kernels = [([x], [x, wgu, wd])] * 2 + [([x, (2,) + wgu, (2,) + wd], [x, x, wgu, wd])]
    meta = {'global_batch': 6144, 'analytic_flops_per_example': 1e9, 'donated_bytes': 0, 'what': 'train'}
    compiled = {'memory': {'argument_bytes': 0, 'output_bytes': 0, 'alias_bytes': 0, 'temp_bytes': 0,
                           'generated_code_bytes': 0, 'total_bytes': 0, 'hbm_bytes': 32 * 2 ** 30},
                'flops': 1e12, 'optimal_seconds': 0.040, 'mosaic_kernels': kernels,
                'cycles': [('fusion:kLoop', 300, None), ('copy', 100, None)]}
    r = tpu_compile.graph_figures(meta, compiled, tpu_slice)
    # Per call, products of 192 x 512 x 512 x (97 positions as 128 lanes or 104 rows) MACs
    # at 275 TFLOP/s: a forward 2 + 1, a backward 5 + 4.
    lanes, rows = 2 * 192 * 512 * 128 * 512, 2 * 192 * 512 * 104 * 512
    roofline = (2 * (2 * lanes + rows) + 5 * lanes + 4 * rows) / 275e12
    assert r['kernels']['calls'] == 3 and r['kernels']['roofline_seconds'] == pytest.approx(roofline)
    assert r['estimated_step_ms'] == pytest.approx((0.040 + roofline) * 1e3)
    shares = r['time_by_category']
    assert shares['token mix kernels (roofline)'] == pytest.approx(roofline / (0.040 + roofline))
    assert shares['elementwise and reductions (fusions)'] == pytest.approx(0.75 * 0.040 / (0.040 + roofline))
    lines = '\n'.join(tpu_compile.report_lines('eval_step', {**r, 'collectives': {}, 'matmuls': {}, 'compile_s': 1,
                                                               'instructions': 1}, tpu_slice, 17))
    assert 'for all but the kernels' in lines and '3 Pallas kernel calls' in lines and 'a bound, not a measurement' in lines


def test_every_line_whose_figure_holds_a_kernels_roofline_says_so():
    tpu_slice, _ = tpu_compile.slice_topology('v4-64')
    batch, heads, length = 24, 8, 1024                 # 8 blocks of 128
    t, row = (batch, heads * 64, length), (batch, 4, 2, length)   # q^T and the like; per-query rows
    attention = [([t, row], [(64,), t, t, t])] * 2 + [([t, row], [(64,), t, t, t, t, t, row]),
                                                      ([t, t], [(64,), t, t, t, t, row, row])]
    x = (24, 97, 512)
    token_mix = [([x], [x, (1024, 97), (97, 512)])]
    meta = {'global_batch': 768, 'analytic_flops_per_example': 4e11, 'donated_bytes': 0, 'what': 'train',
            'attention_visible_tiles': 0.5}
    compiled = {'memory': {'argument_bytes': 0, 'output_bytes': 0, 'alias_bytes': 0, 'temp_bytes': 0,
                           'generated_code_bytes': 0, 'total_bytes': 0, 'hbm_bytes': 32 * 2 ** 30},
                'flops': 1e13, 'optimal_seconds': 0.050, 'mosaic_kernels': attention + token_mix,
                'cycles': [('fusion:kLoop', 300, None)]}
    r = tpu_compile.graph_figures(meta, compiled, tpu_slice)
    by_kind = r['kernels']['by_kind']
    assert by_kind['attention']['calls'] == 4 and by_kind['token mix']['calls'] == 1
    # Half the tiles under the mask: 2 + 2 + 3 + 4 products of 2 x 128 x 128 x 128 per tile.
    tile = 2 * 128 * 128 * 128
    assert by_kind['attention']['mxu_flops'] == (2 + 2 + 3 + 4) * batch * heads * 64 * 0.5 * tile
    assert r['estimated_step_ms'] == pytest.approx((0.050 + r['kernels']['roofline_seconds']) * 1e3)
    assert {'attention kernels (roofline)', 'token mix kernels (roofline)'} <= set(r['time_by_category'])
    lines = tpu_compile.report_lines('train_step', {**r, 'collectives': {}, 'matmuls': {}, 'compile_s': 1,
                                                    'instructions': 1, 'parameter_bytes': 1}, tpu_slice, 17)
    projected = next(line for line in lines if line.lstrip().startswith('projected'))
    assert 'Pallas kernels at their roofline: a bound' in projected and '(compiler estimate)' not in projected
    assert any('(attention)' in line for line in lines) and any('(token mix)' in line for line in lines)
    assert tpu_compile.estimate_label({'kernels': None}) == 'compiler estimate'


def test_shape_bytes():
    assert tpu_aot.shape_bytes('(f32[256,256]{1,0}, bf16[8]{0}, pred[3])') == 256 * 256 * 4 + 16 + 3
    assert tpu_aot.shape_bytes('f32[]') == 4


@pytest.mark.parametrize('slice_name,topology,hosts', [('v4-8', 'v4:2x2x1', 1), ('v4-16', 'v4:2x2x2', 2),
                                                       ('v4-32', 'v4:2x2x4', 4), ('v4-64', 'v4:2x4x4', 8),
                                                       ('v5e-16', 'v5e:4x4', 4), ('v5e-8', 'v5e:2x4', 1),
                                                       ('v5p-128', 'v5p:4x4x4', 16), ('v6e-4', 'v6e:2x2', 1)])
def test_slice_topologies(slice_name, topology, hosts):
    tpu_slice, topo = tpu_compile.slice_topology(slice_name)
    assert topo.name == topology and topo.chips == tpu_slice.chips and topo.hosts == hosts == tpu_slice.hosts
    assert topo.hbm_bytes == {'v4': 32, 'v5e': 16, 'v5p': 95, 'v6e': 32}[topo.generation] * 2 ** 30


def test_unsupported_slices_fail_with_one_line():
    with pytest.raises(UserError, match=r'no compile-only topology for a v4 slice of 512 chips; supported: '
                                        r'v4-8 \.\.\. v4-512, v5p-8 \.\.\. v5p-512, v5e-1 \.\.\. v5e-256'):
        tpu_compile.slice_topology('v4-1024')
    with pytest.raises(UserError, match='v4-12: v4 slices are named by TensorCores'):
        tpu_compile.slice_topology('v4-12')


def test_missing_or_other_versions_say_what_to_run(monkeypatch):
    monkeypatch.setattr(tpu_aot, 'installed_versions', lambda: {'jax': '0.10.2', 'jaxlib': '0.10.2', 'libtpu': None})
    with pytest.raises(tpu_aot.TpuCompilerError, match=r'needs libtpu==0\.0\.42\.1, not installed here: run `bash launch/setup.sh`'):
        tpu_aot.check_environment()
    monkeypatch.setattr(tpu_aot, 'installed_versions', lambda: {'jax': '0.10.2', 'jaxlib': '0.10.2', 'libtpu': '0.0.21'})
    with pytest.raises(tpu_aot.TpuCompilerError, match=r'libtpu 0\.0\.21 \(pinned 0\.0\.42\.1\)'):
        tpu_aot.check_environment()


def test_max_batch_bisects_to_the_resolution():
    calls = []

    def fits(b):
        calls.append(b)
        return b <= 300
    best, probes = tpu_compile.max_per_chip_batch(fits, start=8, resolution=8)
    assert best == 296 and all(ok == (b <= 300) for b, ok in probes)
    assert calls[:7] == [8, 16, 32, 64, 128, 256, 512]
    with pytest.raises(UserError, match='even a per-chip batch of 8'):
        tpu_compile.max_per_chip_batch(lambda b: False, start=8)
    best, probes = tpu_compile.max_per_chip_batch(lambda b: b <= 300, start=256, resolution=8)
    assert best == 296 and probes[:2] == [(256, True), (512, False)]


def test_graph_figures_donation_flops_ratio_and_mfu():
    tpu_slice, _ = tpu_compile.slice_topology('v4-8')
    meta = {'global_batch': 64, 'analytic_flops_per_example': 1e12, 'donated_bytes': 100, 'what': 'train'}
    compiled = {'memory': {'argument_bytes': 200, 'output_bytes': 150, 'alias_bytes': 0, 'temp_bytes': 50,
                           'generated_code_bytes': 0, 'total_bytes': 400, 'hbm_bytes': 32 * 2 ** 30},
                'flops': 2.2e13, 'optimal_seconds': 0.5}
    r = tpu_compile.graph_figures(meta, compiled, tpu_slice)
    assert r['memory']['total_with_donation_bytes'] == 300 and r['memory']['fits']
    assert r['analytic_flops_per_chip'] == 16e12 and r['compiler_to_analytic_flops'] == pytest.approx(1.375)
    assert r['estimated_mfu'] == pytest.approx(16e12 / 0.5 / 275e12)
    assert r['estimated_step_ms'] == 500 and r['estimated_examples_per_s'] == 128


def test_loss_and_uniforms_trace_no_scatter_gather_or_64_bit_division():
    """What the compiler showed, kept fixed: a gather/scatter over the batch makes the SPMD
    partitioner gather the whole batch onto every device, and a TPU expands each 64-bit
    division into hundreds of instructions (the `>>` operator on int64 lowers to one)."""
    torch_xla = pytest.importorskip('torch_xla')
    from trm_spmd.model.losses import stablemax_cross_entropy
    from trm_spmd.model.rng import counter_uniforms
    device = torch_xla.device()
    logits = torch.randn(8, 81, 11).to(device).requires_grad_()
    labels = torch.randint(0, 11, (8, 81)).to(device)
    loss = stablemax_cross_entropy(logits, labels).sum()
    grad, = torch.autograd.grad(loss, logits)
    uniforms = counter_uniforms(3, torch.tensor(5, device=device), 8, 2)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([loss, grad, uniforms])
    assert ' scatter(' not in hlo and ' gather(' not in hlo
    assert ' shift-right-arithmetic(' in hlo and not re.search(r'= s64\[[\d,]*\]\S* divide\(', hlo)


def _compiler_or_reason():
    if sys.platform != 'linux' or platform.machine() != 'x86_64':
        return f'libtpu is published for Linux x86_64 only, not {sys.platform} {platform.machine()}'
    tpu_aot.check_environment()      # fails the test, with the command to run, when missing
    return None


@pytest.mark.slow
def test_train_step_compiled_for_v4_8_all_reduces_gradients_once_and_fits(tmp_path):
    reason = _compiler_or_reason()
    if reason:
        pytest.skip(reason)
    from conftest import run_in_subprocess
    done = run_in_subprocess(
        [os.path.join(REPO, 'benchmarks', 'tpu_compile.py'), '--config=configs/baseline.py:runlocal',
         '--config.model.forward_dtype=bfloat16', '--slice=v4-8', '--graphs=train_step', f'--out={tmp_path}'],
        devices=1, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    [path] = tmp_path.glob('tpu_compile_v4-8_*.json')
    record = json.loads(path.read_text())
    r = record['results']['graphs']['train_step']
    collectives = r['collectives']
    # Gradients and metric sums: all-reduces only, in one or a few fused groups.
    assert set(collectives) == {'all-reduce'}, collectives          # no activation all-gather
    assert collectives['all-reduce']['count'] <= 3
    params = r['parameter_bytes']
    # Every gradient is summed over the devices once per step, in float32: the parameters'
    # size plus a few metric scalars (rounded to bfloat16 per use of a weight, it was 3.5x).
    assert 0.95 * params <= collectives['all-reduce']['bytes'] <= 1.1 * params + 4096
    # bfloat16 matmuls; the weight gradients' with float32 results.
    assert set(r['matmuls']) == {'bf16 x bf16 -> bf16', 'bf16 x bf16 -> f32'}, r['matmuls']
    assert r['memory']['fits'] and r['memory']['total_with_donation_bytes'] < 2 ** 30
    assert 0.9 < r['compiler_to_analytic_flops'] < 1.5
    # The cost model's cycles, by the weight each matmul uses: every block matmul is found.
    shares = r['time_by_category']
    assert sum(shares.values()) == pytest.approx(1)
    assert {f'matmul {m}.{p}' for m in ('mlp', 'mlp_t') for p in ('gate_up_proj', 'down_proj')} <= set(shares)
    assert record['device']['devices'] == 4 and record['settings']['topology'] == 'v4:2x2x1'
    assert 'no step was run or timed' in record['notes']


@pytest.mark.slow
def test_the_token_mix_kernels_are_compiled_into_the_step_with_their_roofline(tmp_path):
    """xla.token_mix_kernel end to end without a TPU: torch_xla traces the kernels' custom
    calls under manual sharding, libtpu compiles them for a v4-8, each chip runs them on its
    own examples (no activation gathered) and the weight gradients are still summed once."""
    reason = _compiler_or_reason()
    if reason:
        pytest.skip(reason)
    from conftest import run_in_subprocess
    done = run_in_subprocess(
        [os.path.join(REPO, 'benchmarks', 'tpu_compile.py'), '--config=configs/baseline.py:runlocal',
         '--config.model.forward_dtype=bfloat16', '--config.model.hidden_size=128', '--config.xla.token_mix_kernel=True',
         '--slice=v4-8', '--graphs=train_step', f'--out={tmp_path}'],
        devices=1, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    [path] = tmp_path.glob('tpu_compile_v4-8_*.json')
    r = json.loads(path.read_text())['results']['graphs']['train_step']
    # Per block: every network call's forward, and a backward for the calls of the last cycle.
    H, L = r['H_cycles'], r['L_cycles']
    assert r['kernels']['calls'] == 2 * (H * (L + 1) + (L + 1))
    assert set(r['collectives']) == {'all-reduce'}, r['collectives']
    assert 0.95 * r['parameter_bytes'] <= r['collectives']['all-reduce']['bytes'] <= 1.1 * r['parameter_bytes'] + 4096
    assert not any(k.startswith('matmul mlp_t') for k in r['time_by_category'])
    assert r['time_by_category']['token mix kernels (roofline)'] > 0 and r['memory']['fits']


def test_projection_finds_and_uses_the_compiler_estimate(tmp_path):
    from benchmarks import projection

    def write(name, spec, batch, mfu, date, overrides=None):
        record = {'benchmark': 'tpu_compile', 'config': {'spec': spec, 'overrides': overrides or {}},
                  'settings': {'slice': 'v4-64', 'global_batch': batch}, 'environment': {'date': date},
                  'results': {'graphs': {'train_step': {'estimated_mfu': mfu}}}}
        path = tmp_path / name
        path.write_text(json.dumps(record))
        return str(path)

    old = write('tpu_compile_v4-64_a_2026-01-01.json', 'configs/baseline.py', 6144, 0.3, '2026-01-01')
    new = write('tpu_compile_v4-64_b_2026-02-01.json', 'configs/baseline.py', 6144, 0.33, '2026-02-01',
                {'data.global_batch_size': 6144})
    write('tpu_compile_v4-64_c_2026-03-01.json', 'configs/baseline.py', 768, 0.2, '2026-03-01')
    write('tpu_compile_v4-64_d_2026-03-01.json', 'configs/baseline.py', 6144, 0.2, '2026-03-01',
          {'model.hidden_size': 1024})
    find = projection.find_compiled
    assert find(str(tmp_path), 'configs/baseline.py', {'data.global_batch_size': 6144}, 'v4-64', 6144) == new
    assert find(str(tmp_path), 'configs/baseline.py', {}, 'v4-64', 6144) == new
    assert find(str(tmp_path), 'configs/scaling.py', {}, 'v4-64', 6144) is None
    assert find(str(tmp_path), 'configs/baseline.py', {}, 'v4-32', 6144) is None
    mfu, source = projection.compiled_mfu(old)
    assert mfu == 0.3 and source.startswith('compiler estimate') and 'v4-64 at batch 6144' in source
    (tmp_path / 'other.json').write_text(json.dumps({'benchmark': 'step_time', 'results': {}}))
    with pytest.raises(UserError, match='no tpu_compile result'):
        projection.compiled_mfu(str(tmp_path / 'other.json'))


def test_the_study_compiles_each_distinct_train_step_once(monkeypatch):
    from benchmarks import projection, tpu_compile_study
    monkeypatch.chdir(REPO)
    specs = tpu_compile_study.study_specs()
    runs, steps = tpu_compile_study.plan(specs)
    assert len(runs) == len(specs) and len(steps) < len(specs)
    key = {spec: [k for _, k, _ in parts] for spec, (_, parts) in runs.items()}
    base = key['configs/baseline.py:e1_1_baseline']
    # An lr, a warmup or a run length changes nothing the chip runs; EMA, batch and T/n do.
    for same in ('configs/advanced.py:lr_3e-4', 'configs/advanced.py:no_warmup', 'configs/advanced.py:longer'):
        assert key[same] == base, same
    for other in ('configs/ablations.py:ema_off', 'configs/batch_scaling.py:b256', 'configs/tn_sweep.py:t2_n2',
                  'configs/contributions.py:multi_task', 'configs/arc.py:arc1'):
        assert key[other] != base, other
    assert key['configs/urm.py:arc1'] != key['configs/arc.py:arc1'] != key['configs/urm.py:arc2']
    # Every kept result still belongs to a planned step: a field added to the schema later
    # (model.family, optim.muon_*) leaves the keys of the steps compiled before it alone.
    kept_dir = os.path.join(REPO, 'benchmarks', 'results', 'tpu_compile_study_v4-64')
    kept_keys = {name[:-len('.json')] for name in os.listdir(kept_dir) if not name.startswith('tpu_compile_study')}
    assert kept_keys == set(steps)
    shares, keys, overrides = zip(*runs['configs/contributions.py:curriculum_recursion'][1])
    assert sum(shares) == pytest.approx(1.0) and keys[2] == base[0]     # its last stage is the baseline's step
    assert overrides[0] == {'curriculum.enabled': False, 'model.H_cycles': 1, 'model.L_cycles': 2}

    # The table weighs the stages; a step that failed or was not compiled yet says so.
    def step(ms, fits=True):
        return {'train_step': {'estimated_step_ms': ms, 'analytic_flops_per_chip': 1e12,
                               'memory': {'total_with_donation_bytes': 2**30, 'fits': fits}}}
    kept = {k: step(10.0) for k in steps}
    kept[keys[0]], kept[keys[1]] = step(2.0), step(5.0)
    kept[key['configs/arc.py:arc2'][0]] = {'error': 'RESOURCE_EXHAUSTED: 40 GiB'}
    del kept[key['configs/maze.py:paper'][0]]
    tpu_slice = projection.parse_slice('v4-64')
    lines, rows = tpu_compile_study.table(runs, kept, tpu_slice)
    by_run = {row['run']: row for row in rows}
    assert by_run['configs/contributions.py:curriculum_recursion']['step_ms'] == pytest.approx(
        0.3 * 2.0 + 0.3 * 5.0 + 0.4 * 10.0, rel=1e-3)
    assert by_run['configs/arc.py:arc2']['error'].startswith('RESOURCE_EXHAUSTED')
    assert 'step_ms' not in by_run['configs/maze.py:paper']
    assert any('maze.py:paper | 768 | not compiled yet' in line for line in lines)


@pytest.mark.slow
def test_the_token_mix_benchmark_compiles_both_versions_for_one_chip():
    reason = _compiler_or_reason()
    if reason:
        pytest.skip(reason)
    from conftest import run_in_subprocess
    done = run_in_subprocess([os.path.join(REPO, 'benchmarks', 'token_mix_kernel.py'), '--rows_per_chip=4'],
                             devices=1, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith('token-mixing sublayer per chip: x [4 x 97 x 512]') and '(compile only)' in lines[0]
    for label, line in zip(('forward', 'forward+backward'), lines[1:]):
        assert re.match(rf'{re.escape(label)}: XLA \d+ MB, cost model [\d.]+ ms; kernels compiled by libtpu', line), line
        assert 'roofline' in line and 'a bound' in line


def test_an_mfu_taken_from_a_compile_with_kernels_says_it_holds_their_bound(tmp_path):
    from benchmarks import projection
    record = {'benchmark': 'tpu_compile', 'settings': {'slice': 'v4-64', 'global_batch': 768},
              'results': {'graphs': {'train_step': {'estimated_mfu': 0.4, 'kernels': {'calls': 2}}}}}
    path = tmp_path / 'tpu_compile_v4-64_x.json'
    path.write_text(json.dumps(record))
    mfu, source = projection.compiled_mfu(str(path))
    assert mfu == 0.4 and 'Pallas kernels at their roofline (a bound)' in source
    record['results']['graphs']['train_step']['kernels'] = None
    path.write_text(json.dumps(record))
    assert 'roofline' not in projection.compiled_mfu(str(path))[1]


@pytest.mark.slow
def test_the_depthwise_conv_benchmark_compiles_both_forms_for_one_chip():
    reason = _compiler_or_reason()
    if reason:
        pytest.skip(reason)
    from conftest import run_in_subprocess
    done = run_in_subprocess([os.path.join(REPO, 'benchmarks', 'depthwise_conv.py'), '--rows_per_chip=2',
                              '--positions=82'], devices=1, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == 'ConvSwiGLU forward + backward on one v4 chip: x [2 x 82 x 512], inner 1536'
    for label, line in zip(('grouped convolution', 'shift + multiply-adds'), lines[1:]):
        assert re.match(rf'  {re.escape(label)} +cost model \d+\.\d+ ms, [\d.]+ GFLOP', line), line
