"""Import of official TinyRecursiveModels checkpoints (layout: TRM_SPEC section 9) and URM ones."""

import pytest
import torch

from trm_spmd.model import (CheckpointMismatchError, TRM, TRMConfig, act_step, build_model,
                            infer_config_from_official, initial_carry, load_official, to_official)

TINY = dict(hidden_size=32, num_heads=4, expansion=2.0, L_layers=2, H_cycles=1, L_cycles=1,
            puzzle_emb_ndim=32, puzzle_emb_len=2, forward_dtype='float32')

OFFICIAL_MLP_LAYOUT = {
    'H_init': [512], 'L_init': [512],
    'embed_tokens.embedding_weight': [11, 512],
    'lm_head.weight': [11, 512], 'q_head.weight': [2, 512], 'q_head.bias': [2],
    'puzzle_emb.weights': [1, 512],
    **{f'L_level.layers.{i}.{name}': shape for i in range(2) for name, shape in (
        ('mlp_t.gate_up_proj.weight', [1024, 97]), ('mlp_t.down_proj.weight', [97, 512]),
        ('mlp.gate_up_proj.weight', [3072, 512]), ('mlp.down_proj.weight', [512, 1536]))},
}


def build(seed=0, **overrides):
    torch.manual_seed(seed)
    return TRM(TRMConfig(**{**TINY, **overrides}))


def test_full_size_export_has_the_official_keys_and_shapes():
    exported = to_official(TRM(TRMConfig()).state_dict())
    assert {k: list(v.shape) for k, v in exported.items()} == {
        'model.inner.' + k: v for k, v in OFFICIAL_MLP_LAYOUT.items()}
    attention = to_official(TRM(TRMConfig(mlp_t=False, pos_encodings='rope')).state_dict())
    assert list(attention['model.inner.L_level.layers.1.self_attn.qkv_proj.weight'].shape) == [1536, 512]
    assert list(attention['model.inner.L_level.layers.1.self_attn.o_proj.weight'].shape) == [512, 512]
    assert not any('mlp_t' in k or 'rope' in k for k in attention)


@pytest.mark.parametrize('compiled', [False, True])
@pytest.mark.parametrize('variant', [{}, {'mlp_t': False, 'pos_encodings': 'learned'}, {'puzzle_emb_ndim': 0}])
def test_round_trip_is_exact(compiled, variant):
    source = build(seed=1, **variant)
    with torch.no_grad():
        if source.puzzle_emb is not None:
            source.puzzle_emb.normal_()
    exported = to_official(source.state_dict(), compiled=compiled)
    assert all(k.startswith('_orig_mod.model.inner.' if compiled else 'model.inner.') for k in exported)
    cfg = TRMConfig(**{**TINY, **variant})
    imported = load_official(exported, cfg)
    assert imported.keys() == source.state_dict().keys()
    for k, v in source.state_dict().items():
        assert torch.equal(imported[k], v), k
    target = build(seed=2, **variant)
    target.load_state_dict(imported)
    batch = {'inputs': torch.randint(1, 11, (2, 81)), 'labels': torch.randint(2, 11, (2, 81)),
             'puzzle_identifiers': torch.zeros(2, dtype=torch.int32)}
    outs = [act_step(m, initial_carry(m, 2, 'cpu'), batch, training=False)[1]['logits'] for m in (source, target)]
    assert torch.equal(*outs)


def test_load_from_file_and_dtype_conversion(tmp_path):
    source = build()
    exported = to_official(source.state_dict(), compiled=True)
    # The official model keeps its reset states in bfloat16.
    exported['_orig_mod.model.inner.H_init'] = exported['_orig_mod.model.inner.H_init'].to(torch.bfloat16)
    path = tmp_path / 'step_1000'
    torch.save(exported, path)
    imported = load_official(str(path), TRMConfig(**TINY))
    assert imported['H_init'].dtype == torch.float32
    assert torch.equal(imported['H_init'], source.H_init.to(torch.bfloat16).float())


def test_shape_mismatch_names_key_and_both_shapes():
    exported = to_official(build().state_dict())
    with pytest.raises(CheckpointMismatchError) as err:
        load_official(exported, TRMConfig(**{**TINY, 'vocab_size': 12}))
    message = str(err.value)
    assert '\n' not in message
    assert "'model.inner.embed_tokens.embedding_weight'" in message
    assert '[11, 32]' in message and '[12, 32]' in message


def test_missing_and_unexpected_keys():
    exported = to_official(build().state_dict())
    del exported['model.inner.L_level.layers.1.mlp.down_proj.weight']
    with pytest.raises(CheckpointMismatchError, match=r"lacks 'model.inner.L_level.layers.1.mlp.down_proj.weight'"):
        load_official(exported, TRMConfig(**TINY))
    with pytest.raises(CheckpointMismatchError, match=r"'model.inner.L_level.layers.1.mlp_t.gate_up_proj.weight'"):
        load_official(to_official(build().state_dict()), TRMConfig(**{**TINY, 'L_layers': 1}))
    with pytest.raises(CheckpointMismatchError, match='not a TinyRecursiveModels'):
        load_official({'inner.H_init': torch.zeros(32)}, TRMConfig(**TINY))


