"""trm_spmd.sweep: one workdir per sweep entry, finished runs skipped, so the same command resumes."""

import json
import os

import pytest

from trm_spmd import sweep

from conftest import REPO, run_in_subprocess

ENTRIES = ['configs/tn_sweep.py:t2_n2', 'configs/tn_sweep.py:t3_n6']


def finish(workdir):
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, 'run.json'), 'w') as f:
        json.dump({'status': 'done'}, f)


def test_each_entry_has_its_workdir_under_the_study_root(tmp_path):
    root = str(tmp_path / 'study')
    workdirs = [sweep.workdir_of(root, os.path.join(REPO, spec)) for spec in ENTRIES]
    assert workdirs == [f'{root}/tn_sweep/t2_n2', f'{root}/tn_sweep/t3_n6']
    assert sweep.status_of(workdirs[0]) is None
    finish(workdirs[0])
    assert sweep.status_of(workdirs[0]) == 'done'


@pytest.mark.slow
def test_a_sweep_whose_runs_are_done_skips_them(tmp_path):
    root = tmp_path / 'study'
    for spec in ENTRIES:
        finish(sweep.workdir_of(str(root), os.path.join(REPO, spec)))
    result = run_in_subprocess(['-m', 'trm_spmd.sweep', '--sweep=configs/tn_sweep.py', f'--study_root={root}',
                                f'--only={",".join(ENTRIES)}'], 8, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f'[{i}/2] {spec}: done already ({root}/tn_sweep/{spec.split(":")[1]})'
                                          for i, spec in enumerate(ENTRIES, 1)]
