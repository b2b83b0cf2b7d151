"""trm_spmd.analysis on a synthetic study: exact table values, statuses, CSV, plots, on a
disk and on a bucket (fsspec's memory filesystem standing in for gs://)."""

import csv
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from trm_spmd.analysis import load_runs, tables
from trm_spmd.analysis.__main__ import UsageError, main
from trm_spmd.analysis.plots import BaselineError, MatplotlibMissing, pareto_front
from trm_spmd.analysis.runs import RunDiscoveryError, read_metrics
from trm_spmd.errors import UserError

NOW = time.time()
OLD = NOW - 3 * 86400  # long finished, or long dead
PLOT_FILES = ['learning_curves.png', 'accuracy_vs_compute.png', 'ablations.png',
              'tn_heatmap.png', 'batch_scaling.png', 'pareto.png', 'difficulty.png', 'act_steps.png']


def write_run(root, rel, name, variant, *, T=3, n=6, batch=768, lr=1e-4, ema=True,
              status='done', total=1000, flops=None, lines=None, tail='', message='',
              run_json=True, run_json_mtime=None, data=None):
    d = root / rel
    d.mkdir(parents=True)
    config = {
        'name': name, 'variant': variant,
        'model': {'H_cycles': T, 'L_cycles': n, 'hidden_size': 512, 'L_layers': 2,
                  'mlp_t': True, 'grad_checkpointing': False},
        'data': {'global_batch_size': batch, **(data or {})},
        'optim': {'lr': lr, 'name': 'adam_atan2'},
        'ema': {'enabled': ema},
        'act': {'halt_max_steps': 16, 'exploration_prob': 0.1, 'exploration_prob_final': 0.1},
        'curriculum': {'enabled': False},
    }
    (d / 'config.json').write_text(json.dumps(config))
    if run_json:
        info = {'config_file': f'configs/{name}.py:{variant}', 'overrides': {},
                'config_hash': 'ab12', 'flops_per_example_step': flops, 'total_steps': total,
                'started': OLD, 'ended': None, 'status': status, 'message': message}
        (d / 'run.json').write_text(json.dumps(info))
        if run_json_mtime is not None:
            os.utime(d / 'run.json', (run_json_mtime, run_json_mtime))
    if lines is not None:
        text = ''.join(json.dumps(line) + '\n' for line in lines) + tail
        (d / 'metrics.jsonl').write_text(text)
    return d


def train_lines(t0, steps, batch=768, pflop_per_step=0.002, sec_per_step=1.0, floor=0.1):
    return [{'step': s, 'time': t0 + s * sec_per_step, 'train/loss': floor + 2.0 / (1 + s / 100),
             'progress/examples': s * batch, 'progress/pflop': s * pflop_per_step,
             'perf/step_ms': 50.0} for s in steps]


def eval_line(t0, step, acc, sec_per_step=1.0, **extra):
    return {'step': step, 'time': t0 + step * sec_per_step + 0.5,
            'eval/exact_accuracy': acc, 'eval/accuracy': 0.9, **extra}


def by_step(lines):
    return sorted(lines, key=lambda line: (line['step'], 'eval/exact_accuracy' in line))


