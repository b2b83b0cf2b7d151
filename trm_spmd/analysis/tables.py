"""The comparison table (markdown and CSV) and the study dashboard.

Markdown is for people: percentages, thousands separators, "-" where a run has no
number yet. CSV is for tools: raw fractions and counts, empty cells where missing.
"""

import csv
import io
import json
import math

from trm_spmd.analysis.runs import cfg, tasks_of

MISSING = '-'

CSV_COLUMNS = [
    'run', 'name', 'variant', 'status',
    'best_exact_accuracy', 'best_step', 'final_exact_accuracy', 'final_step',
    'steps_done', 'total_steps', 'wall_time_s', 'time_to_best_s', 'pflop', 'examples',
    'H_cycles', 'L_cycles', 'hidden_size', 'L_layers', 'mlp_t', 'global_batch_size',
    'lr', 'optimizer', 'ema', 'halt_max_steps', 'exploration_prob',
    'exploration_prob_final', 'curriculum', 'grad_checkpointing',
    'config_file', 'overrides', 'config_hash', 'path',
]

_CONFIG_COLUMNS = {
    'H_cycles': 'model.H_cycles', 'L_cycles': 'model.L_cycles',
    'hidden_size': 'model.hidden_size', 'L_layers': 'model.L_layers', 'mlp_t': 'model.mlp_t',
    'global_batch_size': 'data.global_batch_size', 'lr': 'optim.lr', 'optimizer': 'optim.name',
    'ema': 'ema.enabled', 'halt_max_steps': 'act.halt_max_steps',
    'exploration_prob': 'act.exploration_prob',
    'exploration_prob_final': 'act.exploration_prob_final',
    'curriculum': 'curriculum.enabled', 'grad_checkpointing': 'model.grad_checkpointing',
}

# Dashboard summary order: what needs attention first.
_STATUS_ORDER = ['stale (crashed?)', 'failed', 'nan', 'preempted', 'stopped', 'running', 'starting',
                 'not started', 'done']


def _nonfinite(v):
    return 'nan' if math.isnan(v) else ('inf' if v > 0 else '-inf')


def fmt_pct(v):
    if v is None:
        return MISSING
    return f'{100 * v:.2f}%' if math.isfinite(v) else _nonfinite(v)


def fmt_int(v):
    if v is None:
        return MISSING
    return f'{int(v):,}' if math.isfinite(v) else _nonfinite(v)


def fmt_num(v):
    """4 significant digits, without exponents for the sizes a study produces."""
    if v is None:
        return MISSING
    if not math.isfinite(v):
        return _nonfinite(v)
    return f'{v:,.0f}' if abs(v) >= 1e4 else f'{v:.4g}'


def fmt_hmm(seconds):
    if seconds is None:
        return MISSING
    hours, minutes = divmod(int(round(seconds / 60)), 60)
    return f'{hours}:{minutes:02d}'


def fmt_steps(done, total):
    if done is None and total is None:
        return MISSING
    return f'{fmt_int(done)}/{fmt_int(total)}'


def fmt_age(seconds):
    if seconds is None:
        return MISSING
    seconds = max(0, seconds)
    if seconds < 90:
        return f'{int(seconds)}s ago'
    if seconds < 90 * 60:
        return f'{int(round(seconds / 60))}m ago'
    if seconds < 48 * 3600:
        hours, minutes = divmod(int(round(seconds / 60)), 60)
        return f'{hours}h{minutes:02d}m ago'
    return f'{seconds / 86400:.1f}d ago'


def summary(run):
    """One row of raw values (the CSV columns); None where the run has no value."""
    best, final = run.best_eval(), run.final_eval()
    row = {
        'run': run.label, 'name': run.name, 'variant': run.variant, 'status': run.status,
        'best_exact_accuracy': best.value if best else None,
        'best_step': best.step if best else None,
        'final_exact_accuracy': final.value if final else None,
        'final_step': final.step if final else None,
        'steps_done': run.steps_done, 'total_steps': run.total_steps,
        'wall_time_s': run.wall_s, 'time_to_best_s': best.elapsed_s if best else None,
        'pflop': run.pflop, 'examples': run.examples,
        'config_file': run.info.get('config_file'),
        'overrides': json.dumps(run.info['overrides'], sort_keys=True)
        if run.info.get('overrides') else None,
        'config_hash': run.info.get('config_hash'), 'path': run.path,
    }
    for column, key in _CONFIG_COLUMNS.items():
        row[column] = cfg(run.config, key)
    return row


