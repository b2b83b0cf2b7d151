"""The README's map of the package (Layout): every module sits on one row, and its imports,
lazy ones inside functions included, go to its own row or a row below it, never up."""

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The README's map, bottom row first: a module belongs to the row of the longest prefix naming it.
ROWS = [
    ('the floor', ['trm_spmd', 'trm_spmd.errors', 'trm_spmd.fs', 'trm_spmd.bucket', 'trm_spmd.progress',
                   'trm_spmd.batch', 'trm_spmd.hardware', 'trm_spmd.extras', 'trm_spmd.checksums',
                   'trm_spmd.orbax_noise', 'trm_spmd.gcs_server']),
    ('data', ['trm_spmd.data']),
    ('tasks', ['trm_spmd.tasks']),
    ('model and optim', ['trm_spmd.model', 'trm_spmd.optim']),
    ('config', ['trm_spmd.config']),
    ('runtime', ['trm_spmd.runtime']),
    ('the run around training', ['trm_spmd.checkpoint', 'trm_spmd.lease', 'trm_spmd.hosts', 'trm_spmd.scale']),
    ('train', ['trm_spmd.train']),
    ('the commands', ['trm_spmd.main', 'trm_spmd.build', 'trm_spmd.solve', 'trm_spmd.sweep', 'trm_spmd.dry_run',
                      'trm_spmd.analysis']),
]


def modules():
    """{module name: path} of every module of the package."""
    found = {}
    for folder, _, files in os.walk(os.path.join(REPO, 'trm_spmd')):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                module = os.path.relpath(path, REPO)[:-3].replace(os.sep, '.')
                found[module.removesuffix('.__init__')] = path
    return found


def row_of(module):
    matches = [(len(prefix), i) for i, (_, prefixes) in enumerate(ROWS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + '.')]
    return max(matches)[1] if matches else None


def imported(module, path, known):
    """The package modules `module` imports (absolute and relative, at any depth of the code)."""
    package = module if path.endswith('__init__.py') else module.rpartition('.')[0]
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')[:len(package.split('.')) - node.level + 1]
                base = '.'.join(parts + ([base] if base else []))
            targets = [f'{base}.{alias.name}' if f'{base}.{alias.name}' in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition('.')[0]
            if target and target != module:
                yield target


def test_every_module_is_on_the_map():
    assert [m for m in sorted(modules()) if row_of(m) is None] == []


def test_imports_go_down_the_map():
    known = modules()
    upward = [f'{m} ({ROWS[row_of(m)][0]}) imports {t} ({ROWS[row_of(t)][0]})'
              for m, path in sorted(known.items()) for t in sorted(set(imported(m, path, known)))
              if row_of(t) > row_of(m)]
    assert upward == []
