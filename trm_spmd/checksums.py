"""Checksums of what a checkpoint holds, so a restore can prove it read back what was written.

orbax notices a missing or truncated file, but not changed bytes: a garbled chunk that
still decompresses restores as wrong numbers without any error. So each save records a
SHA-256 of every array (dtype, shape and bytes) and of the JSON meta, inside the meta
itself: the record is part of the step that orbax commits atomically, never a file that
could be missing while the step exists. A restore recomputes them before any value is used.
"""

import hashlib
import json

import numpy as np

KEY = 'checksums'          # the entry of a checkpoint's meta that holds the record
ALGORITHM = 'sha256'


def _leaves(tree, prefix=''):
    for key in sorted(tree):
        value = tree[key]
        if isinstance(value, dict):
            yield from _leaves(value, f'{prefix}{key}/')
        else:
            yield prefix + str(key), value


def array_digest(value):
    array = np.asarray(value)
    digest = hashlib.sha256(f'{array.dtype.str}{array.shape}'.encode())
    # reshape(-1) makes a C-contiguous 1-d view (or copy) of any array, 0-d included.
    digest.update(np.ascontiguousarray(array.reshape(-1)).view(np.uint8))
    return digest.hexdigest()


def _meta_digest(meta):
    # Through JSON first: the meta comes back from disk as JSON (tuples as lists).
    text = json.dumps(json.loads(json.dumps(meta)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def record(tree, meta):
    """The checksum record of a tree of numpy arrays and its JSON meta."""
    return {'algorithm': ALGORITHM, 'arrays': {path: array_digest(v) for path, v in _leaves(tree)},
            'meta': _meta_digest(meta)}


def attach(tree, meta):
    """`meta` with the record of (tree, meta) added; `meta` itself is left unchanged."""
    return dict(meta, **{KEY: record(tree, meta)})


def detach(meta):
    """(meta without the record, the record or None for a checkpoint written without one)."""
    meta = dict(meta)
    return meta, meta.pop(KEY, None)


def mismatch(tree, meta, saved):
    """None when (tree, meta) matches the saved record, else one phrase saying what differs."""
    if not isinstance(saved, dict) or saved.get('algorithm') != ALGORITHM or not isinstance(saved.get('arrays'), dict):
        return 'its checksum record is malformed'
    if _meta_digest(meta) != saved.get('meta'):
        return 'its meta does not match its checksum'
    restored = dict(_leaves(tree))
    missing = sorted(set(saved['arrays']) - set(restored))
    if missing:
        return f'array {missing[0]} is missing'
    extra = sorted(set(restored) - set(saved['arrays']))
    if extra:
        return f'array {extra[0]} was never written'
    for path, value in restored.items():
        if array_digest(value) != saved['arrays'][path]:
            return f'array {path} does not match its checksum'
    return None