@pytest.fixture(scope='module')
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp('study')
    steps = range(0, 1001, 100)
    for T in (1, 2, 3):
        for n in (2, 4, 6):
            if (T, n) == (1, 6):
                continue  # a hole in the grid: the heatmap shows n/a
            best = round(0.1 * T + 0.05 * n, 4)
            write_run(root, f'tn_sweep/t{T}_n{n}', 'tn_sweep', f't{T}_n{n}', T=T, n=n,
                      lines=by_step(train_lines(OLD, steps, pflop_per_step=0.001 * T * n,
                                                floor=0.6 - best)
                                    + [eval_line(OLD, 500, best),
                                       eval_line(OLD, 1000, best - 0.02)]))
    for i, batch in enumerate((256, 512, 1024, 2048)):
        sec = 4.0 / 2 ** i
        write_run(root, f'batch_scaling/b{batch}', 'batch_scaling', f'b{batch}', batch=batch,
                  lr=1e-4 * batch / 256,
                  lines=by_step(train_lines(OLD, steps, batch, 0.002 * batch / 768, sec,
                                            floor=0.3 - 0.05 * i)
                                + [eval_line(OLD, 500, 0.5 + 0.05 * i, sec),
                                   eval_line(OLD, 1000, 0.55 + 0.04 * i, sec)]))
    # Train and eval in one line, every 100 steps 9 s apart: wall 2:30.
    difficulty = {'eval_by_difficulty/rating_0': 0.99, 'eval_by_difficulty/rating_1-3': 0.9,
                  'eval_by_difficulty/rating_4-15': 0.7, 'eval_by_difficulty/rating_16+': 0.4}
    base = train_lines(OLD, steps, sec_per_step=9.0, floor=0.02)
    base[5].update({'eval/exact_accuracy': 0.8125})
    # Its last eval also reports other depths (eval.report_act_steps): test-time recursion.
    depths = {f'eval_at_act_steps/{k}/exact_accuracy': v for k, v in ((1, 0.05), (4, 0.5), (8, 0.75), (32, 0.9))}
    base[10].update({'eval/exact_accuracy': 0.875, 'eval/steps': 16.0, **difficulty, **depths})
    write_run(root, 'baseline/e1_1_baseline', 'baseline', 'e1_1_baseline', lines=base)
    write_run(root, 'ablations/no_ema', 'ablations', 'no_ema', ema=False,
              lines=by_step(train_lines(OLD, steps) + [
                  eval_line(OLD, 1000, 0.85, **{'eval_by_difficulty/rating_0': 0.97,
                                                'eval_by_difficulty/rating_16+': 0.35})]))
    # Killed hard: status still 'running', silent for days, half a line at the end.
    write_run(root, 'ablations/attention', 'ablations', 'attention', status='running',
              run_json_mtime=OLD,
              lines=by_step(train_lines(OLD, range(0, 601, 100)) + [eval_line(OLD, 500, 0.5)]),
              tail='{"step": 700, "time": 17000, "train/lo')
    nan_lines = train_lines(OLD, range(0, 401, 100))
    nan_lines[3]['train/loss'] = float('nan')
    nan_lines += [eval_line(OLD, 200, 0.25), eval_line(OLD, 400, float('nan'))]
    write_run(root, 'ablations/lr_high', 'ablations', 'lr_high', status='nan', lr=1e-2,
              lines=by_step(nan_lines), message='non-finite loss at step 300')
    # Preempted at 600, resumed from the step-400 checkpoint an hour later: 500 repeats.
    first = by_step(train_lines(OLD, range(0, 601, 100)) + [eval_line(OLD, 500, 0.6)])
    later = OLD + 4000
    second = by_step(train_lines(later - 400, range(400, 1001, 100))
                     + [eval_line(later - 400, 500, 0.62), eval_line(later - 400, 1000, 0.7)])
    write_run(root, 'ablations/resumed', 'ablations', 'resumed', lines=first + second)
    write_run(root, 'ablations/live', 'ablations', 'live', status='running',
              lines=train_lines(NOW - 300, range(0, 201, 100)))
    write_run(root, 'ablations/failed', 'ablations', 'failed', status='failed',
              lines=train_lines(OLD, range(0, 101, 100)), message='RESOURCE_EXHAUSTED: HBM')
    write_run(root, 'model_scaling/h1024', 'model_scaling', 'h1024', run_json=False)
    write_run(root, 'model_scaling/h2048', 'model_scaling', 'h2048', status='running')
    return root


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def parse_markdown(text):
    rows = [line for line in text.splitlines() if line.startswith('|')]
    split = [[c.strip() for c in line.strip('|').split(' | ')] for line in rows]
    header, body = split[0], split[2:]
    return header, {row[0]: dict(zip(header, row)) for row in body}, [row[0] for row in body]


