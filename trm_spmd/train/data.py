"""The run's dataset: found, or generated on first use (every host builds the same bytes)."""

import dataclasses
import os

from trm_spmd.data.build_sudoku import build_generated
from trm_spmd.data.dataset import load_split
from trm_spmd.data.loader import EvalBatches, TrainBatches
from trm_spmd.train.evaluate import DifficultyBuckets


def default_data_root():
    return os.environ.get('TRM_SPMD_DATA', os.path.join(os.path.expanduser('~'), '.cache', 'trm_spmd', 'datasets'))


def generated_dataset_dir(config):
    d = config.data
    lo, hi = d.generate_blanks
    name = f'generated-train{d.generate_train}-test{d.generate_test}-blanks{lo}-{hi}-seed{config.seed}'
    return os.path.join(default_data_root(), name)


def dataset_dir(config):
    """data.path, else (with data.generate) the cache directory named by the generator settings."""
    if config.data.path:
        return config.data.path
    return generated_dataset_dir(config)


@dataclasses.dataclass
class Dataset:
    path: str
    train: object
    test: object
    config: object
    process_index: int
    process_count: int

    @property
    def vocab_size(self):
        return int(self.train.metadata['vocab_size'])

    @property
    def seq_len(self):
        return int(self.train.metadata['seq_len'])

    @property
    def num_puzzle_identifiers(self):
        return int(self.train.metadata['num_puzzle_identifiers'])

    @property
    def ratings_known(self):
        return self.test.ratings is not None and bool((self.test.ratings[: 1 << 16] >= 0).any())

    def train_batches(self):
        c = self.config
        return TrainBatches(self.train, c.data.global_batch_size, c.seed, self.process_index,
                            self.process_count, augment=c.data.augment)

    def difficulty_buckets(self):
        return DifficultyBuckets(self.ratings_known, self.config.eval.difficulty_buckets)

    def eval_batches(self):
        c = self.config
        return EvalBatches(self.test, c.eval.global_batch_size, self.process_index, self.process_count,
                           c.eval.max_examples)


def open_dataset(config, runtime):
    path = dataset_dir(config)
    if config.data.generate and not os.path.isdir(path):
        d = config.data
        print(f'generating the dataset once into {path} ({d.generate_train} train + {d.generate_test} test '
              f'puzzles, {d.generate_blanks[0]}-{d.generate_blanks[1]} blanks)', flush=True)
        build_generated(path, d.generate_train, d.generate_test, tuple(d.generate_blanks), config.seed)
    return Dataset(path, load_split(path, 'train'), load_split(path, 'test'), config,
                   runtime.process_index, runtime.process_count)
