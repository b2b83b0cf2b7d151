"""Builds a dataset of one task in the official TinyRecursiveModels layout (trm_spmd/data/dataset.py).

    python -m trm_spmd.build TASK --output_dir=DIR [flags]       TASK: sudoku, maze or arc
    python -m trm_spmd.build sudoku --generate=5000 --test_generate=500 --output_dir=data/generated-5k
    python -m trm_spmd.build maze --input=train.csv --test_input=test.csv --num_aug=7 --output_dir=data/maze
    python -m trm_spmd.build arc --source=arc1 --output_dir=data/arc1-aug-1000
    python -m trm_spmd.build TASK --help                          that task's flags

Each task's flags and builder live with the task: trm_spmd/tasks/TASK/build_cli.py (the
flags), trm_spmd/tasks/TASK/build.py (what it writes). Same arguments, same bytes.
"""

import importlib
import sys

from trm_spmd import errors, tasks

USAGE = f'usage: python -m trm_spmd.build TASK [flags], TASK one of {", ".join(tasks.NAMES)}'


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    name = argv[1] if len(argv) > 1 else ''
    if name in ('-h', '--help', '-?', '--helpshort', '--helpfull'):
        print(f'{__doc__}\n{USAGE}')
        return 0
    if name not in tasks.NAMES:
        given = 'no task given' if not name or name.startswith('-') else f'{name!r} is not a task'
        print(f'error: {given}; {USAGE} (then --help lists its flags)', file=sys.stderr)
        return 2
    cli = importlib.import_module(f'trm_spmd.tasks.{name}.build_cli')
    cli.define_flags()
    sys.argv = [f'{argv[0]} {name}', *argv[2:]]   # absl parses sys.argv; its usage names the task
    if __name__ == '__main__':
        globals()['__doc__'] = cli.__doc__         # what absl's --help prints above the flags
    from absl import flags
    flags.adopt_module_key_flags(cli)              # --help lists the task's flags
    errors.run_main(cli.main)
    return 0


if __name__ == '__main__':
    sys.exit(main())