def test_compare_table_values(study, capsys):
    code, out, _ = run_cli(capsys, 'compare', study)
    assert code == 0
    header, rows, order = parse_markdown(out)
    assert header == ['run', 'config', 'variant', 'status', 'best exact acc', 'best step',
                      'final exact acc', 'steps', 'wall (h:mm)', 'PFLOP', 'examples']
    assert len(rows) == 21
    assert rows['baseline/e1_1_baseline'] == {
        'run': 'baseline/e1_1_baseline', 'config': 'baseline', 'variant': 'e1_1_baseline',
        'status': 'done', 'best exact acc': '87.50%', 'best step': '1,000',
        'final exact acc': '87.50%', 'steps': '1,000/1,000', 'wall (h:mm)': '2:30',
        'PFLOP': '2', 'examples': '768,000'}
    t3n6 = rows['tn_sweep/t3_n6']
    assert (t3n6['best exact acc'], t3n6['best step'], t3n6['final exact acc']) == (
        '60.00%', '500', '58.00%')
    assert t3n6['PFLOP'] == '18'
    crashed = rows['ablations/attention']
    assert crashed['status'] == 'stale (crashed?)'
    assert (crashed['best exact acc'], crashed['steps']) == ('50.00%', '600/1,000')
    nan = rows['ablations/lr_high']
    assert (nan['status'], nan['best exact acc'], nan['best step'], nan['final exact acc']) == (
        'nan', '25.00%', '200', 'nan')
    resumed = rows['ablations/resumed']
    assert (resumed['best exact acc'], resumed['final exact acc'], resumed['steps'],
            resumed['wall (h:mm)']) == ('70.00%', '70.00%', '1,000/1,000', '0:20')
    not_started = rows['model_scaling/h1024']
    assert not_started['status'] == 'not started'
    assert {not_started[k] for k in header[4:]} == {'-'}
    assert rows['model_scaling/h2048']['steps'] == '-/1,000'
    assert rows['ablations/failed']['best exact acc'] == '-'
    # Sorted by config name, then variant.
    assert order[:7] == ['ablations/attention', 'ablations/failed', 'ablations/live',
                         'ablations/lr_high', 'ablations/no_ema', 'ablations/resumed',
                         'baseline/e1_1_baseline']
    assert order[-1] == 'tn_sweep/t3_n6'
    assert order[7:11] == ['batch_scaling/b256', 'batch_scaling/b512', 'batch_scaling/b1024',
                           'batch_scaling/b2048']


def test_compare_csv_and_files(study, tmp_path, capsys):
    out_dir = tmp_path / 'tables'
    code, out, _ = run_cli(capsys, 'compare', study, '--out', out_dir)
    assert code == 0
    assert (out_dir / 'compare.md').read_text() == out
    with open(out_dir / 'compare.csv') as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames
        rows = {row['run']: row for row in reader}
    assert columns[:14] == ['run', 'name', 'variant', 'status', 'best_exact_accuracy',
                            'best_step', 'final_exact_accuracy', 'final_step', 'steps_done',
                            'total_steps', 'wall_time_s', 'time_to_best_s', 'pflop',
                            'examples']
    assert {'H_cycles', 'L_cycles', 'global_batch_size', 'lr', 'ema'} <= set(columns)
    base = rows['baseline/e1_1_baseline']
    assert (base['best_exact_accuracy'], base['best_step'], base['steps_done'],
            base['total_steps'], base['pflop'], base['examples'], base['wall_time_s']) == (
        '0.875', '1000', '1000', '1000', '2.0', '768000', '9000.0')
    assert rows['ablations/lr_high']['final_exact_accuracy'] == 'nan'
    assert rows['ablations/no_ema']['ema'] == 'False'
    assert rows['tn_sweep/t2_n4']['H_cycles'] == '2'
    assert rows['model_scaling/h1024']['best_exact_accuracy'] == ''

    code, out, _ = run_cli(capsys, 'compare', study, '--format=csv')
    assert code == 0 and out.splitlines()[0].startswith('run,name,variant,status,')


def test_status_classifies_every_run(study, capsys):
    code, out, _ = run_cli(capsys, 'status', study)
    assert code == 0
    _, rows, _ = parse_markdown(out)
    statuses = {label: row['status'] for label, row in rows.items()}
    assert statuses['ablations/attention'] == 'stale (crashed?)'
    assert statuses['ablations/live'] == 'running'
    assert statuses['ablations/failed'] == 'failed'
    assert statuses['ablations/lr_high'] == 'nan'
    assert statuses['model_scaling/h1024'] == 'not started'
    assert statuses['model_scaling/h2048'] == 'starting'
    assert statuses['tn_sweep/t1_n2'] == 'done'
    assert rows['ablations/attention']['steps'] == '600/1,000'
    assert rows['baseline/e1_1_baseline']['best exact acc'] == '87.50% @ 1,000'
    assert rows['ablations/failed']['message'] == 'RESOURCE_EXHAUSTED: HBM'
    assert ('21 runs: 1 stale (crashed?), 1 failed, 1 nan, 1 running, 1 starting, '
            '1 not started, 15 done') in out

    # A generous --stale_after turns the silent run back into a running one.
    _, out, _ = run_cli(capsys, 'status', study / 'ablations', '--stale_after=100000')
    assert parse_markdown(out)[1]['attention']['status'] == 'running'


