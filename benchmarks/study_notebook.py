"""Runs benchmarks/study.ipynb on a study and writes a Markdown copy of it, for readers
without Jupyter:

    python benchmarks/study_notebook.py --study_root=benchmarks/results/cpu_study/runs \
        --out=benchmarks/results/cpu_study/notebook

The notebook runs top to bottom in a kernel of this environment (nbclient and ipykernel,
pinned in requirements.lock), with TRM_STUDY_ROOT pointing at the study; OUT/README.md gets
its Markdown and code cells and their outputs, every picture as OUT/<name>.png. The
notebook itself stays committed without outputs. The tests run it the same way
(tests/test_study_notebook.py).
"""

import argparse
import os
import re
import sys

NOTEBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'study.ipynb')
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def execute(study_root, gallery_run='', timeout=600):
    """The notebook (nbformat) after running every cell against `study_root`."""
    import nbclient
    import nbformat
    with open(NOTEBOOK) as f:
        notebook = nbformat.read(f, as_version=4)
    saved = {k: os.environ.get(k) for k in ('TRM_STUDY_ROOT', 'TRM_GALLERY_RUN', 'PYTHONPATH')}
    os.environ['TRM_STUDY_ROOT'] = os.path.abspath(study_root) if '://' not in study_root else study_root
    os.environ['TRM_GALLERY_RUN'] = gallery_run
    # The kernel imports this checkout's trm_spmd, whatever the working directory.
    os.environ['PYTHONPATH'] = os.pathsep.join([REPO] + [p for p in (saved['PYTHONPATH'] or '').split(os.pathsep) if p])
    try:
        nbclient.NotebookClient(notebook, timeout=timeout, kernel_name='python3',
                                resources={'metadata': {'path': os.path.dirname(NOTEBOOK)}}).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return notebook


def errors(notebook):
    """The error outputs of an executed notebook, as text."""
    return [f'{o.ename}: {o.evalue}' for c in notebook.cells if c.cell_type == 'code' for o in c.outputs
            if o.output_type == 'error']


def pictures(cell):
    """(PNG bytes, name) of every picture a code cell showed."""
    import base64
    found = []
    for output in cell.get('outputs', []):
        data = output.get('data', {})
        if 'image/png' in data:
            name = data.get('text/plain', '').strip()   # a Picture's repr is its file name
            found.append((base64.b64decode(data['image/png']), name))
    return found


def to_markdown(notebook, out_dir):
    """Writes OUT/README.md (cells and outputs) and OUT/<picture>.png; returns the Markdown."""
    os.makedirs(out_dir, exist_ok=True)
    parts, count = [], 0
    for cell in notebook.cells:
        source = ''.join(cell.source)
        if cell.cell_type == 'markdown':
            parts.append(source)
            continue
        parts.append(f'```python\n{source}\n```')
        shown = {id(o) for o in cell.outputs if 'image/png' in o.get('data', {})}
        images = iter(pictures(cell))
        for output in cell.outputs:
            data = output.get('data', {})
            if id(output) in shown:
                data_png, name = next(images)
                count += 1
                name = name if re.fullmatch(r'[\w.-]+\.png', name) else f'figure_{count}.png'
                with open(os.path.join(out_dir, name), 'wb') as f:
                    f.write(data_png)
                parts.append(f'![{name}]({name})')
            elif 'text/markdown' in data:
                parts.append(data['text/markdown'])
            elif output.output_type == 'stream' or 'text/plain' in data:
                text = output.get('text', '') or data.get('text/plain', '')
                parts.append(f'```\n{text.rstrip()}\n```')
    text = '\n\n'.join(p.strip('\n') for p in parts) + '\n'
    with open(os.path.join(out_dir, 'README.md'), 'w') as f:
        f.write(text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--study_root', required=True, help='the study the notebook reads (local or gs://)')
    parser.add_argument('--out', required=True, help='directory for README.md and the pictures')
    parser.add_argument('--gallery_run', default='', help='the run whose failures to draw (default: each task\'s best)')
    args = parser.parse_args(argv)
    notebook = execute(args.study_root, args.gallery_run)
    problems = errors(notebook)
    to_markdown(notebook, args.out)
    if problems:
        print('error: the notebook raised ' + '; '.join(problems), file=sys.stderr)
        return 2
    print(f'wrote {os.path.join(args.out, "README.md")}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
