"""Optimizers against their formulas, the LR schedule, the EMA and the optimizer builder."""

import math

import pytest
import torch

from trm_spmd.model import TRM, TRMConfig
from trm_spmd.optim import EMA, AdamATan2, AdamW, Lion, Muon, SignSGD, build_optimizers, learning_rate, set_lr
from trm_spmd.optim.muon import orthogonalize

STEPS = 5
LRS = [1e-2, 3e-2, 2e-2, 5e-3, 1e-2]


def grad_sequence(shape, n=STEPS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(n)]


def run(opt_cls, p0, grads, lrs, tensor_lr, **kw):
    p = torch.nn.Parameter(p0.clone())
    opt = opt_cls([p], lr=lrs[0], **kw)
    for g, lr in zip(grads, lrs):
        set_lr(opt, torch.tensor(lr) if tensor_lr else lr)
        p.grad = g.clone()
        opt.step()
    return p.detach(), opt


def adam_atan2_formula(p0, grads, lrs, b1, b2, wd):
    p, m, v = p0.double(), torch.zeros_like(p0, dtype=torch.float64), torch.zeros_like(p0, dtype=torch.float64)
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        g = g.double()
        p = p * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1 ** t) * torch.atan2(m, v.sqrt() / math.sqrt(1 - b2 ** t))
    return p


@pytest.mark.parametrize('tensor_lr', [False, True])
def test_adam_atan2_matches_formula(tensor_lr):
    p0 = torch.randn(7, 5)
    grads = grad_sequence((7, 5))
    got, opt = run(AdamATan2, p0, grads, LRS, tensor_lr, betas=(0.9, 0.95), weight_decay=0.5)
    expected = adam_atan2_formula(p0, grads, LRS, 0.9, 0.95, 0.5)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)
    step = opt.state[opt.param_groups[0]['params'][0]]['step']
    assert isinstance(step, torch.Tensor) and step.item() == STEPS


def test_adam_atan2_first_step_size_is_independent_of_grad_scale():
    # m = (1-b1) g, sqrt(v / (1-b2)) = |g|: the step is lr / (1-b1) * atan(1-b1) * sign(g).
    p, _ = run(AdamATan2, torch.zeros(3), [torch.tensor([2.0, -0.1, 5.0])], [0.1], False, betas=(0.9, 0.95))
    torch.testing.assert_close(p, torch.tensor([-1.0, 1.0, -1.0]) * 0.1 / 0.1 * math.atan(0.1))


