"""Checkpoints with orbax-checkpoint: asynchronous, atomic, newest-K plus best-by-accuracy.

Two managers in two directories, because orbax's `best_fn` turns `max_to_keep` into "keep
the K best", which can delete the newest checkpoint and break resume:
  DIR/checkpoints/       the newest `checkpoint.keep` steps (resume reads these)
  DIR/checkpoints_best/  the `checkpoint.keep_best` best by eval exact accuracy
orbax writes each step into a temporary directory and renames it when complete, so an
interrupted write is never listed as a step.

The state is replicated on every device (data parallelism), so it is saved as plain numpy
arrays. With host-local disks every host writes its own identical copy; with a bucket (or
processes of one machine) only host 0 writes and every host reads.
"""

import numpy as np
import orbax.checkpoint as ocp
import torch

from trm_spmd import fs


def to_numpy_tree(tree):
    """torch tensors -> numpy (bfloat16 widened to float32, exactly); dicts kept."""
    if isinstance(tree, dict):
        return {str(k): to_numpy_tree(v) for k, v in tree.items()}
    if torch.is_tensor(tree):
        t = tree.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    if isinstance(tree, (int, float, bool, np.integer, np.floating)):
        return np.asarray(tree)
    return tree


class Checkpointer:
    def __init__(self, workdir, keep, keep_best, async_save, is_main_host, shared_filesystem=False):
        workdir = fs.absolute(workdir)
        self.workdir = workdir
        self.writes = is_main_host or not (fs.is_remote(workdir) or shared_filesystem)
        options = dict(enable_async_checkpointing=async_save, create=self.writes, read_only=not self.writes,
                       cleanup_tmp_directories=self.writes, save_interval_steps=1 if self.writes else 0)
        self.latest = ocp.CheckpointManager(
            fs.join(workdir, 'checkpoints'),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, **options))
        self.best = None
        if keep_best > 0:
            self.best = ocp.CheckpointManager(
                fs.join(workdir, 'checkpoints_best'),
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=keep_best, best_fn=lambda m: m['eval/exact_accuracy'], best_mode='max',
                    keep_checkpoints_without_metrics=False, **options))

    def latest_step(self):
        self.latest.reload()
        return self.latest.latest_step()

    def save(self, step, state, meta, eval_metrics=None):
        """Starts writing `state` (a tree of numpy arrays) for `step`; returns at once when async."""
        if not self.writes:
            return
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        if step not in self.latest.all_steps():
            self.latest.save(step, args=args, force=True)
        if self.best is not None and eval_metrics is not None and step not in self.best.all_steps():
            self.best.save(step, args=args, metrics={'eval/exact_accuracy': eval_metrics['eval/exact_accuracy']},
                           force=True)

    def restore(self, step=None, directory=None):
        """(state, meta) of `step` (default the newest) from the newest-K directory or `directory`."""
        manager = self.latest
        if directory is not None:
            manager = ocp.CheckpointManager(fs.absolute(directory), options=ocp.CheckpointManagerOptions(
                read_only=True, create=False, save_interval_steps=0))
        step = manager.latest_step() if step is None else step
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
        return restored['state'], restored['meta']

    def wait(self):
        self.latest.wait_until_finished()
        if self.best is not None:
            self.best.wait_until_finished()

    def close(self):
        self.wait()
        self.latest.close()
        if self.best is not None:
            self.best.close()
