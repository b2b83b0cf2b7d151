"""Muon for the 2-D weights, Adam for the rest: the URM reference's optimizer (models/muon.py)
with the split its pretrain.py makes under use_muon=True.

Muon (momentum orthogonalised by Newton-Schulz), per 2-D parameter of shape [A, B]:
  buf = momentum * buf + g;  u = g + momentum * buf (Nesterov)
  O = NS(u): u rounded to bfloat16, then in float32: X = u / ||u||_F (transposed so that
      X is wide), five quintic iterations X = a X + (b G + c G^2) X with G = X X^T and the
      reference's (a, b, c) for each iteration (NS_COEFFICIENTS), transposed back. The
      schedule has 8 coefficients and the reference runs 5 of them (muon_ns_steps): O's
      singular values end in [0.45, 1.8], not at 1; 8 iterations bring them within 0.1%.
  p = p * (1 - lr * wd) - lr * 0.2 * sqrt(max(A, B)) * O
The 0.2 * sqrt(max(A, B)) scale gives the update the RMS of a typical AdamW update, so lr and
weight decay carry over from AdamW (Moonlight's rule). Every other parameter (biases, URM's
depthwise convolution) gets the reference's Adam:
  m, v = lerp(m, g, 1 - b1), lerp(v, g^2, 1 - b2)
  p = p * (1 - lr * wd) - lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (eps + sqrt(v))
(eps added to the uncorrected sqrt(v): AdamW adds it to the corrected one).

The split is by shape alone, as the reference makes it: every 2-D main parameter is Muon's,
the token embedding and the lm/q heads included (Muon's authors advise Adam for those); the
puzzle embedding stays with SignSGD.

torch.optim.Muon (torch 2.9) computes a different update, so it is not used: its
Newton-Schulz runs five iterations of one fixed (a, b, c) = (3.4445, -4.7750, 2.0315) in
bfloat16, where the reference uses a schedule of coefficients in float32; its momentum is
an average (buf = lerp(buf, g, 1 - momentum), u = lerp(g, buf, momentum)), the reference's a
sum, which differ only by the factor 1 - momentum the normalisation removes; it takes 2-D
parameters only (no Adam for the rest); its scale 'match_rms_adamw' and its decay are the
reference's.

Plain torch, no data-dependent branch or host read: it traces into the one compiled train
step. Under SPMD data parallelism every device orthogonalises the same all-reduced
gradients (replicated work, a few percent of a URM step: benchmarks/README.md).
"""

import math

import torch

from trm_spmd.optim.base import TraceableOptimizer

# (a, b, c) of each Newton-Schulz iteration, the reference's; iterations past the last repeat it.
NS_COEFFICIENTS = (
    (7.2086, -15.5131, 9.0178),
    (3.9623, -2.5813, 0.4542),
    (3.9466, -2.5765, 0.4544),
    (3.8991, -2.5671, 0.4566),
    (3.7186, -2.5308, 0.4653),
    (3.1390, -2.3073, 0.4733),
    (2.1715, -1.5246, 0.3885),
    (1.8648, -1.2224, 0.3577),
)
MATCHED_ADAMW_RMS = 0.2


def orthogonalize(update, steps):
    """The Newton-Schulz approximation of U V^T for update = U S V^T (float32 [A, B]): its
    singular values land near 1 (not exactly: the iteration trades accuracy for speed)."""
    x = update.to(torch.bfloat16).float()
    wide = x.shape[0] <= x.shape[1]
    if not wide:
        x = x.T
    x = x / x.norm().clamp_min(1e-7)
    for i in range(steps):
        a, b, c = NS_COEFFICIENTS[min(i, len(NS_COEFFICIENTS) - 1)]
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x if wide else x.T


class Muon(TraceableOptimizer):
    """Muon on every 2-D parameter, the reference's Adam on the others. `lr` may be a float
    or a 0-d tensor; both parts take the same lr and weight decay, as the reference's run."""

    def __init__(self, params, lr=1e-4, weight_decay=0.1, momentum=0.95, ns_steps=5, nesterov=True,
                 betas=(0.9, 0.95), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, ns_steps=ns_steps,
                                      nesterov=nesterov, betas=betas, eps=eps))

    def new_state(self, p):
        if p.ndim == 2:
            return {'momentum_buffer': torch.zeros_like(p, memory_format=torch.preserve_format)}
        return {'step': torch.zeros((), dtype=torch.float32, device=p.device),
                'exp_avg': torch.zeros_like(p, memory_format=torch.preserve_format),
                'exp_avg_sq': torch.zeros_like(p, memory_format=torch.preserve_format)}

    def update(self, p, grad, state, group):
        lr = group['lr']
        p.mul_(1 - lr * group['weight_decay'])
        if p.ndim == 2:
            momentum = group['momentum']
            buf = state['momentum_buffer']
            buf.mul_(momentum).add_(grad)
            direction = grad + momentum * buf if group['nesterov'] else buf
            scale = MATCHED_ADAMW_RMS * math.sqrt(max(p.shape))
            p.sub_(orthogonalize(direction, group['ns_steps']).to(p.dtype) * (lr * scale))
            return
        beta1, beta2 = group['betas']
        state['step'] += 1
        t = state['step']
        state['exp_avg'].lerp_(grad, 1 - beta1)
        state['exp_avg_sq'].lerp_(grad * grad, 1 - beta2)
        step_size = lr * (1 - beta2 ** t).sqrt() / (1 - beta1 ** t)
        p.sub_(state['exp_avg'] / (state['exp_avg_sq'].sqrt() + group['eps']) * step_size)
