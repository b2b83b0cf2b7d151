"""The run's Weights & Biases mirror (logging.wandb): the scalars of metrics.jsonl, one W&B
row per line, with the resolved config and its hash as the W&B config.

wandb is an optional extra (requirements-wandb.lock, `bash launch/setup.sh --wandb`), imported
(trm_spmd/extras.py) only when the config asks for it. metrics.jsonl stays the run's record; W&B is
a view of it. A workdir keeps its W&B run id in wandb_run.json, so a resumed run continues the
same W&B run. Credentials stay wandb's business: WANDB_API_KEY is read by wandb from the
environment and never passed through here.
"""

import json
import posixpath
import secrets

from trm_spmd import fs
from trm_spmd.config import config_hash
from trm_spmd.errors import UserError
from trm_spmd.extras import require_wandb

ID_FILE = 'wandb_run.json'
STEP = 'step'   # the x-axis of every chart: the training step, not W&B's own row counter


class WandbRun:
    """One W&B run per workdir: started (or resumed) on the main host, finished by close()."""

    def __init__(self, workdir, config):
        wandb = require_wandb()
        g = config.logging
        id_path = fs.join(workdir, ID_FILE)
        if fs.exists(id_path):
            run_id = json.loads(fs.read_text(id_path))['id']
        else:   # kept before the run starts: a crash after this still resumes the same W&B run
            run_id = secrets.token_hex(6)
            fs.write_text(id_path, json.dumps({'id': run_id}) + '\n')
        name = g.wandb_name or posixpath.basename(workdir.rstrip('/'))
        try:
            # A local workdir holds the W&B files too (its wandb/); on a bucket, which wandb cannot
            # write, they go to WANDB_DIR or the current directory.
            self._run = wandb.init(project=g.wandb_project, entity=g.wandb_entity or None, name=name,
                                   tags=list(g.wandb_tags) or None, id=run_id, resume='allow',
                                   dir=None if fs.is_remote(workdir) else workdir,
                                   settings=wandb.Settings(quiet=True))
        except wandb.errors.Error as e:
            cause = ' '.join(str(e).split()).rstrip('.')
            raise UserError(f'the W&B run did not start: {cause}; set WANDB_MODE=offline to log without a network '
                            f'(wandb sync uploads it later), or logging.wandb=False') from None
        # Resuming with a changed (allowed) key updates the config instead of refusing it.
        self._run.config.update({**json.loads(config.to_json_best_effort()), 'config_hash': config_hash(config)},
                                allow_val_change=True)
        self._run.define_metric(STEP)
        self._run.define_metric('*', step_metric=STEP)

    def log(self, step, scalars):
        self._run.log({STEP: step, **scalars})

    def close(self, failed=False):
        self._run.finish(exit_code=1 if failed else 0)