def test_stale_without_metrics_and_globs(study, tmp_path, capsys):
    write_run(tmp_path, 'x/dead', 'x', 'dead', status='running', run_json_mtime=OLD)
    assert load_runs([str(tmp_path / 'x')])[0].status == 'stale (crashed?)'
    code, out, _ = run_cli(capsys, 'compare', study / 'tn_sweep' / 't3_*')
    _, rows, _ = parse_markdown(out)
    assert code == 0 and sorted(rows) == ['t3_n2', 't3_n4', 't3_n6']


def test_metrics_reader_tolerates_damage(tmp_path):
    path = tmp_path / 'metrics.jsonl'
    path.write_text('{"step": 1, "x": NaN, "y": Infinity}\nnot json\n'
                    '{"step": 1, "x": 2.0}\n{"step": 2, "x": 3')
    lines, warnings = read_metrics(path)
    assert [line['step'] for line in lines] == [1, 1]
    assert len(warnings) == 1 and ':2:' in warnings[0]  # the truncated tail is not reported
    assert lines[0]['y'] == float('inf')


def test_resumed_run_later_lines_win(study):
    (run,) = load_runs([str(study / 'ablations' / 'resumed')])
    assert run.series('eval/exact_accuracy') == [(500, 0.62), (1000, 0.7)]
    # Two 600 s segments; the hour between them is downtime, not training.
    assert run.wall_s == pytest.approx(1200.5)
    assert run.best_eval().elapsed_s == pytest.approx(1200.5)
    (base,) = load_runs([str(study / 'baseline')])
    assert base.pflop_at([550, 1000, 2000]) == pytest.approx([1.1, 2.0, 4.0])


def test_pflop_from_flops_per_example(tmp_path):
    lines = [{'step': 10, 'time': OLD, 'progress/examples': 5000, 'train/loss': 1.0}]
    write_run(tmp_path, 'r', 'x', 'y', flops=4e10, lines=lines)
    (run,) = load_runs([str(tmp_path / 'r')])
    assert run.pflop == pytest.approx(4e10 * 5000 / 1e15)
    assert run.label == 'r'


def test_pareto_front():
    points = [(1.0, 10.0), (2.0, 5.0), (3.0, 20.0), (4.0, 20.0), (0.5, 1.0), (3.0, 15.0)]
    assert pareto_front(points) == [4, 0, 2]


def test_plot_writes_every_png(study, tmp_path, capsys):
    pytest.importorskip('matplotlib')
    out_dir = tmp_path / 'plots'
    code, out, _ = run_cli(capsys, 'plot', study, '--out', out_dir)
    assert code == 0, out
    for name in PLOT_FILES:
        path = out_dir / name
        assert f'wrote   {path}' in out
        data = path.read_bytes()
        assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 20_000, name
    skipped = [line for line in out.splitlines() if 'skipped' in line]
    assert len(skipped) == 1 and 'per_task.png' in skipped[0] and 'train one task' in skipped[0]


@pytest.fixture(scope='module')
def multi_task_study(tmp_path_factory):
    root = tmp_path_factory.mktemp('multi_task_study')
    steps = range(0, 501, 100)
    write_run(root, 'sudoku', 'cpu_multitask', 'sudoku', data={'task': 'sudoku'},
              lines=by_step(train_lines(OLD, steps) + [eval_line(OLD, 250, 0.3), eval_line(OLD, 500, 0.6)]))
    write_run(root, 'maze', 'cpu_multitask', 'maze', data={'task': 'maze'},
              lines=by_step(train_lines(OLD, steps) + [eval_line(OLD, 500, 0.2)]))
    both = [eval_line(OLD, step, (s + m) / 2, **{'eval/sudoku/exact_accuracy': s, 'eval/maze/exact_accuracy': m,
                                                 'eval_by_difficulty/sudoku/blanks_30-34': s,
                                                 'eval_by_difficulty/maze/path_length_4-7': m})
            for step, s, m in ((250, 0.25, 0.1), (500, 0.5, 0.3))]
    write_run(root, 'sudoku_maze', 'cpu_multitask', 'sudoku_maze',
              data={'task': 'sudoku', 'mixture': ['sudoku', 'maze']}, lines=by_step(train_lines(OLD, steps) + both))
    return root


