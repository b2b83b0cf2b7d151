"""What every benchmark shares: the config flag, the result flags, synthetic batches, timing
statistics, and the result record written as NAME_<device>_<date>.{json,md}.

Every benchmark takes the trainer's config syntax (`--config=FILE.py[:ARG]` plus
`--config.a.b=VALUE` overrides) and `--out`, `--tag`, `--notes`, `--device_kind`.
"""

import json
import os
import sys

import numpy as np
from absl import flags

if __package__ in (None, ''):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import peaks  # noqa: E402
from trm_spmd import errors, fs  # noqa: E402
from trm_spmd.config.flags import check_config_argv, config_source, define_config_flag  # noqa: E402

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results')
DEFAULT_CONFIG = 'configs/baseline.py'
BLANK_TOKEN = 1            # Sudoku's token ids: 0 pad, 1 empty cell, 2..10 digits 1..9

FLAGS = flags.FLAGS


def define_flags(config_help='config FILE.py[:ARG]; override fields with --config.a.b=VALUE'):
    define_config_flag(DEFAULT_CONFIG, config_help)
    flags.DEFINE_string('device_kind', '', 'name the hardware for the peak table when detection cannot (e.g. v5e)')
    flags.DEFINE_string('out', '', 'directory for the result files (default benchmarks/results)')
    flags.DEFINE_string('tag', '', 'suffix of the result file name, e.g. the config name')
    flags.DEFINE_string('notes', '', 'free text stored with the result (e.g. what else ran on the machine)')


def run(define_flags, main):
    """Defines the benchmark's flags and runs `main` under absl; a bad config file, argument
    or override key is one line and exit 2. (A config flag with a default loads its file
    when it is defined, so the check runs first.)"""
    def before_flags(argv):
        check_config_argv(argv, DEFAULT_CONFIG)
        define_flags()
    errors.run_main(main, before_flags)


def config_and_overrides(**changes):
    """(FLAGS.config with `changes` applied, {key: value} of everything the command line changed).

    changes: dotted config keys set by a benchmark's own flags, e.g. from --global_batch;
    a value of 0 or None leaves the field alone.
    """
    config = FLAGS.config
    overrides = dict(config_source()['overrides'])
    for key, value in changes.items():
        if value:
            *parents, leaf = key.split('.')
            node = config
            for part in parents:
                node = node[part]
            node[leaf] = value
            overrides[key] = value
    return config, overrides


def synthetic_batch(rng, rows, num_puzzle_identifiers=None, blank_fraction=0.6, config=None):
    """One host batch as the loader gives it, of the sizes of the config's task (default
    Sudoku's): int32 inputs [rows, seq_len] in 1..vocab-1, labels in 2..vocab-1, identifiers
    drawn from the task's table (default one entry). Its cost does not depend on the values
    (fixed shapes, halting by masking)."""
    from trm_spmd import tasks
    sizes = tasks.sizes(config) if config is not None else tasks.get('sudoku').sizes(None)
    num_puzzle_identifiers = num_puzzle_identifiers or sizes.get('num_puzzle_identifiers', 1)
    shape = (rows, sizes['seq_len'])
    labels = rng.integers(2, sizes['vocab_size'], size=shape, dtype=np.int32)
    inputs = np.where(rng.random(shape) < blank_fraction, BLANK_TOKEN, labels).astype(np.int32)
    ids = rng.integers(0, num_puzzle_identifiers, size=rows, dtype=np.int32)
    return {'inputs': inputs, 'labels': labels, 'puzzle_identifiers': ids}


class SyntheticTestSplit(list):
    """Synthetic test batches handed to the Evaluator in place of a test split's loader: the
    batches, and the examples they hold (the loader's num_examples)."""

    def __init__(self, batches=(), num_examples=0):
        super().__init__(batches)
        self.num_examples = num_examples


def stats_ms(seconds):
    ms = np.asarray(seconds) * 1e3
    return {'median': float(np.median(ms)), 'p90': float(np.percentile(ms, 90)), 'mean': float(ms.mean()),
            'min': float(ms.min()), 'max': float(ms.max())}


def fmt(value, spec):
    return 'n/a' if value is None else spec.format(value)


def report(benchmark, device, settings, results, lines, main_host=True, overrides=None, extra=None, notes=''):
    """Prints `lines` and writes the result record (host 0 only); returns the .json path.

    device: peaks.Device (or a dict with at least 'slug'); extra: more top-level record keys;
    notes: the benchmark's own caveat, stored with --notes.
    """
    if not main_host:
        return None
    print('\n'.join(lines), flush=True)
    if overrides is None:
        _, overrides = config_and_overrides()
    device = device if isinstance(device, dict) else {**vars(device), 'slug': device.slug}
    env = peaks.environment()
    auto = peaks.contention_note(env) if device.get('kind') in ('cpu', 'unknown') else ''
    record = {
        'benchmark': benchmark,
        'config': {'spec': config_source()['config_file'], 'overrides': overrides},
        'device': device,
        'settings': settings,
        'results': results,
        'environment': env,
        'notes': ' '.join(n for n in (FLAGS.notes, notes, auto) if n),
        **(extra or {}),
    }
    out_dir = FLAGS.out or RESULTS_DIR
    base = fs.join(out_dir, f'{benchmark}_{device["slug"]}' + (f'_{FLAGS.tag}' if FLAGS.tag else '')
                   + f'_{env["date"][:10]}')
    fs.write_text(base + '.json', json.dumps(record, indent=2, sort_keys=True, default=str) + '\n')
    fs.write_text(base + '.md', _markdown(record, lines))
    print(f'result: {base}.json', flush=True)
    return base + '.json'


def _markdown(record, lines):
    env, device = record['environment'], record['device']
    title = f'# {record["benchmark"]}: {device.get("slug", "?")}, {env["date"][:10]}'
    versions = ', '.join(f'{k} {env[k]}' for k in ('python', 'torch', 'torch_xla', 'numpy', 'trm_spmd')
                         if env.get(k))
    rows = [title, '', '```', *lines, '```', '',
            '| | |', '|---|---|',
            f'| config | `{record["config"]["spec"]}` |',
            f'| overrides | `{json.dumps(record["config"]["overrides"], sort_keys=True)}` |',
            f'| device | {device.get("description", device.get("slug", ""))} |']
    for key in ('devices', 'hosts', 'mesh', 'backend', 'peak_tflops'):
        if key in device:
            rows.append(f'| {key.replace("_", " ")} | {device[key] if device[key] is not None else "n/a"} |')
    rows += [f'| settings | `{json.dumps(record["settings"], sort_keys=True, default=str)}` |',
             f'| versions | {versions} |',
             f'| commit | {env.get("git_commit") or "?"} |',
             f'| host | {env.get("hostname")}, {env.get("cpu_cores")} CPU cores, '
             f'load average {fmt(env.get("load_average_1m"), "{:.2f}")} |',
             f'| date | {env["date"]} |',
             f'| notes | {record["notes"] or "-"} |', '']
    return '\n'.join(rows)
