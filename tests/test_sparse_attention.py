"""Attention restricted to a structure (model.attention_mask): what a cell can see, and nothing else changes."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from trm_spmd.config import ConfigError, load_config, validate
from trm_spmd.model import TRM, TRMConfig, trainable_param_count
from trm_spmd.model.attention_mask import attention_mask
from trm_spmd.model.config import ModelConfigError
from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO, assert_compiled_once_on_the_device

PREFIX = 2
SMALL = dict(hidden_size=32, num_heads=4, expansion=2.0, L_layers=1, H_cycles=1, L_cycles=1, mlp_t=False,
             pos_encodings='rope', puzzle_emb_ndim=32, puzzle_emb_len=PREFIX, forward_dtype='float32')


def _model(seq_len, **overrides):
    torch.manual_seed(0)
    return TRM(TRMConfig(**{**SMALL, 'seq_len': seq_len, **overrides}))


def _cell(row, col, side):
    return PREFIX + row * side + col


def _block_output(model, x):
    """One post-norm block: attention, norm, channel MLP, norm; every step but attention is per position."""
    rope = (model.rope_cos, model.rope_sin)
    return model.L_level.layers[0](x, rope, model.attention_mask)


def _changed_positions(model, x, position):
    """Positions of one block's output that move when the input at `position` changes."""
    base = _block_output(model, x)
    x = x.clone()
    x[:, position] += torch.randn_like(x[:, position])
    moved = _block_output(model, x)
    return {p for p in range(x.shape[1]) if not torch.equal(base[:, p], moved[:, p])}


# ---- the structures ------------------------------------------------------------------