@pytest.mark.parametrize('tensor_lr', [False, True])
def test_adamw_matches_torch(tensor_lr):
    p0 = torch.randn(6, 4)
    grads = grad_sequence((6, 4), seed=1)
    got, _ = run(AdamW, p0, grads, LRS, tensor_lr, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8)
    ref = torch.nn.Parameter(p0.clone())
    opt = torch.optim.AdamW([ref], lr=LRS[0], betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8)
    for g, lr in zip(grads, LRS):
        opt.param_groups[0]['lr'] = lr
        ref.grad = g.clone()
        opt.step()
    torch.testing.assert_close(got, ref.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('tensor_lr', [False, True])
def test_lion_matches_formula(tensor_lr):
    p0 = torch.randn(5, 3)
    grads = grad_sequence((5, 3), seed=2)
    got, _ = run(Lion, p0, grads, LRS, tensor_lr, betas=(0.9, 0.99), weight_decay=0.3)
    p, m = p0.double(), torch.zeros_like(p0, dtype=torch.float64)
    for g, lr in zip(grads, LRS):
        g = g.double()
        update = torch.sign(0.9 * m + 0.1 * g)
        p = p * (1 - lr * 0.3) - lr * update
        m = 0.99 * m + 0.01 * g
    torch.testing.assert_close(got.double(), p, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('tensor_lr', [False, True])
def test_sign_sgd_updates_only_touched_rows(tensor_lr):
    p0 = torch.randn(4, 3)
    g = torch.zeros(4, 3)
    g[0] = torch.tensor([0.5, -2.0, 0.0])
    g[2] = torch.tensor([-1e-9, 3.0, 1.0])
    got, _ = run(SignSGD, p0, [g], [0.1], tensor_lr, weight_decay=2.0)
    expected = p0.clone()
    expected[0] = p0[0] * (1 - 0.2) - 0.1 * torch.tensor([1.0, -1.0, 0.0])
    expected[2] = p0[2] * (1 - 0.2) - 0.1 * torch.tensor([-1.0, 1.0, 1.0])
    torch.testing.assert_close(got, expected)
    assert torch.equal(got[1], p0[1]) and torch.equal(got[3], p0[3])


def test_adam_state_round_trip_continues_identically():
    p0, grads = torch.randn(4, 4), grad_sequence((4, 4), n=6, seed=3)
    straight, _ = run(AdamATan2, p0, grads, [1e-2] * 6, False, weight_decay=0.1)
    p, opt = run(AdamATan2, p0, grads[:3], [1e-2] * 3, False, weight_decay=0.1)
    saved = opt.state_dict()
    resumed = torch.nn.Parameter(p.clone())
    opt2 = AdamATan2([resumed], lr=1e-2, weight_decay=0.1)
    opt2.load_state_dict(saved)
    assert isinstance(opt2.state[resumed]['step'], torch.Tensor)
    for g in grads[3:]:
        resumed.grad = g.clone()
        opt2.step()
    assert torch.equal(resumed.detach(), straight)


# ---- schedule -------------------------------------------------------------------------------

@pytest.mark.parametrize('ratio', [1.0, 0.1])
def test_learning_rate_warmup_and_cosine(ratio):
    lr = lambda s: learning_rate(s, 1e-4, 100, 1100, ratio)  # noqa: E731
    assert lr(0) == 0.0
    assert lr(1) == pytest.approx(1e-6)                       # the reference's first step
    assert lr(50) == pytest.approx(5e-5)
    assert lr(100) == pytest.approx(1e-4)
    assert lr(600) == pytest.approx(1e-4 * (ratio + (1 - ratio) * 0.5))
    assert lr(1100) == pytest.approx(1e-4 * ratio)
    for s in (0, 1, 50, 99, 100, 333, 600, 1100):
        t = learning_rate(torch.tensor(s), 1e-4, 100, 1100, ratio)
        assert t.dtype == torch.float32 and t.dim() == 0
        assert t.item() == pytest.approx(lr(s), rel=1e-5, abs=1e-12)


def test_learning_rate_without_warmup():
    assert learning_rate(0, 1e-3, 0, 10, 0.0) == pytest.approx(1e-3)
    assert learning_rate(torch.tensor(10), 1e-3, 0, 10, 0.0).item() == pytest.approx(0.0, abs=1e-10)


# ---- EMA ------------------------------------------------------------------------------------

def small_model():
    torch.manual_seed(0)
    return TRM(TRMConfig(hidden_size=16, num_heads=2, expansion=1.0, L_layers=1, puzzle_emb_ndim=16,
                         puzzle_emb_len=1, forward_dtype='float32'))


def test_ema_update_swap_and_state():
    model = small_model()
    ema = EMA.for_model(model, decay=0.9)
    assert 'puzzle_emb' not in ema.names and len(ema.names) == len(model.main_parameters())
    w = model.lm_head.weight
    start = w.detach().clone()
    expected = start.clone()
    for k in range(3):
        with torch.no_grad():
            w.add_(1.0)
        ema.update()
        expected = 0.9 * expected + 0.1 * w.detach()
    live = w.detach().clone()
    idx = ema.names.index('lm_head.weight')
    torch.testing.assert_close(ema.shadow[idx], expected)

    param_obj = model.lm_head.weight
    with ema.averaged():
        assert model.lm_head.weight is param_obj
        torch.testing.assert_close(model.lm_head.weight.detach(), expected)
        torch.testing.assert_close(ema.state_dict()['shadow']['lm_head.weight'], expected)
        with pytest.raises(RuntimeError, match='swap_back'):
            ema.update()
    assert torch.equal(model.lm_head.weight.detach(), live)

    state = ema.state_dict()
    other = EMA.for_model(small_model(), decay=0.5)
    other.load_state_dict(state)
    assert other.decay == 0.9
    torch.testing.assert_close(other.shadow[idx], expected)


def test_ema_rejects_state_of_another_model():
    ema = EMA.for_model(small_model(), 0.9)
    with pytest.raises(ValueError, match='does not match'):
        ema.load_state_dict({'decay': 0.9, 'shadow': {'x': torch.zeros(1)}})


# ---- builder ---------------------------------------------------------------------------------

def optim_config(name, puzzle=True):
    ml_collections = pytest.importorskip('ml_collections')
    return ml_collections.ConfigDict({'optim': dict(
        name=name, lr=3e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, eps=1e-8, muon_momentum=0.95,
        muon_ns_steps=5, puzzle_emb_lr=1e-2, puzzle_emb_weight_decay=0.5)})


@pytest.mark.parametrize('name,cls', [('adam_atan2', AdamATan2), ('adamw', AdamW), ('lion', Lion), ('muon', Muon)])
def test_build_optimizers(name, cls):
    model = small_model()
    main, puzzle = build_optimizers(model, optim_config(name))
    assert isinstance(main, cls) and isinstance(puzzle, SignSGD)
    main_params = main.param_groups[0]['params']
    assert all(p is not model.puzzle_emb for p in main_params) and len(main_params) == len(model.main_parameters())
    assert puzzle.param_groups[0]['params'] == [model.puzzle_emb]
    assert main.param_groups[0]['lr'] == 3e-4 and puzzle.param_groups[0]['weight_decay'] == 0.5


def test_build_optimizers_without_puzzle_embedding_and_bad_name():
    model = TRM(TRMConfig(hidden_size=16, num_heads=2, L_layers=1, puzzle_emb_ndim=0))
    assert build_optimizers(model, optim_config('adamw'))[1] is None
    with pytest.raises(ValueError, match='optim.name'):
        build_optimizers(model, optim_config('sgd'))


# ---- Muon ------------------------------------------------------------------------------

# The URM reference's Newton-Schulz coefficients, one (a, b, c) per iteration (models/muon.py).
REFERENCE_NS = [(7.2086, -15.5131, 9.0178), (3.9623, -2.5813, 0.4542), (3.9466, -2.5765, 0.4544),
                (3.8991, -2.5671, 0.4566), (3.7186, -2.5308, 0.4653)]


def newton_schulz_float64(u):
    """The reference's orthogonalisation, written out in float64 from its bfloat16 input."""
    x = u.to(torch.bfloat16).double()
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / max(x.norm(), 1e-7)
    for a, b, c in REFERENCE_NS:
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_formula(p0, grads, lrs, wd, momentum=0.95, betas=(0.9, 0.95), eps=1e-8):
    """URM's update (use_muon): a 2-D p by Muon (Nesterov sum-momentum, NS, lr x 0.2 sqrt(max
    dim)), any other p by its Adam (eps on the uncorrected sqrt(v)); decoupled decay first."""
    p = p0.double()
    buf, m, v = (torch.zeros_like(p) for _ in range(3))
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        g = g.double()
        p = p * (1 - lr * wd)
        if p.ndim == 2:
            buf = momentum * buf + g
            p = p - lr * 0.2 * math.sqrt(max(p.shape)) * newton_schulz_float64(g + momentum * buf)
        else:
            m = m + (1 - betas[0]) * (g - m)
            v = v + (1 - betas[1]) * (g * g - v)
            p = p - lr * math.sqrt(1 - betas[1] ** t) / (1 - betas[0] ** t) * m / (eps + v.sqrt())
    return p


@pytest.mark.parametrize('tensor_lr', [False, True])
@pytest.mark.parametrize('shape', [(12, 40), (40, 12), (9,), (6, 1, 2)])
def test_muon_matches_the_reference_update(shape, tensor_lr):
    """2-D weights (wide and tall) take Muon's step; a bias or URM's [C, 1, 2] convolution
    weight the reference's Adam step."""
    p0 = torch.randn(shape)
    grads = grad_sequence(shape)
    got, opt = run(Muon, p0, grads, LRS, tensor_lr, weight_decay=0.3)
    torch.testing.assert_close(got.double(), muon_formula(p0, grads, LRS, 0.3), rtol=2e-4, atol=2e-5)
    state = opt.state[opt.param_groups[0]['params'][0]]
    assert set(state) == ({'momentum_buffer'} if len(shape) == 2 else {'step', 'exp_avg', 'exp_avg_sq'})


def test_muon_step_orthogonalises_the_momentum():
    """Whatever the gradient's scale and conditioning, the update's singular values land in the
    band the reference's 5 iterations give ([0.45, 1.8]: its 8 coefficients are made for 8
    iterations, after which they are within 0.1% of 1); its size is lr x 0.2 sqrt(max dim)."""
    g = torch.randn(64, 24) @ torch.diag(torch.logspace(-2, 0, 24))   # singular values over 2 decades
    for scale in (1e-4, 1.0, 1e3):
        s = torch.linalg.svdvals(orthogonalize(g * scale, 5).double())
        assert 0.4 < s.min() and s.max() < 1.9, s
    s = torch.linalg.svdvals(orthogonalize(g, 8).double())
    assert 0.99 < s.min() and s.max() < 1.01, s
    p, _ = run(Muon, torch.zeros(64, 24), [g], [1e-2], False, weight_decay=0.0)
    s = torch.linalg.svdvals(p.double() / (1e-2 * 0.2 * math.sqrt(64)))
    assert 0.4 < s.min() and s.max() < 1.9


def test_muon_state_round_trip_continues_identically():
    p0, grads = torch.randn(8, 5), grad_sequence((8, 5), n=4)
    straight, _ = run(Muon, p0, grads, [1e-2] * 4, False)
    first, opt = run(Muon, p0, grads[:2], [1e-2] * 2, False)
    p = torch.nn.Parameter(first.clone())
    resumed = Muon([p], lr=1e-2)
    resumed.load_state_dict(opt.state_dict())
    for g in grads[2:]:
        p.grad = g.clone()
        resumed.step()
    torch.testing.assert_close(p.detach(), straight, rtol=0, atol=0)
