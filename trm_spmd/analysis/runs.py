"""Reading run directories written by the training loop.

A run directory holds `config.json` (the resolved config), `run.json` (launch record and
final status) and `metrics.jsonl` (one JSON object per logged line). Everything here
tolerates partial directories: a run still starting, a killed process that left a
truncated last line, a run resumed after preemption whose steps repeat. Paths may be
local or on a bucket (gs://, or any fsspec URL): every file access goes through trm_spmd.fs.
"""

import dataclasses
import json
import math
import os
import re
import time

from trm_spmd import errors, fs

CONFIG_FILE = 'config.json'
RUN_FILE = 'run.json'
METRICS_FILE = 'metrics.jsonl'

EVAL_EXACT = 'eval/exact_accuracy'
DIFFICULTY_PREFIX = 'eval_by_difficulty/'
ACT_STEPS_PREFIX = 'eval_at_act_steps/'

NOT_STARTED = 'not started'
STARTING = 'starting'
RUNNING = 'running'
STALE = 'stale (crashed?)'
DEFAULT_STALE_AFTER_S = 30 * 60


class RunDiscoveryError(errors.UserError):
    """Nothing the user named is, or contains, a run directory."""


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def natural_key(text):
    """Sorts 'b256' before 'b1024': numbers inside names compare as numbers."""
    return [(0, int(part), '') if part.isdigit() else (1, 0, part)
            for part in re.split(r'(\d+)', text) if part]


def cfg(config, dotted, default=None):
    """config['a']['b'] for 'a.b'; `default` when any level is missing."""
    node = config
    for part in dotted.split('.'):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


@dataclasses.dataclass
class Point:
    step: int
    value: float
    elapsed_s: float | None  # training wall time from the first line to this one


@dataclasses.dataclass
class Run:
    path: str
    config: dict
    info: dict                  # run.json; {} before the launcher wrote it
    records: list               # one dict per step, ascending
    elapsed: dict               # step -> Point.elapsed_s
    wall_s: float | None
    last_activity: float | None  # unix time of the newest sign of life
    status: str
    label: str = ''
    warnings: list = dataclasses.field(default_factory=list)

    @property
    def name(self):
        return str(cfg(self.config, 'name', '') or '')

    @property
    def variant(self):
        return str(cfg(self.config, 'variant', '') or '')

    @property
    def tasks(self):
        """The task families the run trains: data.mixture's, else data.task (runs before
        data.task existed were Sudoku)."""
        return tuple(cfg(self.config, 'data.mixture') or ()) or (str(cfg(self.config, 'data.task', 'sudoku')),)

    def task_exact_key(self, task):
        """The key of `task`'s held-out exact accuracy in this run's metrics; None when the
        run does not train it (a mixture logs each task's as eval/<task>/exact_accuracy)."""
        if task not in self.tasks:
            return None
        return f'eval/{task}/exact_accuracy' if len(self.tasks) > 1 else EVAL_EXACT

    def sort_key(self):
        return (natural_key(self.name), natural_key(self.variant), natural_key(self.label))

    def series(self, key):
        """[(step, value)] of the records holding a number under `key`."""
        return [(r['step'], r[key]) for r in self.records if is_number(r.get(key))]

    def last_value(self, key):
        points = self.series(key)
        return points[-1][1] if points else None

    @property
    def steps_done(self):
        return self.records[-1]['step'] if self.records else None

    @property
    def total_steps(self):
        total = self.info.get('total_steps')
        return int(total) if is_number(total) and total > 0 else None

    def _point(self, step, value):
        return Point(step, value, self.elapsed.get(step))

    def best_eval(self):
        """Highest eval exact accuracy (earliest step on ties); NaN only if every eval was NaN."""
        points = self.series(EVAL_EXACT)
        if not points:
            return None
        real = [(s, v) for s, v in points if not math.isnan(v)]
        if not real:
            return Point(None, math.nan, None)
        step, value = max(real, key=lambda sv: (sv[1], -sv[0]))
        return self._point(step, value)

    def final_eval(self):
        points = self.series(EVAL_EXACT)
        return self._point(*points[-1]) if points else None

    @property
    def examples(self):
        value = self.last_value('progress/examples')
        return int(value) if value is not None and math.isfinite(value) else value

    @property
    def flops_per_example(self):
        flops = self.info.get('flops_per_example_step')
        return flops if is_number(flops) and flops > 0 else None

    @property
    def pflop(self):
        """Cumulative training compute, from the log or from FLOPs/example x examples."""
        logged = self.last_value('progress/pflop')
        if logged is not None:
            return logged
        if self.flops_per_example is not None and self.examples is not None:
            return self.flops_per_example * self.examples / 1e15
        return None

    def pflop_at(self, steps):
        """Cumulative PFLOP at each step (eval lines usually carry none); None if unknown."""
        known = [(s, v) for s, v in self.series('progress/pflop') if math.isfinite(v)]
        scale = 1.0
        if not known and self.flops_per_example is not None:
            known = [(s, v) for s, v in self.series('progress/examples') if math.isfinite(v)]
            scale = self.flops_per_example / 1e15
        if not known:
            return [None] * len(steps)
        return [_interpolate(known, s) * scale for s in steps]

    def act_steps_curve(self):
        """[(ACT steps, exact accuracy)] of the newest eval that reported other depths
        (eval.report_act_steps), with its own depth; None when no eval did."""
        for record in reversed(self.records):
            points = {int(k.split('/')[1]): v for k, v in record.items()   # not a mixture's per-task ones
                      if k.startswith(ACT_STEPS_PREFIX) and k.count('/') == 2 and k.endswith('/exact_accuracy')
                      and is_number(v)}
            if points and is_number(record.get(EVAL_EXACT)) and is_number(record.get('eval/steps')):
                points[round(record['eval/steps'])] = record[EVAL_EXACT]
                return sorted(points.items())
        return None

    def last_difficulty(self, by_task=False):
        """(step, {bucket label: exact accuracy}) of the newest eval with difficulty buckets;
        by_task: every label as <task>/<bucket> (a mixture logs its buckets so)."""
        prefix = f'{self.tasks[0]}/' if by_task and len(self.tasks) == 1 else ''
        for record in reversed(self.records):
            buckets = {prefix + k[len(DIFFICULTY_PREFIX):]: v for k, v in record.items()
                       if k.startswith(DIFFICULTY_PREFIX) and is_number(v)}
            if buckets:
                return record['step'], buckets
        return None