def test_sudoku_mask_is_row_column_and_box_plus_the_global_prefix():
    mask = attention_mask('sudoku', 81, PREFIX)
    assert mask.shape == (83, 83) and mask.dtype == torch.bool
    assert mask[:PREFIX].all() and mask[:, :PREFIX].all()
    cells = mask[PREFIX:, PREFIX:]
    assert torch.equal(cells, cells.T) and cells.diagonal().all()
    assert (cells.sum(1) == 21).all()          # 8 in the row, 8 in the column, 4 more in the box, itself
    r4c4 = {(i // 9, i % 9) for i in cells[4 * 9 + 4].nonzero().flatten().tolist()}
    assert r4c4 == {(4, c) for c in range(9)} | {(r, 4) for r in range(9)} | {(r, c) for r in (3, 4, 5)
                                                                              for c in (3, 4, 5)}


@pytest.mark.parametrize('side, radius', [(6, 1), (30, 2)])
def test_window_mask_is_a_chebyshev_square_clipped_at_the_border(side, radius):
    mask = attention_mask('window', side * side, PREFIX, radius)
    assert mask[:PREFIX].all() and mask[:, :PREFIX].all()
    cells = mask[PREFIX:, PREFIX:].view(side, side, side, side)
    assert cells[0, 0].sum() == (radius + 1) ** 2                     # a corner
    assert cells[side // 2, side // 2].sum() == (2 * radius + 1) ** 2  # the middle
    r, c = side // 2, side // 2
    assert cells[r, c, r + radius, c - radius] and not cells[r, c, r + radius + 1, c]


def test_full_builds_no_mask_and_no_buffer():
    assert attention_mask('full', 81, PREFIX) is None
    model = _model(81)
    assert model.attention_mask is None and 'attention_mask' not in dict(model.named_buffers())


# ---- what a cell can see -------------------------------------------------------------

@pytest.mark.parametrize('kind, side, radius', [('sudoku', 9, 1), ('window', 6, 1), ('window', 7, 2)])
def test_a_cell_is_moved_exactly_by_its_neighbourhood_and_the_prefix(kind, side, radius):
    model = _model(side * side, attention_mask=kind, attention_window=radius)
    torch.manual_seed(1)
    x = torch.randn(2, PREFIX + side * side, 32)
    allowed = model.attention_mask
    probe = _cell(1, 1, side)
    for source in (_cell(1, 1, side), _cell(1, 1 + radius, side), _cell(side - 1, side - 1, side),
                   _cell(2, side - 1, side), 0):
        moved = _changed_positions(model, x, source)
        # Bit-identical wherever the mask keeps `source` out; changed wherever it lets it in.
        assert moved == set(allowed[:, source].nonzero().flatten().tolist()), (kind, source)
    assert allowed[probe, _cell(1, 1 + radius, side)] and not allowed[probe, _cell(side - 1, side - 1, side)]


def test_full_attention_lets_every_position_move_every_other():
    model = _model(81)
    torch.manual_seed(1)
    x = torch.randn(2, PREFIX + 81, 32)
    assert _changed_positions(model, x, _cell(8, 8, 9)) == set(range(PREFIX + 81))


def test_full_is_the_unmasked_attention_bit_for_bit():
    model = _model(81)
    attn = model.L_level.layers[0].self_attn
    x = torch.randn(2, PREFIX + 81, 32)
    q, k, v = attn.qkv_proj(x).view(2, -1, 3, 4, 8).unbind(2)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=False)
    expected = attn.o_proj(out.transpose(1, 2).reshape(2, -1, 32))
    assert torch.equal(attn(x, mask=model.attention_mask), expected)


def test_a_window_covering_the_grid_equals_full_attention():
    full, window = _model(36), _model(36, attention_mask='window', attention_window=5)
    assert window.attention_mask.all()
    x, inj = torch.randn(2, PREFIX + 36, 32), torch.randn(2, PREFIX + 36, 32)
    torch.testing.assert_close(window.net(x, inj), full.net(x, inj), rtol=1e-5, atol=1e-5)


# ---- nothing else changes ------------------------------------------------------------

def test_parameters_and_checkpoint_state_are_those_of_full_attention():
    paper = dict(mlp_t=False, pos_encodings='rope')
    full, sudoku = TRM(TRMConfig(**paper)), TRM(TRMConfig(**paper, attention_mask='sudoku'))
    assert trainable_param_count(full) == trainable_param_count(sudoku) == 6_828_034
    assert sudoku.state_dict().keys() == full.state_dict().keys()    # the mask is rebuilt, never saved
    maze = dict(paper, seq_len=900)
    assert (trainable_param_count(TRM(TRMConfig(**maze, attention_mask='window', attention_window=2)))
            == trainable_param_count(TRM(TRMConfig(**maze))))


# ---- configs that do not fit ---------------------------------------------------------

@pytest.mark.parametrize('fields, message', [
    (dict(attention_mask='sudoku', seq_len=900), "model.attention_mask='sudoku' needs the 81 cells"),
    (dict(attention_mask='window', seq_len=90), "model.attention_mask='window' needs a square grid"),
    (dict(attention_mask='window', seq_len=81, attention_window=0), 'model.attention_window=0 must be >= 1'),
    (dict(attention_mask='diagonal'), "model.attention_mask='diagonal' is not one of"),
    (dict(attention_mask='sudoku', mlp_t=True), 'restricts self-attention: set model.mlp_t=False'),
])
def test_a_structure_that_does_not_fit_is_refused(fields, message):
    with pytest.raises(ModelConfigError, match=message):
        TRMConfig(**{'mlp_t': False, **fields})


def test_validation_checks_the_mask_against_the_configs_task():
    maze = load_config(f'{REPO}/configs/maze.py:sparse_window')
    validate(maze, device_count=8)
    maze.model.attention_mask = 'sudoku'
    with pytest.raises(ConfigError, match='but the task has seq_len 900'):
        validate(maze, device_count=8)


@pytest.mark.slow
def test_the_command_line_refuses_it_in_one_error_line():
    result = subprocess.run([sys.executable, '-m', 'trm_spmd.main', '--config=configs/maze.py:paper',
                             '--config.model.attention_mask=sudoku', '--dry_run'],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: model.attention_mask='sudoku' needs the 81 cells"), \
        result.stderr
    assert 'seq_len 900' in lines[0]


# ---- on the SPMD path ------------------------------------------------------------------

@pytest.mark.slow
def test_masked_step_compiles_once_and_runs_on_the_device(tmp_path):
    config = load_config(f'{REPO}/configs/contributions.py:sparse_attention,runlocal')
    config.update_from_flattened_dict({'train.total_steps': 10, 'train.eval_every_steps': 5,
                                       'train.log_every_steps': 1, 'checkpoint.keep_best': 0})
    train_and_evaluate(config, str(tmp_path))
    assert_compiled_once_on_the_device(str(tmp_path), 10)