def test_a_multi_task_study_is_compared_task_by_task(multi_task_study, capsys):
    code, out, _ = run_cli(capsys, 'compare', multi_task_study)
    assert code == 0
    header, rows, _ = parse_markdown(out)
    assert header[7:9] == ['final sudoku exact', 'final maze exact']
    assert (rows['sudoku']['final sudoku exact'], rows['sudoku']['final maze exact']) == ('60.00%', '-')
    assert (rows['maze']['final sudoku exact'], rows['maze']['final maze exact']) == ('-', '20.00%')
    assert (rows['sudoku_maze']['final sudoku exact'], rows['sudoku_maze']['final maze exact']) == ('50.00%', '30.00%')
    assert rows['sudoku_maze']['final exact acc'] == '40.00%'
    runs = load_runs([str(multi_task_study)])
    text = tables.compare_csv(runs)
    header = text.splitlines()[0].split(',')
    assert header[-2:] == ['final_exact_accuracy_sudoku', 'final_exact_accuracy_maze']
    assert text.splitlines()[[r.label for r in runs].index('sudoku_maze') + 1].endswith(',0.5,0.3')


def test_a_multi_task_study_plots_each_task_and_its_buckets(multi_task_study, tmp_path, capsys):
    pytest.importorskip('matplotlib')
    code, out, _ = run_cli(capsys, 'plot', multi_task_study, '--out', tmp_path)
    assert code == 0, out
    assert (tmp_path / 'per_task.png').read_bytes()[:4] == b'\x89PNG'
    [mixed] = [r for r in load_runs([str(multi_task_study)]) if r.variant == 'sudoku_maze']
    assert sorted(mixed.last_difficulty(by_task=True)[1]) == ['maze/path_length_4-7', 'sudoku/blanks_30-34']


def test_act_steps_curve_includes_the_trained_depth(study):
    [baseline] = [r for r in load_runs([str(study)]) if r.name == 'baseline']
    assert baseline.act_steps_curve() == [(1, 0.05), (4, 0.5), (8, 0.75), (16, 0.875), (32, 0.9)]


