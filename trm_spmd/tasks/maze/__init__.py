"""Maze-Hard: square mazes (30x30 in the paper), the answer a shortest path from S to G.
Tokens (the official builder's): 0 pad, 1 '#' wall, 2 ' ' open, 3 'S', 4 'G', 5 'o' path.

  grid.py       encoding, the independent shortest-path check, dihedral transforms, drawing
  generate.py   random mazes whose shortest path is long enough (HRM's recipe)
  build.py      datasets from the official CSVs or the generator
  build_cli.py  its flags: python -m trm_spmd.build maze
"""

import math

import numpy as np

from trm_spmd.tasks.base import Augmentation, Task
from trm_spmd.tasks.maze import build, generate, grid


def _augment(u, inputs, labels):
    """One of the 8 dihedral transforms per row, the same for its input and label."""
    transform = np.minimum((u[:, 0] * 8).astype(np.int64), 7)
    inputs, labels = inputs.copy(), labels.copy()
    for k in range(1, 8):
        rows = np.flatnonzero(transform == k)
        if rows.size:
            inputs[rows] = grid.dihedral(inputs[rows], k)
            labels[rows] = grid.dihedral(labels[rows], k)
    return inputs, labels


class Maze(Task):
    name = 'maze'
    generate_example = '--generate --num_train=1000 --num_test=1000 --size=30'
    difficulty_name = 'path_length'
    rating_edges = None          # the official CSV's rating is not documented: bucket by path length
    augmentation = Augmentation(draws=4, apply=staticmethod(_augment))

    def sizes(self, data_config):
        return {'seq_len': data_config.generate_size ** 2, 'vocab_size': grid.VOCAB_SIZE}

    def check_metadata(self, metadata, path):
        seq_len, vocab = metadata['seq_len'], metadata['vocab_size']
        if vocab != grid.VOCAB_SIZE or math.isqrt(seq_len) ** 2 != seq_len:
            return (f'vocab_size {vocab} and seq_len {seq_len} are not a maze\'s ({grid.VOCAB_SIZE}, '
                    f'a square number of cells)')
        return None

    def difficulty(self, inputs, labels):
        return grid.path_lengths(labels)

    def difficulty_edges(self, seq_len):
        width = max(2, 2 * math.isqrt(seq_len) // 3)   # 20 moves at 30x30, 6 at 10x10
        return tuple(range(0, seq_len, width))

    def _min_path(self, data_config):
        d = data_config
        return d.generate_min_path or generate.default_min_path(d.generate_size)

    def generated_name(self, data_config, seed):
        d = data_config
        aug = f'-aug{d.generate_num_aug}' if d.generate_num_aug else ''
        return (f'maze-generated-size{d.generate_size}-minpath{self._min_path(d)}-train{d.generate_train}'
                f'-test{d.generate_test}{aug}-seed{seed}')

    def build_generated(self, output_dir, data_config, seed, progress=True):
        d = data_config
        return build.build_generated(output_dir, d.generate_train, d.generate_test, d.generate_size,
                               self._min_path(d), seed, d.generate_num_aug, progress)

    def describe_generated(self, data_config):
        d = data_config
        return (f'{d.generate_train} train + {d.generate_test} test {d.generate_size}x{d.generate_size} mazes, '
                f'shortest paths over {self._min_path(d)} moves')

    def parse(self, text):
        return grid.encode_one(text)

    def check_input(self, inputs):
        return grid.question_problem(inputs), None

    def verdict(self, inputs, prediction):
        valid, shortest, message = grid.check_prediction(inputs, prediction)
        return valid and shortest, message

    def render(self, inputs, prediction):
        return grid.render(inputs, prediction)


TASK = Maze()
