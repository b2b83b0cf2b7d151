"""Import (and export) checkpoints of the official TinyRecursiveModels and URM pretrain.py.

The official TRM file is `state_dict()` of the loss head around the ACT model: every key
starts with `model.inner.`, plus `_orig_mod.` when torch.compile was on. URM's pretrain.py
saves the same state_dict under 'model_state_dict' of a dict that also holds its step,
optimizer and RNG states (with EMA on, the averaged weights). Our TRM and URM mirror the
inner models' names except for three renames (RENAMES).
"""

import os
import re

import torch

from trm_spmd.errors import UserError

from trm_spmd.model.config import TRMConfig
from trm_spmd.model.families import build_model

OFFICIAL_PREFIX = 'model.inner.'
COMPILED_PREFIX = '_orig_mod.'
# ours -> official
RENAMES = {
    'embed_tokens.weight': 'embed_tokens.embedding_weight',
    'embed_pos.weight': 'embed_pos.embedding_weight',
    'puzzle_emb': 'puzzle_emb.weights',
}
_FROM_OFFICIAL = {v: k for k, v in RENAMES.items()}
# Official buffers that are scratch space, not model state (present only in some versions).
_SCRATCH = ('puzzle_emb.local_weights', 'puzzle_emb.local_ids',
            'rotary_emb.cos_cached', 'rotary_emb.sin_cached')


class CheckpointMismatchError(UserError):
    """An official checkpoint that does not fit the configured model; one line naming the key."""


def _strip(state_dict):
    """Official keys without `_orig_mod.` / `model.inner.` -> tensors."""
    out = {}
    for key, value in state_dict.items():
        name = key[len(COMPILED_PREFIX):] if key.startswith(COMPILED_PREFIX) else key
        if not name.startswith(OFFICIAL_PREFIX):
            raise CheckpointMismatchError(
                f'key {key!r} does not start with {OFFICIAL_PREFIX!r}: '
                f'not a TinyRecursiveModels or URM pretrain.py checkpoint')
        out[name[len(OFFICIAL_PREFIX):]] = value
    return out


def _load(path_or_state_dict):
    loaded = path_or_state_dict
    if isinstance(loaded, (str, os.PathLike)):
        loaded = torch.load(loaded, map_location='cpu', weights_only=True)
    # URM's pretrain.py: {'step', 'model_state_dict', 'optimizer_states', 'rng_state', ...}.
    return loaded.get('model_state_dict', loaded)


def _expected(cfg):
    """Our state_dict's names, shapes and dtypes, without allocating or initialising weights."""
    with torch.device('meta'):
        model = build_model(cfg)
    return {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}


def load_official(path_or_state_dict, cfg: TRMConfig):
    """An official checkpoint (path or state_dict) -> a state_dict for build_model(cfg).

    Raises CheckpointMismatchError on a missing, unexpected or mis-shaped key.
    """
    official = _strip(_load(path_or_state_dict))
    expected = _expected(cfg)
    ours = {}
    for name, (shape, dtype) in expected.items():
        source = RENAMES.get(name, name)
        key = OFFICIAL_PREFIX + source
        if source not in official:
            raise CheckpointMismatchError(
                f'official checkpoint lacks {key!r} (model expects shape {list(shape)}); '
                f'the checkpoint was trained with a different architecture: check the model config')
        value = official[source]
        if tuple(value.shape) != shape:
            raise CheckpointMismatchError(
                f'{key!r} has shape {list(value.shape)} in the official checkpoint but {list(shape)} '
                f'in the model; set the model config to match (infer_config_from_official)')
        ours[name] = value.detach().to(dtype=dtype, copy=True)
    known = {RENAMES.get(name, name) for name in expected}
    for source, value in official.items():
        if source not in known and source not in _SCRATCH:
            raise CheckpointMismatchError(
                f'official checkpoint has {OFFICIAL_PREFIX + source!r} (shape {list(value.shape)}) but the model '
                f'has no such key; check family, L_layers, mlp_t, pos_encodings and puzzle_emb_ndim')
    return ours


def to_official(state_dict, compiled=False):
    """Our state_dict -> official key layout (`_orig_mod.` prefixed when compiled=True)."""
    prefix = (COMPILED_PREFIX if compiled else '') + OFFICIAL_PREFIX
    return {prefix + RENAMES.get(k, k): v for k, v in state_dict.items()}


def infer_config_from_official(state_dict, seq_len=81):
    """TRMConfig fields readable from an official checkpoint's shapes.

    Weights cannot tell num_heads, expansion, cycle counts, or 'rope' from 'none' (RoPE has
    no parameters): set those in the config. The sequence length comes from the dataset
    (`seq_len`); the number of puzzle-embedding tokens is then total length - seq_len when
    the token-mix MLP or a learned position table reveals the total length, else the
    reference's default (TRM: 16; URM: as many as the embedding's width fills).
    """
    sd = _strip(_load(state_dict))
    vocab, hidden = sd['embed_tokens.embedding_weight'].shape
    family = 'urm' if 'init_hidden' in sd else 'trm'
    stack = r'layers\.(\d+)\.' if family == 'urm' else r'L_level\.layers\.(\d+)\.'
    layers = {int(m.group(1)) for k in sd for m in [re.match(stack, k)] if m}
    fields = {'family': family, 'vocab_size': int(vocab), 'hidden_size': int(hidden), 'seq_len': seq_len,
              'L_layers': len(layers), 'mlp_t': 'L_level.layers.0.mlp_t.gate_up_proj.weight' in sd}
    total_len = None
    if fields['mlp_t']:
        total_len = int(sd['L_level.layers.0.mlp_t.gate_up_proj.weight'].shape[1])
    if 'embed_pos.embedding_weight' in sd:
        fields['pos_encodings'] = 'learned'
        total_len = int(sd['embed_pos.embedding_weight'].shape[0])
    if 'puzzle_emb.weights' in sd:
        num_ids, ndim = sd['puzzle_emb.weights'].shape
        default_len = -(-int(ndim) // int(hidden)) if family == 'urm' else 16
        fields.update(num_puzzle_identifiers=int(num_ids), puzzle_emb_ndim=int(ndim),
                      puzzle_emb_len=total_len - seq_len if total_len is not None else default_len)
    else:
        fields.update(puzzle_emb_ndim=0, puzzle_emb_len=0)
    return fields