def _markdown(headers, rows, right_aligned):
    cells = [[str(c).replace('|', '\\|') for c in row] for row in [headers] + rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        padded = [c.rjust(w) if i in right_aligned else c.ljust(w)
                  for i, (c, w) in enumerate(zip(row, widths))]
        return '| ' + ' | '.join(padded) + ' |'

    rule = '|' + '|'.join('-' * (w + 1) + ':' if i in right_aligned else '-' * (w + 2)
                          for i, w in enumerate(widths)) + '|'
    return '\n'.join([line(cells[0]), rule] + [line(r) for r in cells[1:]]) + '\n'


COMPARE_HEADERS = ['run', 'config', 'variant', 'status', 'best exact acc', 'best step',
                   'final exact acc', 'steps', 'wall (h:mm)', 'PFLOP', 'examples']


def task_columns(runs):
    """{CSV column: task} of each task's final held-out exact accuracy, when the runs train
    more than one task (a multi-task run beside each task alone); {} otherwise."""
    names = tasks_of(runs)
    return {f'final_exact_accuracy_{task}': task for task in names} if len(names) > 1 else {}


def _task_finals(run, columns):
    values = {}
    for column, task in columns.items():
        key = run.task_exact_key(task)
        values[column] = run.last_value(key) if key else None
    return values


def compare_markdown(runs):
    columns = task_columns(runs)
    rows = []
    for run in runs:
        s = summary(run)
        finals = _task_finals(run, columns)
        rows.append([
            s['run'], s['name'] or MISSING, s['variant'] or MISSING, s['status'],
            fmt_pct(s['best_exact_accuracy']), fmt_int(s['best_step']),
            fmt_pct(s['final_exact_accuracy']), *(fmt_pct(finals[c]) for c in columns),
            fmt_steps(s['steps_done'], s['total_steps']),
            fmt_hmm(s['wall_time_s']), fmt_num(s['pflop']), fmt_int(s['examples']),
        ])
    headers = COMPARE_HEADERS[:7] + [f'final {task} exact' for task in columns.values()] + COMPARE_HEADERS[7:]
    return _markdown(headers, rows, right_aligned=set(range(4, len(headers))))


def _csv_cell(value):
    if value is None:
        return ''
    if isinstance(value, float) and not math.isfinite(value):
        return _nonfinite(value)
    return value


def compare_csv(runs):
    extra = task_columns(runs)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator='\n')
    writer.writerow(CSV_COLUMNS + list(extra))
    for run in runs:
        s = summary(run) | _task_finals(run, extra)
        writer.writerow([_csv_cell(s[c]) for c in CSV_COLUMNS + list(extra)])
    return out.getvalue()


STATUS_HEADERS = ['run', 'config', 'variant', 'status', 'steps', 'best exact acc',
                  'last update', 'message']


def status_counts(runs):
    counts = {}
    for run in runs:
        counts[run.status] = counts.get(run.status, 0) + 1
    order = {s: i for i, s in enumerate(_STATUS_ORDER)}
    return sorted(counts.items(), key=lambda kv: (order.get(kv[0], -1), kv[0]))


def status_markdown(runs, now):
    rows = []
    for run in runs:
        best = run.best_eval()
        best_text = fmt_pct(best.value if best else None)
        if best and best.step is not None:
            best_text += f' @ {best.step:,}'
        age = now - run.last_activity if run.last_activity is not None else None
        message = ' '.join(str(run.info.get('message') or '').split())
        rows.append([run.label, run.name or MISSING, run.variant or MISSING, run.status,
                     fmt_steps(run.steps_done, run.total_steps), best_text, fmt_age(age),
                     message[:80] or MISSING])
    counts = ', '.join(f'{n} {status}' for status, n in status_counts(runs))
    noun = 'run' if len(runs) == 1 else 'runs'
    return (_markdown(STATUS_HEADERS, rows, right_aligned={4, 5, 6})
            + f'\n{len(runs)} {noun}: {counts}\n')