def _interpolate(points, step):
    """Linear in step between logged points; proportional to step outside them, since
    cumulative compute starts at zero and grows with every step."""
    first_step, first = points[0]
    last_step, last = points[-1]
    if step <= first_step:
        return first * step / first_step if first_step > 0 else first
    if step >= last_step:
        return last * step / last_step if last_step > 0 else last
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if s0 <= step <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return last


def _parse_line(line):
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    step = record.get('step')
    if isinstance(step, float) and math.isfinite(step) and step == int(step):
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    record['step'] = step
    if not (is_number(record.get('time')) and math.isfinite(record['time'])):
        record.pop('time', None)
    return record


def read_metrics(path):
    """(well-formed lines in file order, warnings). A malformed last line is a writer killed
    mid-line and is skipped quietly; malformed lines elsewhere are reported."""
    try:
        text = fs.read_bytes(path).decode('utf-8', errors='replace')
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f'{path}: unreadable ({e.strerror}); metrics ignored']
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records, warnings = [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        record = _parse_line(line)
        if record is None:
            if i != last:
                warnings.append(f'{path}:{i + 1}: not a metrics record; skipped')
            continue
        records.append(record)
    return records, warnings


def merge_lines(lines):
    """(records, elapsed, wall_s). Later lines for a step override earlier values (a resumed
    run repeats the steps after its checkpoint). A step going backwards starts a new
    segment, so wall time sums the segments and leaves out the downtime between them."""
    by_step, elapsed = {}, {}
    done_s, seg_first, seg_last, prev_step, timed = 0.0, None, None, None, False
    for line in lines:
        step, t = line['step'], line.get('time')
        if prev_step is not None and step < prev_step and seg_first is not None:
            done_s += seg_last - seg_first
            seg_first = seg_last = None
        if t is not None:
            timed = True
            seg_first = t if seg_first is None else seg_first
            seg_last = t if seg_last is None else max(seg_last, t)
            elapsed[step] = done_s + (t - seg_first)
        prev_step = step
        by_step.setdefault(step, {}).update(line)
    records = [by_step[s] for s in sorted(by_step)]
    if not timed:
        return records, elapsed, None
    wall = done_s + (seg_last - seg_first if seg_first is not None else 0.0)
    return records, elapsed, wall


def _read_json(path, warnings):
    try:
        data = json.loads(fs.read_bytes(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        # run.json is rewritten while the run lives; a torn read is retried by the next look.
        warnings.append(f'{path}: unreadable ({e}); ignored')
        return {}
    if not isinstance(data, dict):
        warnings.append(f'{path}: not a JSON object; ignored')
        return {}
    return data


def _mtime(path):
    try:
        return fs.getmtime(path)
    except OSError:
        return None


def classify(info, records, last_activity, now, stale_after_s):
    """The run's status. run.json's own status wins unless it still says 'running': a
    process killed hard never gets to change it, so silence longer than `stale_after_s`
    marks the run stale."""
    status = str(info.get('status') or '').strip().lower()
    if status and status != RUNNING:
        return status
    quiet = last_activity is None or now - last_activity > stale_after_s
    if not records:
        if not info:
            return NOT_STARTED
        return STALE if quiet else STARTING
    return STALE if quiet else RUNNING


def load_run(path, now=None, stale_after_s=DEFAULT_STALE_AFTER_S):
    now = time.time() if now is None else now
    warnings = []
    config = _read_json(fs.join(path, CONFIG_FILE), warnings)
    info = _read_json(fs.join(path, RUN_FILE), warnings)
    lines, metric_warnings = read_metrics(fs.join(path, METRICS_FILE))
    warnings.extend(metric_warnings)
    records, elapsed, wall = merge_lines(lines)
    times = [line['time'] for line in lines if 'time' in line]
    signs = [t for t in (max(times, default=None), _mtime(fs.join(path, RUN_FILE)))
             if t is not None]
    last_activity = max(signs) if signs else None
    status = classify(info, records, last_activity, now, stale_after_s)
    return Run(path=path, config=config, info=info, records=records, elapsed=elapsed,
               wall_s=wall, last_activity=last_activity, status=status, warnings=warnings)


def _has_glob(pattern):
    return any(c in pattern for c in '*?[')


def _walk(top):
    """Run directories at or under `top`. A run dir is not searched further, since its
    checkpoints may carry their own copy of config.json."""
    for root, dirs, files in fs.walk(top):
        if CONFIG_FILE in files:
            dirs[:] = []
            yield root
        else:
            dirs[:] = sorted(d for d in dirs if not d.startswith('.'))


def _identity(path):
    """What makes two spellings of a run directory the same one."""
    return path if fs.is_remote(path) else os.path.realpath(path)


def _absolute(path):
    return path if fs.is_remote(path) else os.path.abspath(path)


def _matches(pattern):
    """The paths a command-line argument names: itself, or what its glob matches."""
    if not fs.is_remote(pattern):
        pattern = os.path.expanduser(pattern)
    return fs.glob(pattern) if _has_glob(pattern) else [pattern]


def find_run_dirs(patterns):
    found, seen = [], set()
    for pattern in patterns:
        matches = _matches(pattern)
        if not matches:
            raise RunDiscoveryError(
                f'{pattern!r} matches nothing; pass run directories, globs, or a study root')
        for match in matches:
            if fs.isfile(match) and os.path.basename(match) in (
                    CONFIG_FILE, RUN_FILE, METRICS_FILE):
                match = os.path.dirname(match) or '.'
            if not fs.isdir(match):
                if not _has_glob(pattern):
                    raise RunDiscoveryError(
                        f'{match!r} is not a directory; pass run directories, globs, '
                        f'or a study root')
                continue
            for run_dir in _walk(match):
                key = _identity(run_dir)
                if key not in seen:
                    seen.add(key)
                    found.append(_absolute(run_dir))
    if not found:
        raise RunDiscoveryError(
            f'no run directory (one holding {CONFIG_FILE}) at or under '
            f'{", ".join(patterns)}; pass run directories, globs, or a study root')
    return found


def _labels(paths):
    """Each path relative to the deepest directory above all of them ('tn_sweep/t3_n6');
    one path is labeled by its last part."""
    parts = [p.rstrip('/').split('/') for p in paths]
    depth = 0
    while (all(len(p) > depth + 1 for p in parts)
           and len({p[depth] for p in parts}) == 1):
        depth += 1
    return ['/'.join(p[depth:]) for p in parts]


def load_runs(patterns, now=None, stale_after_s=DEFAULT_STALE_AFTER_S):
    """Every run at or under `patterns`, labeled relative to their common root and sorted
    by config name, then variant."""
    paths = find_run_dirs(patterns)
    runs = [load_run(p, now=now, stale_after_s=stale_after_s) for p in paths]
    for run, label in zip(runs, _labels(paths)):
        run.label = label
    return sorted(runs, key=Run.sort_key)


def tasks_of(runs):
    """Every task family the runs train: a mixture's in its order first, then the others'."""
    return list(dict.fromkeys(task for run in sorted(runs, key=lambda r: -len(r.tasks)) for task in run.tasks))
