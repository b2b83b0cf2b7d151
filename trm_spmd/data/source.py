"""Reading a builder's input: text files, the official CSV layout, and `hf://` paths.

The official builders read `source,question,answer,rating` CSVs from the Hugging Face Hub.
`resolve_input` turns `hf://OWNER/NAME/FILE` into a local file through huggingface_hub
(cached; HF_ENDPOINT picks the server), so every builder also takes local files, which is
how a machine without the Hub builds.
"""

import csv
import os

from trm_spmd.data.errors import DataError

CSV_HEADER = ('source', 'question', 'answer', 'rating')
HF_PREFIX = 'hf://'


def resolve_input(path):
    """A local path for `path`; `hf://OWNER/NAME/FILE` is downloaded (dataset repo) first."""
    if not path or not path.startswith(HF_PREFIX):
        return path
    parts = path[len(HF_PREFIX):].split('/')
    if len(parts) < 3 or not all(parts):
        raise DataError(f'{path}: a Hub input is hf://OWNER/DATASET/FILE, e.g. '
                        f'hf://sapientinc/maze-30x30-hard-1k/train.csv')
    repo, filename = '/'.join(parts[:2]), '/'.join(parts[2:])
    try:
        import huggingface_hub
    except ImportError:
        raise DataError(f'{path}: reading from the Hub needs huggingface_hub (pip install huggingface_hub); '
                        f'or download {filename} yourself and pass --input=LOCAL_FILE') from None
    try:
        return huggingface_hub.hf_hub_download(repo, filename, repo_type='dataset')
    except Exception as e:   # network, 404, auth: all mean "get the file another way"
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f'{path}: could not download from the Hugging Face Hub ({reason}); '
                        f'download {filename} on a machine that reaches the Hub and pass '
                        f'--input=LOCAL_FILE') from None


def read_lines(path, what='one puzzle per line'):
    """The lines of a text file; a missing or empty file is one clear DataError."""
    if not os.path.isfile(path):
        raise DataError(f'{path}: file not found: check the path')
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = f.read().splitlines()
    if not any(line.strip() for line in lines):
        raise DataError(f'{path}: file is empty: expected {what}')
    return lines


def csv_rows(path, lines, errors):
    """(line, question, answer or '', rating or '', path) of each non-empty row of an
    official-layout CSV; rows with the wrong field count go to errors {line: message}.
    Fields are not stripped: a maze's open cells are spaces."""
    reader = csv.reader(lines)
    header = tuple(h.strip() for h in next(reader))
    if 'question' not in header:
        raise DataError(f'{path}:1: CSV header {",".join(header)!r} has no question column: '
                        f'expected {",".join(CSV_HEADER)}')
    column = {name: header.index(name) for name in CSV_HEADER if name in header}
    rows = []
    for fields in reader:
        line = reader.line_num
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            errors[line] = f'{path}:{line}: {len(fields)} fields, the header has {len(header)}'
            continue
        answer = fields[column['answer']] if 'answer' in column else ''
        rating = fields[column['rating']] if 'rating' in column else ''
        rows.append((line, fields[column['question']], answer, rating, path))
    return rows
