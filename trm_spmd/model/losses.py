"""Deep-supervision loss and metrics (reference: models/losses.py ACTLossHead).

Stablemax runs in float32 here, not the reference's float64: TPUs have no float64 and the
float32 result stays within ~1e-6 relative of it for the logit range a model produces.
"""

import torch
import torch.nn.functional as F

from trm_spmd.batch import IGNORE_LABEL



def _stablemax_s(x):
    # s(x) = 1/(1-x) for x < 0, x + 1 otherwise. The 1/(1-x) branch sees min(x, 0) so its
    # unused gradient cannot be 0 * inf = NaN at x = 1. (The reference adds 1e-30 to 1 - x,
    # which never changes the value: 1 - x >= 1 wherever that branch is used.)
    return torch.where(x < 0, 1 / (1 - torch.clamp(x, max=0)), x + 1)


def log_stablemax(x, dim=-1):
    s = _stablemax_s(x)
    return torch.log(s / s.sum(dim, keepdim=True))


def stablemax_cross_entropy(logits, labels, ignore_index=IGNORE_LABEL):
    """Per-token -log stablemax(logits)[label] in float32; 0 where the label is ignored."""
    s = _stablemax_s(logits.float())
    valid = labels != ignore_index
    safe = torch.where(valid, labels, torch.zeros_like(labels)).long()
    # log(s_y / sum s) for the label only: the reference's value without logs of every class.
    # s_y as a one-hot weighted sum (exact: one term, the others 0), the one-hot from a
    # comparison: a gather (whose backward is a scatter) or F.one_hot (a scatter) makes the
    # SPMD partitioner gather the whole batch onto every device.
    classes = torch.arange(s.shape[-1], device=s.device)
    s_y = torch.where(safe.unsqueeze(-1) == classes, s, torch.zeros_like(s)).sum(-1)
    picked = torch.log(s_y / s.sum(-1))
    return torch.where(valid, -picked, torch.zeros_like(picked))


def softmax_cross_entropy(logits, labels, ignore_index=IGNORE_LABEL):
    vocab = logits.shape[-1]
    loss = F.cross_entropy(logits.float().reshape(-1, vocab), labels.long().reshape(-1),
                           ignore_index=ignore_index, reduction='none')
    return loss.view(labels.shape)


LOSSES = {'stablemax': stablemax_cross_entropy, 'softmax': softmax_cross_entropy}


def predictions(logits):
    return torch.argmax(logits, dim=-1)


def loss_and_metrics(new_carry, outputs, cfg):
    """(total_loss, metrics) for one ACT step, both summed over rows.

    The caller divides the loss by the global batch size. Metrics are 0-d float32 sums over
    the rows that halted at this step and have at least one label, so they reduce across
    devices and steps by addition: count, accuracy (sum of per-row token accuracy),
    exact_accuracy, q_halt_accuracy, steps, plus the loss terms lm_loss, q_halt_loss and
    (with a Q-continue target) q_continue_loss.
    """
    labels = new_carry['labels']
    logits = outputs['logits']
    q_halt = outputs['q_halt_logits']
    mask = labels != IGNORE_LABEL
    counts = mask.sum(-1)
    divisor = counts.clamp_min(1).unsqueeze(-1)

    with torch.no_grad():
        is_correct = mask & (predictions(logits) == labels)
        seq_correct = is_correct.sum(-1) == counts
        valid = new_carry['halted'] & (counts > 0)
        zero = torch.zeros((), dtype=torch.float32, device=logits.device)
        metrics = {
            'count': valid.sum().float(),
            'accuracy': torch.where(valid, (is_correct.float() / divisor).sum(-1), zero).sum(),
            'exact_accuracy': (valid & seq_correct).sum().float(),
            'q_halt_accuracy': (valid & ((q_halt >= 0) == seq_correct)).sum().float(),
            'steps': torch.where(valid, new_carry['steps'].float(), zero).sum(),
        }

    lm_loss = (LOSSES[cfg.loss_type](logits, labels) / divisor).sum()
    q_halt_loss = F.binary_cross_entropy_with_logits(q_halt, seq_correct.to(q_halt.dtype), reduction='sum')
    q_loss = q_halt_loss
    metrics['lm_loss'] = lm_loss.detach()
    metrics['q_halt_loss'] = q_halt_loss.detach()
    if 'target_q_continue' in outputs:
        q_continue_loss = F.binary_cross_entropy_with_logits(
            outputs['q_continue_logits'], outputs['target_q_continue'], reduction='sum')
        metrics['q_continue_loss'] = q_continue_loss.detach()
        q_loss = q_loss + q_continue_loss
    return lm_loss + cfg.q_loss_weight * q_loss, metrics
