"""Stablemax / softmax cross-entropy and the deep-supervision loss and metrics."""

import pytest
import torch
import torch.nn.functional as F

from trm_spmd.batch import IGNORE_LABEL as IGNORE_LABEL_ID
from trm_spmd.model import TRMConfig, loss_and_metrics, predictions
from trm_spmd.model.losses import log_stablemax, softmax_cross_entropy, stablemax_cross_entropy


def stablemax_ce_float64(logits, labels):
    """The reference formula in float64: s(x) = 1/(1-x) (x<0) or x+1; -log(s_y / sum s)."""
    x = logits.double()
    s = torch.where(x < 0, 1 / (1 - x), x + 1)
    logp = torch.log(s / s.sum(-1, keepdim=True))
    valid = labels != IGNORE_LABEL_ID
    picked = logp.gather(-1, torch.where(valid, labels, 0).long().unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, -picked, 0.0)


def test_stablemax_matches_float64_formula():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 81, 11, generator=g) * 8
    logits[0, 0] = torch.tensor([0.0, 1.0, -1.0, 50.0, -50.0, 1e-4, -1e-4, 3.0, 2.0, 0.5, -0.5])
    labels = torch.randint(0, 11, (16, 81), generator=g)
    labels[1, :5] = IGNORE_LABEL_ID
    ours = stablemax_cross_entropy(logits, labels)
    assert ours.dtype == torch.float32
    # float32 instead of the reference's float64: agreement to 2e-6 relative (measured ~4e-7).
    torch.testing.assert_close(ours.double(), stablemax_ce_float64(logits, labels), rtol=2e-6, atol=1e-6)
    assert torch.equal(ours[1, :5], torch.zeros(5))


def test_log_stablemax_normalises():
    x = torch.randn(4, 11) * 5
    torch.testing.assert_close(log_stablemax(x).exp().sum(-1), torch.ones(4))


def test_stablemax_gradient_is_finite_at_one():
    # 1/(1-x) is infinite at x = 1: its unused branch must not leak 0 * inf = NaN into the grad.
    logits = torch.tensor([[[1.0, 0.0, -2.0, 1.0]]], requires_grad=True)
    stablemax_cross_entropy(logits, torch.tensor([[2]])).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_softmax_cross_entropy_matches_log_softmax():
    logits = torch.randn(3, 81, 11)
    labels = torch.randint(0, 11, (3, 81))
    labels[0, 0] = IGNORE_LABEL_ID
    expected = -F.log_softmax(logits, -1).gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    expected[0, 0] = 0
    torch.testing.assert_close(softmax_cross_entropy(logits, labels), expected)


def constructed_step():
    """Three rows of four cells: row 0 fully right, row 1 half right, row 2 unlabelled."""
    labels = torch.tensor([[2, 3, 4, 5], [2, 3, 4, 5], [IGNORE_LABEL_ID] * 4], dtype=torch.int32)
    preds = torch.tensor([[2, 3, 4, 5], [2, 3, 9, 9], [1, 1, 1, 1]])
    logits = F.one_hot(preds, 11).float() * 4 - 1
    carry = {'labels': labels, 'halted': torch.tensor([True, True, True]),
             'steps': torch.tensor([3, 5, 7], dtype=torch.int32)}
    outputs = {'logits': logits, 'q_halt_logits': torch.tensor([2.0, 1.0, -1.0]),
               'q_continue_logits': torch.tensor([0.5, 0.5, 0.5])}
    return carry, outputs


def test_loss_and_metrics_hand_computed():
    carry, outputs = constructed_step()
    cfg = TRMConfig(q_loss_weight=0.5)
    total, m = loss_and_metrics(carry, outputs, cfg)
    ce = stablemax_ce_float64(outputs['logits'], carry['labels'].long()).float()
    lm = ce[0].mean() + ce[1].mean()
    # Row 2 has no labels: "exactly correct" vacuously, as the reference computes it.
    q = F.binary_cross_entropy_with_logits(outputs['q_halt_logits'], torch.tensor([1.0, 0.0, 1.0]), reduction='sum')
    torch.testing.assert_close(m['lm_loss'], lm)
    torch.testing.assert_close(m['q_halt_loss'], q)
    torch.testing.assert_close(total, lm + 0.5 * q)
    assert m['count'].item() == 2                    # row 2 has no labels
    assert m['accuracy'].item() == pytest.approx(1.5)
    assert m['exact_accuracy'].item() == 1
    assert m['q_halt_accuracy'].item() == 1          # row 0 right (2 >= 0, exact); row 1 wrong
    assert m['steps'].item() == 8
    assert all(v.dtype == torch.float32 and v.dim() == 0 for v in m.values())
    assert 'q_continue_loss' not in m


def test_metrics_count_only_halted_rows_but_loss_uses_all():
    carry, outputs = constructed_step()
    _, all_rows = loss_and_metrics(carry, outputs, TRMConfig())
    carry['halted'] = torch.tensor([False, True, True])
    total, m = loss_and_metrics(carry, outputs, TRMConfig())
    assert m['count'].item() == 1 and m['exact_accuracy'].item() == 0 and m['steps'].item() == 5
    torch.testing.assert_close(m['lm_loss'], all_rows['lm_loss'])


def test_q_continue_loss_when_target_present():
    carry, outputs = constructed_step()
    outputs['target_q_continue'] = torch.tensor([0.2, 0.9, 0.5])
    total, m = loss_and_metrics(carry, outputs, TRMConfig(q_loss_weight=0.5))
    qc = F.binary_cross_entropy_with_logits(outputs['q_continue_logits'], outputs['target_q_continue'], reduction='sum')
    torch.testing.assert_close(m['q_continue_loss'], qc)
    torch.testing.assert_close(total, m['lm_loss'] + 0.5 * (m['q_halt_loss'] + qc))


def test_softmax_loss_type_is_used():
    carry, outputs = constructed_step()
    _, m = loss_and_metrics(carry, outputs, TRMConfig(loss_type='softmax'))
    ce = softmax_cross_entropy(outputs['logits'], carry['labels'])
    torch.testing.assert_close(m['lm_loss'], ce[0].mean() + ce[1].mean())


def test_predictions_are_argmax():
    logits = torch.tensor([[[0.0, 3.0, 1.0], [5.0, 0.0, 1.0]]])
    assert predictions(logits).tolist() == [[1, 0]]
