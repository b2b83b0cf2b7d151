"""A run directory's record of itself: config.json (the resolved config) and run.json (how it
was launched, its size and its status: running, done, preempted (SIGTERM), stopped (Ctrl-C), nan
or failed). Host 0 writes."""

import json
import time

from trm_spmd import fs, hosts
from trm_spmd.config import config_hash
from trm_spmd.config.resume import check_resume, saved_config
from trm_spmd.errors import UserError
from trm_spmd.model.flops import train_flops_per_example_step
from trm_spmd.model.trm import trainable_param_count
from trm_spmd.progress import format_duration
from trm_spmd.train.metrics import task_scores

RUN_FILE = 'run.json'
CONFIG_FILE = 'config.json'


class RunRecord:
    def __init__(self, workdir, info, writes):
        self.workdir, self.info, self.writes = workdir, info, writes

    @classmethod
    def start(cls, workdir, config, source, runtime, trainer, total_steps, started, resuming):
        """Records the run as running. When it resumes (`resuming`: it has checkpoints), the
        config may differ from the one it started with only where that keeps it the same run
        (config/resume.py): every host refuses in one line otherwise."""
        source = source or {}
        info = {
            'config_file': source.get('config_file', ''), 'overrides': source.get('overrides', {}),
            'config_hash': config_hash(config), 'flops_per_example_step': train_flops_per_example_step(trainer.cfg),
            'total_steps': total_steps, 'trainable_parameters': trainable_param_count(trainer.model),
            'backend': runtime.describe(), 'started': started, 'ended': None, 'status': 'running', 'message': '',
        }
        record = cls(workdir, info, runtime.is_main_host)
        if resuming:
            problem = None
            if record.writes:
                try:
                    changes = check_resume(saved_config(workdir) or {}, config)
                except UserError as e:
                    problem = str(e)
                else:
                    if changes:
                        print('resuming with changed ' + ', '.join(f'{c.key} ({c.old} -> {c.new})' for c in changes),
                              flush=True)
            hosts.agree(hosts.exchanger(runtime), problem)
        if record.writes:
            fs.write_text(fs.join(workdir, CONFIG_FILE), config.to_json_best_effort(indent=2, sort_keys=True))
            record._write()
        return record

    def _write(self):
        if self.writes:
            fs.write_text(fs.join(self.workdir, RUN_FILE), json.dumps(self.info, indent=2))

    def finish(self, status, message=''):
        self.info.update(status=status, message=message[:500], ended=time.time())
        self._write()

    def print_summary(self, metrics, status):
        if not self.writes:
            return
        lines = [f'run {status} in {format_duration(time.time() - self.info["started"])}']
        for key in ('eval/exact_accuracy', 'eval/accuracy', 'eval/steps', *task_scores(metrics)):
            if key in metrics:
                lines.append(f'  {key} = {metrics[key]:.4f}')
        lines += [f'  {key} = {metrics[key]:.4f}' for key in sorted(metrics) if key.startswith('eval_by_difficulty/')]
        lines += [f'  outputs: {self.workdir}',
                  f'  metrics: {fs.join(self.workdir, "metrics.jsonl")}  (tensorboard --logdir {self.workdir})',
                  f'  checkpoints: {fs.join(self.workdir, "checkpoints")}']
        print('\n'.join(lines), flush=True)