def test_infer_config_from_official():
    fields = infer_config_from_official(to_official(TRM(TRMConfig()).state_dict(), compiled=True))
    assert fields == {'family': 'trm', 'vocab_size': 11, 'hidden_size': 512, 'seq_len': 81, 'L_layers': 2, 'mlp_t': True,
                      'num_puzzle_identifiers': 1, 'puzzle_emb_ndim': 512, 'puzzle_emb_len': 16}
    variant = dict(TINY, mlp_t=False, pos_encodings='learned', puzzle_emb_len=3, num_puzzle_identifiers=5, L_layers=3)
    fields = infer_config_from_official(to_official(TRM(TRMConfig(**variant)).state_dict()))
    assert fields['mlp_t'] is False and fields['pos_encodings'] == 'learned'
    assert (fields['L_layers'], fields['puzzle_emb_len'], fields['num_puzzle_identifiers']) == (3, 3, 5)
    cfg = TRMConfig(**{**TINY, **fields, 'num_heads': 4})
    load_official(to_official(TRM(TRMConfig(**variant)).state_dict()), cfg)
    bare = infer_config_from_official(to_official(build(puzzle_emb_ndim=0).state_dict()))
    assert (bare['puzzle_emb_ndim'], bare['puzzle_emb_len']) == (0, 0)


# ---- URM (UbiquantAI/URM models/urm/urm.py) ------------------------------------------------

URM_ARC = dict(family='urm', mlp_t=False, pos_encodings='rope', L_layers=4, H_cycles=2, L_cycles=6,
               puzzle_emb_len=1, seq_len=900, vocab_size=12, num_puzzle_identifiers=50)

# Their module names and shapes (URM_Inner: embed_tokens, lm_head, q_head, puzzle_emb, layers.N with
# self_attn and a ConvSwiGLU mlp whose dwconv is an nn.Conv1d kept in bfloat16, init_hidden).
OFFICIAL_URM_ARC_LAYOUT = {
    'init_hidden': ([512], torch.bfloat16),
    'embed_tokens.embedding_weight': ([12, 512], torch.float32),
    'lm_head.weight': ([12, 512], torch.float32), 'q_head.weight': ([2, 512], torch.float32),
    'q_head.bias': ([2], torch.float32),
    'puzzle_emb.weights': ([50, 512], torch.float32),
    **{f'layers.{i}.{name}': spec for i in range(4) for name, spec in (
        ('self_attn.qkv_proj.weight', ([1536, 512], torch.float32)),
        ('self_attn.o_proj.weight', ([512, 512], torch.float32)),
        ('mlp.gate_up_proj.weight', ([3072, 512], torch.float32)),
        ('mlp.dwconv.weight', ([1536, 1, 2], torch.bfloat16)), ('mlp.dwconv.bias', ([1536], torch.bfloat16)),
        ('mlp.down_proj.weight', ([512, 1536], torch.float32)))},
}


def official_urm_checkpoint():
    """What URM's pretrain.py writes (save_train_state): the compiled loss head's state_dict
    under 'model_state_dict', beside the step and the optimizers' states; random values."""
    g = torch.Generator().manual_seed(0)
    weights = {f'_orig_mod.model.inner.{name}': (torch.randn(shape, generator=g) * 0.05).to(dtype)
               for name, (shape, dtype) in OFFICIAL_URM_ARC_LAYOUT.items()}
    return {'step': 1000, 'model_state_dict': weights, 'optimizer_states': [{'state': {}, 'param_groups': []}]}


def test_urm_export_has_the_official_keys_and_shapes():
    exported = to_official(build_model(TRMConfig(**URM_ARC)).state_dict())
    assert {k: list(v.shape) for k, v in exported.items()} == {
        'model.inner.' + k: shape for k, (shape, _) in OFFICIAL_URM_ARC_LAYOUT.items()}


def test_a_urm_checkpoint_in_the_official_layout_imports(tmp_path):
    checkpoint = official_urm_checkpoint()
    path = tmp_path / 'step_1000.pt'
    torch.save(checkpoint, path)
    fields = infer_config_from_official(str(path), seq_len=900)
    assert fields == {'family': 'urm', 'vocab_size': 12, 'hidden_size': 512, 'seq_len': 900, 'L_layers': 4,
                      'mlp_t': False, 'num_puzzle_identifiers': 50, 'puzzle_emb_ndim': 512, 'puzzle_emb_len': 1}
    cfg = TRMConfig(**{**URM_ARC, 'forward_dtype': 'float32', 'H_cycles': 1, 'L_cycles': 1})   # one loop: cheap
    imported = load_official(str(path), cfg)
    model = build_model(cfg)
    model.load_state_dict(imported)
    source = checkpoint['model_state_dict']
    for name, value in model.state_dict().items():
        official = source['_orig_mod.model.inner.' + {'embed_tokens.weight': 'embed_tokens.embedding_weight',
                                                      'puzzle_emb': 'puzzle_emb.weights'}.get(name, name)]
        assert torch.equal(value, official.to(value.dtype)), name
    batch = {'inputs': torch.randint(1, 12, (2, 900)), 'labels': torch.randint(2, 12, (2, 900)),
             'puzzle_identifiers': torch.tensor([3, 7], dtype=torch.int32)}
    with torch.no_grad():
        carry, out = act_step(model, initial_carry(model, 2, 'cpu'), batch, training=False)
    assert torch.isfinite(out['logits']).all() and out['logits'].shape == (2, 900, 12)


def test_a_urm_checkpoint_refuses_a_trm_config():
    with pytest.raises(CheckpointMismatchError, match="lacks 'model.inner.H_init'"):
        load_official(official_urm_checkpoint(), TRMConfig(mlp_t=False, pos_encodings='rope', puzzle_emb_len=1,
                                                           seq_len=900, vocab_size=12, num_puzzle_identifiers=50))
