"""Host agreement: every host must run the same config and the same code.

Each host hashes its resolved config and the package source; the hashes are exchanged over
a CPU process group and any difference stops every host with the names of the odd ones.
"""

import hashlib
import pathlib

from trm_spmd.config import config_hash
from trm_spmd.errors import UserError


def source_hash():
    """Hash of every .py file of the installed package (paths and contents)."""
    root = pathlib.Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob('*.py')):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def fingerprint(config):
    return {'config': config_hash(config), 'code': source_hash()}


def compare(fingerprints):
    """fingerprints[i] of host i -> None when all agree, else one line naming the differing hosts."""
    reference = fingerprints[0]
    for part in ('config', 'code'):
        odd = [i for i, f in enumerate(fingerprints) if f[part] != reference[part]]
        if odd:
            names = ', '.join(f'host {i} ({fingerprints[i][part]})' for i in odd)
            what = 'resolved config' if part == 'config' else 'trm_spmd source'
            return (f'hosts disagree on the {what}: {names} differ from host 0 ({reference[part]}); '
                    f'install the same checkout and launch the same command on every host')
    return None


def exchange(fingerprint_of_this_host, group):
    import torch.distributed as dist
    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, fingerprint_of_this_host, group=group)
    return gathered


def check_agreement(runtime, config, group=None):
    """Raises UserError on every host when the hosts' fingerprints differ. One host: nothing to do."""
    if runtime.process_count <= 1 and group is None:
        return
    group = group if group is not None else runtime.cpu_process_group()
    problem = compare(exchange(fingerprint(config), group))
    if problem:
        raise UserError(problem)


def exchanger(runtime, group=None):
    """exchange(x) -> [x of host 0, x of host 1, ...]; on one host, [x]."""
    if runtime.process_count <= 1 and group is None:
        return lambda value: [value]
    group = group if group is not None else runtime.cpu_process_group()
    return lambda value: exchange(value, group)


def first_problem(problems):
    """problems[i]: host i's one-line problem or None -> the first, naming its host on a pod."""
    for i, problem in enumerate(problems):
        if problem:
            return problem if len(problems) == 1 else f'host {i}: {problem}'
    return None


def agree(exchange_fn, problem):
    """Every host passes its own problem (or None); every host raises the first one, so that no
    host goes on alone into a collective the others never reach."""
    first = first_problem(exchange_fn(problem))
    if first:
        raise UserError(first)
