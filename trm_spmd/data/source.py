"""Reading a builder's input: text files, the official CSV layout, and `hf://` paths.

The official builders read `source,question,answer,rating` CSVs from the Hugging Face Hub.
`resolve_input` turns `hf://OWNER/NAME/FILE` into a local file through huggingface_hub
(cached; HF_ENDPOINT picks the server), so every builder also takes local files, which is
how a machine without the Hub builds. A Hub that does not answer is retried by
huggingface_hub (five times over about 25 s); that is one `warning:` line, then the error.
"""

import contextlib
import csv
import logging
import os
import sys

from trm_spmd.data.errors import DataError

CSV_HEADER = ('source', 'question', 'answer', 'rating')
HF_PREFIX = 'hf://'
_HUB_HTTP_LOGGER = 'huggingface_hub.utils._http'   # where huggingface_hub reports each failed try and retry


class _OneRetryNotice(logging.Filter):
    """huggingface_hub's two warnings per retry of `path` become one line at the first."""

    def __init__(self, path):
        super().__init__()
        self.path, self.said = path, False

    def filter(self, record):
        message = record.getMessage()
        if ' thrown while requesting ' not in message and not message.startswith('Retrying in'):
            return True
        if not self.said:
            self.said = True
            reason = message.split(' thrown while requesting ')[0].strip("'")
            print(f'warning: {self.path}: the Hugging Face Hub did not answer ({reason}); retrying for about 25 s',
                  file=sys.stderr, flush=True)
        return False


@contextlib.contextmanager
def _one_retry_notice(path):
    logger, notice = logging.getLogger(_HUB_HTTP_LOGGER), _OneRetryNotice(path)
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def _reason(error):
    """The first line of what went wrong; for a Hub that could not be reached, its cause."""
    if type(error).__name__ == 'LocalEntryNotFoundError':   # "cannot locate the file": the cause says why
        while (error.__cause__ or error.__context__) is not None:
            error = error.__cause__ or error.__context__
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


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
        with _one_retry_notice(path):
            return huggingface_hub.hf_hub_download(repo, filename, repo_type='dataset')
    except Exception as e:   # network, 404, auth: all mean "get the file another way"
        raise DataError(f'{path}: could not download from the Hugging Face Hub ({_reason(e)}); '
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
