"""`python tests/held_save.py GATE STEP [trm_spmd.main flags]`: a training run whose
checkpoint saves of step STEP are held just before orbax commits them (every array written
into orbax's temporary directory, not yet renamed into place) until the file GATE/release
exists. For tests of what happens beside a save in flight, without a timing race.

It writes GATE/held-DIR (DIR: checkpoints or checkpoints_best) once each save of STEP is
held, and GATE/waiting once the training loop waits for its saves to complete (the run then
writes nothing until released, but for its lease's heartbeat).
"""

import asyncio
import os
import sys


def _touch(path):
    with open(path, 'w'):
        pass


def hold_saves(gate, step):
    from orbax.checkpoint._src.path import atomicity
    from trm_spmd import checkpoint

    commit = atomicity.AtomicRenameTemporaryPath.finalize

    async def held_commit(self):
        final = self.get_final()
        if final.name == str(step):
            _touch(os.path.join(gate, f'held-{final.parent.name}'))
            while not os.path.exists(os.path.join(gate, 'release')):
                await asyncio.sleep(0.05)
        return await commit(self)

    wait = checkpoint.Checkpointer.wait

    def waiting(self):
        _touch(os.path.join(gate, 'waiting'))
        return wait(self)

    atomicity.AtomicRenameTemporaryPath.finalize = held_commit
    checkpoint.Checkpointer.wait = waiting


if __name__ == '__main__':
    gate, step = sys.argv[1], int(sys.argv[2])
    del sys.argv[1:3]
    hold_saves(gate, step)
    from trm_spmd.main import run
    run()