def test_plot_without_matplotlib_is_one_line(study, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    code, out, err = run_cli(capsys, 'plot', study, '--out', tmp_path)
    assert code == 2 and out == ''
    assert err.count('\n') == 1 and 'pip install matplotlib' in err


def test_tables_do_not_import_matplotlib(study):
    code = ('import sys; sys.modules["matplotlib"] = None\n'
            'from trm_spmd.analysis.__main__ import main\n'
            f'sys.exit(main(["status", {str(study)!r}]) or main(["compare", {str(study)!r}]))')
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert 'e1_1_baseline' in result.stdout


def test_errors_are_one_line(study, tmp_path, capsys):
    (tmp_path / 'empty').mkdir()
    code, _, err = run_cli(capsys, 'compare', tmp_path / 'empty')
    assert code == 2 and err.count('\n') == 1 and 'no run directory' in err
    code, _, err = run_cli(capsys, 'compare', tmp_path / 'nope*')
    assert code == 2 and 'matches nothing' in err
    code, _, err = run_cli(capsys, 'compare', study, '--format=both')
    assert code == 2 and '--out' in err
    pytest.importorskip('matplotlib')
    code, _, err = run_cli(capsys, 'plot', study, '--out', tmp_path, '--baseline=nope')
    assert code == 2 and err.count('\n') == 1 and 'matches no run' in err


# ---- the same study on a bucket: fsspec's in-memory filesystem stands in for gs:// ----------


@pytest.fixture(scope='module')
def bucket_study(study):
    """The study copied to memory://, which goes through the same fsspec calls as gs://."""
    fsspec = pytest.importorskip('fsspec')
    memory = fsspec.filesystem('memory')
    root = 'memory://trm-analysis-test'
    memory.put(str(study), f'{root}/study', recursive=True)
    yield f'{root}/study'
    memory.rm(root, recursive=True)


def memory_file(url):
    import fsspec
    return fsspec.filesystem('memory').cat_file(url)


def test_status_and_compare_read_a_bucket_like_a_disk(study, bucket_study, capsys):
    for command in ('status', 'compare'):
        code, local, _ = run_cli(capsys, command, study)
        assert code == 0
        code, remote, err = run_cli(capsys, command, bucket_study)
        assert code == 0, err
        local_rows, remote_rows = parse_markdown(local)[1], parse_markdown(remote)[1]
        assert len(remote_rows) == 21
        # The one status that rests on run.json's modification time: the bucket's copy was
        # written just now, so the silent run counts as running there.
        assert local_rows.pop('ablations/attention')['status'] == 'stale (crashed?)'
        assert remote_rows.pop('ablations/attention')['status'] == 'running'
        for rows in (local_rows, remote_rows):
            for row in rows.values():
                row.pop('last update', None)   # the files' times: when each copy was written
        assert remote_rows == local_rows


def test_bucket_globs_files_and_outputs(bucket_study, capsys):
    code, out, _ = run_cli(capsys, 'compare', f'{bucket_study}/tn_sweep/t3_*')
    assert code == 0 and sorted(parse_markdown(out)[1]) == ['t3_n2', 't3_n4', 't3_n6']
    code, out, _ = run_cli(capsys, 'compare', f'{bucket_study}/**/t1_n2/config.json')
    assert code == 0 and list(parse_markdown(out)[1]) == ['t1_n2']

    out_dir = 'memory://trm-analysis-test/tables'
    code, out, err = run_cli(capsys, 'compare', f'{bucket_study}/baseline', '--out', out_dir)
    assert code == 0, err
    assert memory_file(f'{out_dir}/compare.md').decode() == out
    rows = list(csv.DictReader(memory_file(f'{out_dir}/compare.csv').decode().splitlines()))
    assert rows[0]['path'] == 'memory:///trm-analysis-test/study/baseline/e1_1_baseline'
    assert rows[0]['best_exact_accuracy'] == '0.875'


def test_plot_skips_what_the_runs_cannot_show(bucket_study, capsys):
    # Read from and written to the bucket stand-in; test_plot_writes_every_png covers disks.
    pytest.importorskip('matplotlib')
    out_dir = 'memory://trm-analysis-test/plots'
    code, out, err = run_cli(capsys, 'plot', f'{bucket_study}/batch_scaling', '--out', out_dir)
    assert code == 0, err
    assert f'wrote   {out_dir}/batch_scaling.png' in out
    assert memory_file(f'{out_dir}/batch_scaling.png')[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'skipped tn_heatmap.png: needs runs of one config family' in out
    assert 'skipped difficulty.png: no run has logged eval_by_difficulty' in out
    with pytest.raises(FileNotFoundError):
        memory_file(f'{out_dir}/tn_heatmap.png')

    code, out, _ = run_cli(capsys, 'plot', f'{bucket_study}/model_scaling', '--out', out_dir)
    assert code == 0 and 'wrote' not in out and out.count('skipped') == len(PLOT_FILES) + 1   # per_task.png too
    assert 'the older batch_scaling.png there is out of date' in out


def test_bucket_errors_are_one_line(bucket_study, capsys):
    code, _, err = run_cli(capsys, 'status', 'memory://trm-analysis-test/nope')
    assert code == 2 and err.count('\n') == 1 and 'is not a directory' in err
    code, _, err = run_cli(capsys, 'status', f'{bucket_study}/nope*')
    assert code == 2 and err.count('\n') == 1 and 'matches nothing' in err


@pytest.mark.skipif(importlib.util.find_spec('gcsfs') is not None,
                    reason='gcsfs is installed: the test would reach for gs://')
def test_bucket_without_gcsfs_is_one_line(capsys):
    code, _, err = run_cli(capsys, 'status', 'gs://bkt/study')
    assert code == 2 and err.count('\n') == 1 and 'gcsfs' in err


def test_every_analysis_error_is_a_user_error():
    for error in (RunDiscoveryError, UsageError, BaselineError, MatplotlibMissing):
        assert issubclass(error, UserError)
