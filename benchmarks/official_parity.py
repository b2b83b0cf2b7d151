"""Our model against the official code's, on one ACT step with the same random weights.

    git clone https://github.com/SamsungSAILMontreal/TinyRecursiveModels ../TinyRecursiveModels
    git clone https://github.com/UbiquantAI/URM ../URM
    pip install einops pydantic          # what their model code imports besides torch
    python -m benchmarks.official_parity --official=../TinyRecursiveModels --config=configs/arc.py:arc1
    python -m benchmarks.official_parity --official=../URM --config=configs/urm.py:arc1

The official network is built from our config (benchmarks/official.py; a URM checkout for a
config of model.family 'urm', whose flash-attn import is stood in for by torch's attention
on a CPU), our freshly initialised weights are exported to it with
trm_spmd.model.to_official, the puzzle-embedding table is filled with random rows (it starts
at zero in both), and both run one evaluation ACT step on the same batch of the config's task
shape: random tokens and random puzzle identifiers. Prints the largest differences of the
logits and of q_halt (q_halt reads the zero-initialised q_head: equal by construction, the
logits are the figure); for URM in float32 also against the official model with its
convolution in float32 (the official ConvSwiGLU computes it in bfloat16 whatever the
model's dtype). Needs the official checkout, so it is a manual check, not a test; its
figures are in benchmarks/README.md.
"""

import json
import sys

import numpy as np
import torch
from absl import app, flags

from benchmarks.official import _import_official, import_official_urm, official_arch, official_urm_arch
from trm_spmd import tasks
from trm_spmd.config import load_config
from trm_spmd.errors import UserError
from trm_spmd.model import TRMConfig, act_step, build_model, initial_carry, to_official

FLAGS = flags.DEFINE_string('official', None, 'path of a TinyRecursiveModels or URM checkout')
CONFIG = flags.DEFINE_string('config', 'configs/arc.py:arc1', 'the config whose network is compared')
BATCH = flags.DEFINE_integer('batch', 4, 'rows of the compared batch')
IDS = flags.DEFINE_integer('puzzle_identifiers', 1000, 'rows of the puzzle-embedding table (Sudoku\'s: 1)')
DTYPE = flags.DEFINE_enum('forward_dtype', 'float32', ['float32', 'bfloat16'], 'both models compute in this')
IMPL = flags.DEFINE_enum('attention_impl', 'blockwise', ['dense', 'blockwise'],
                         'our attention path (blockwise: what model.attention_impl=auto runs on a TPU)')


def _official_model(official_path, config, batch_size, sizes, num_ids):
    """The official inner ACT model of the config's family, untrained."""
    if config.model.family == 'urm':
        return import_official_urm(official_path)(
            official_urm_arch(config, batch_size, sizes['seq_len'], sizes['vocab_size'], num_ids))
    Model, _ = _import_official(official_path)
    return Model(dict(official_arch(config, batch_size), seq_len=sizes['seq_len'], vocab_size=sizes['vocab_size'],
                      num_puzzle_identifiers=num_ids))


def compare(official_path, config, batch_size, num_ids, forward_dtype='float32', seed=0, attention_impl='blockwise'):
    """{'max_abs_logits', 'max_abs_q_halt', ...} of one ACT step, ours against the official."""
    sizes = tasks.sizes(config)
    config.model.forward_dtype = forward_dtype
    config.model.attention_impl = attention_impl
    cfg = TRMConfig.from_config(config, vocab_size=sizes['vocab_size'], seq_len=sizes['seq_len'],
                                num_puzzle_identifiers=num_ids)
    torch.manual_seed(seed)
    ours = build_model(cfg).eval()
    with torch.no_grad():
        if ours.puzzle_emb is not None:
            ours.puzzle_emb.normal_(0, 0.5)
    theirs = _official_model(official_path, config, batch_size, sizes, num_ids).eval()
    # to_official names keys as a checkpoint of the official loss head holds them ('model.' + ...).
    exported = {k.removeprefix('model.'): v for k, v in to_official(ours.state_dict()).items()}
    missing, unexpected = theirs.load_state_dict(exported, strict=False)
    missing = [k for k in missing if not k.endswith(('local_weights', 'local_ids'))]
    if missing or unexpected:
        raise UserError(f'the official model does not take our weights: missing {missing}, unexpected {unexpected}')

    rng = np.random.default_rng(seed)
    batch = {'inputs': torch.from_numpy(rng.integers(0, sizes['vocab_size'], (batch_size, sizes['seq_len']))).int(),
             'labels': torch.from_numpy(rng.integers(0, sizes['vocab_size'], (batch_size, sizes['seq_len']))).int(),
             'puzzle_identifiers': torch.from_numpy(rng.integers(min(1, num_ids - 1), num_ids, batch_size)).int()}
    with torch.no_grad():
        _, out = act_step(ours, initial_carry(ours, batch_size, 'cpu'), batch, training=False)
        _, official = theirs(theirs.initial_carry(batch), batch)
        other = None
        if num_ids > 1:
            # The same rows under other identifiers: how much the embedding moves the logits at all.
            moved = dict(batch, puzzle_identifiers=batch['puzzle_identifiers'] % (num_ids - 1) + 1)
            _, other = act_step(ours, initial_carry(ours, batch_size, 'cpu'), moved, training=False)
    diff = {key: float((out[key].float() - official[key].float()).abs().max())
            for key in ('logits', 'q_halt_logits')}
    extra = {}
    if cfg.family == 'urm' and forward_dtype == 'float32':
        # The official ConvSwiGLU computes its convolution in bfloat16 whatever the model's dtype;
        # with that one module in float32 the official model is a float32 model like ours.
        for module in theirs.modules():
            if isinstance(module, torch.nn.Conv1d):
                module.float()
        theirs.load_state_dict(exported, strict=False)   # our weights again, not their bfloat16 roundings
        with torch.no_grad():
            _, official32 = theirs(theirs.initial_carry(batch), batch)
        extra['max_abs_logits_official_conv_in_float32'] = float((out['logits'] - official32['logits']).abs().max())
    return {'config': config.name + ':' + config.variant, 'family': cfg.family, 'batch': batch_size,
            'seq_len': sizes['seq_len'], 'vocab_size': sizes['vocab_size'], 'puzzle_identifiers': num_ids,
            'mlp_t': cfg.mlp_t, 'pos_encodings': cfg.pos_encodings, 'forward_dtype': forward_dtype,
            'attention': cfg.token_mixing(),
            'max_abs_logits': diff['logits'], 'max_abs_q_halt': diff['q_halt_logits'],
            'logits_scale': float(out['logits'].abs().max()),
            'logits_change_with_other_identifiers': (None if other is None else
                                                     float((out['logits'] - other['logits']).abs().max())),
            **extra}


def main(argv):
    del argv
    if not FLAGS.value:
        print('error: --official=PATH of a TinyRecursiveModels or URM checkout is required', file=sys.stderr)
        sys.exit(2)
    try:
        result = compare(FLAGS.value, load_config(CONFIG.value), BATCH.value, IDS.value, DTYPE.value,
                         attention_impl=IMPL.value)
    except UserError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    print(json.dumps(result, indent=1))


if __name__ == '__main__':
    app.run(main)
