"""The gcloud command lines for one TPU VM: create, delete, ssh and scp on its workers."""

import dataclasses


@dataclasses.dataclass
class Tpu:
    """The gcloud command lines for one TPU VM."""
    name: str
    zone: str
    project: str = ''

    def gcloud(self, verb, *positional):
        argv = ['gcloud', 'compute', 'tpus', 'tpu-vm', verb, *positional, f'--zone={self.zone}']
        if self.project:
            argv.append(f'--project={self.project}')
        return argv

    def ssh(self, command, worker='all'):
        return self.gcloud('ssh', self.name) + [f'--worker={worker}', f'--command={command}']

    def scp(self, sources, dest, worker='all'):
        return self.gcloud('scp', *sources, f'{self.name}:{dest}') + [f'--worker={worker}']
