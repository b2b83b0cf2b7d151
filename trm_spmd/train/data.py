"""The run's dataset: found, or generated on first use (every host builds the same bytes),
and read through its task (data.task) for what the layout does not say; or, with
data.mixture, one dataset per task behind one token space (trm_spmd/data/mixture.py)."""

import dataclasses
import os

from trm_spmd import tasks
from trm_spmd.data import mixture
from trm_spmd.data.dataset import DatasetError, load_split
from trm_spmd.data.loader import EvalBatches, TrainBatches
from trm_spmd.train.evaluate import DifficultyBuckets, Evaluator, MixtureEvaluator


def default_data_root():
    return os.environ.get('TRM_SPMD_DATA', os.path.join(os.path.expanduser('~'), '.cache', 'trm_spmd', 'datasets'))


def generated_dataset_dir(config):
    task = tasks.get(config.data.task)
    return os.path.join(default_data_root(), task.generated_name(config.data, config.seed))


def dataset_dir(config):
    """data.path, else (with data.generate) the cache directory named by the generator settings."""
    if config.data.path:
        return config.data.path
    return generated_dataset_dir(config)


@dataclasses.dataclass
class Dataset:
    path: str
    task: object
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
    def epoch_examples(self):
        return self.train.epoch_examples

    @property
    def ratings_known(self):
        return self.test.ratings is not None and bool((self.test.ratings[: 1 << 16] >= 0).any())

    def train_batches(self):
        c = self.config
        return TrainBatches(self.train, c.data.global_batch_size, c.seed, self.process_index,
                            self.process_count, augment=self.task.augmentation if c.data.augment else None)

    def difficulty_buckets(self):
        edges = tuple(self.config.eval.difficulty_buckets)
        if self.task.rating_edges is not None and self.ratings_known:
            return DifficultyBuckets('rating', 'rating', edges or self.task.rating_edges)
        return DifficultyBuckets('difficulty', self.task.difficulty_name,
                                 edges or self.task.difficulty_edges(self.seq_len))

    def scorer(self):
        """(task name, a fresh scorer of the test split) for one evaluation, or (name, None)."""
        return self.task.name, self.task.scorer(self.path, self.test, self.config.eval.arc_solutions)

    def eval_batches(self):
        c = self.config
        return EvalBatches(self.test, c.eval.global_batch_size, self.process_index, self.process_count,
                           c.eval.max_examples)

    def evaluator(self, trainer, runtime, workdir, token_map=None):
        return Evaluator(trainer, self.config, runtime, self.eval_batches(), self.difficulty_buckets(), workdir,
                         self.scorer, token_map)


@dataclasses.dataclass
class Mixture:
    """The datasets of a run on several tasks (data.mixture), behind the same surface as
    one Dataset: the members' rows moved into one token space, sequence length and batch."""
    members: list          # a Dataset per task, in data.mixture's order
    maps: list             # a mixture.TokenMap per task
    rows: list             # rows of every global batch per task
    config: object

    @property
    def vocab_size(self):
        return mixture.mixture_sizes(self.maps)['vocab_size']

    @property
    def seq_len(self):
        return mixture.mixture_sizes(self.maps)['seq_len']

    @property
    def num_puzzle_identifiers(self):
        return mixture.mixture_sizes(self.maps)['num_puzzle_identifiers']

    @property
    def epoch_examples(self):
        """Every member's epoch once: the steps of an epoch pass over each member once where
        the weights follow the members' epoch sizes."""
        return sum(member.epoch_examples for member in self.members)

    def describe(self):
        return mixture.describe(self.maps, self.rows)

    def train_batches(self):
        first = self.members[0]
        augments = [m.task.augmentation if self.config.data.augment else None for m in self.members]
        return mixture.MixtureTrainBatches(self.maps, [m.train for m in self.members], self.rows, self.config.seed,
                                           augments, first.process_index, first.process_count)

    def evaluator(self, trainer, runtime, workdir):
        return MixtureEvaluator([(m.name, member.evaluator(trainer, runtime, workdir, m))
                                 for m, member in zip(self.maps, self.members)])


def member_configs(config):
    """A config per task of data.mixture (data.task and data.path its own), in order."""
    d = config.data
    paths = tuple(d.mixture_paths) or ('',) * len(d.mixture)
    members = []
    for name, path in zip(d.mixture, paths):
        member = config.copy_and_resolve_references()
        member.data.task, member.data.path, member.data.mixture = name, path, ()
        members.append(member)
    return members


def open_dataset(config, runtime, fix=None):
    """The run's Dataset (or Mixture). A dataset of another task is refused in one line ending
    with `fix`, the setting that picks it (default: data.task and data.path)."""
    if config.data.mixture:
        members = [open_dataset(member, runtime, f'entry {i} of data.mixture_paths is the dataset of '
                                                 f'{member.data.task} (entry {i} of data.mixture): point it at a '
                                                 f'{member.data.task} dataset')
                   for i, member in enumerate(member_configs(config), 1)]
        sizes = [{'seq_len': m.seq_len, 'vocab_size': m.vocab_size, 'num_puzzle_identifiers': m.num_puzzle_identifiers}
                 for m in members]
        return Mixture(members, mixture.token_maps(config.data.mixture, sizes), mixture.batch_rows(config.data), config)
    task = tasks.get(config.data.task)
    path = dataset_dir(config)
    if config.data.generate and not os.path.isdir(path):
        print(f'generating the dataset once into {path} ({task.describe_generated(config.data)})', flush=True)
        task.build_generated(path, config.data, config.seed)
    hint = task.build_hint()
    splits = [load_split(path, name, build_hint=hint, difficulty=task.difficulty) for name in ('train', 'test')]
    for split in splits:
        problem = task.check_metadata(split.metadata, split.path)
        if problem:
            raise DatasetError(f'{split.path}: not a {task.name} dataset: {problem}; ' + (
                fix or f'set --config.data.task to its task or point data.path at a {task.name} dataset'))
    return Dataset(path, task, *splits, config, runtime.process_index, runtime.process_count)
