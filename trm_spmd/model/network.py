"""What the two model families share: embeddings (tokens, puzzle identifiers, positions),
the post-norm block, the heads, the parameter groups, and one ACT step's forward on a dict
of recurrent states. TRM (trm.py) and URM (urm.py) add their layer stack, their reset
states and their recursion.

Module and parameter names follow the references' inner models (TinyRecursiveModels'
models/recursive_reasoning/trm.py, URM's models/urm/urm.py), so an official checkpoint maps
onto ours with a few renames (official.py).
"""

import functools
import math

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from trm_spmd.model import attention
from trm_spmd.model.attention_mask import attention_mask
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.layers import (Attention, CastedEmbedding, CastedLinear, ConvSwiGLU, SwiGLU, rms_norm,
                                   rope_tables)

PUZZLE_EMB = 'puzzle_emb'


class Block(nn.Module):
    """Post-norm: token mix (MLP over positions or self-attention), then a channel MLP
    (SwiGLU for TRM, ConvSwiGLU for URM).

    token_mix_fn (set by a backend, TRM.use_token_mix_kernel): fn(h, gate_up weight, down
    weight, eps) -> rms_norm(h + mlp_t(h), eps, dim=1), the token-mixing sublayer computed by
    a kernel. plan: the blockwise attention's schedule (attention.schedule), if it has one.
    """

    def __init__(self, cfg: TRMConfig, plan=None):
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.mlp_t_mixing = cfg.mlp_t
        if cfg.mlp_t:
            self.mlp_t = SwiGLU(cfg.total_len, cfg.expansion, axis=1)
        else:
            self.self_attn = Attention(cfg.hidden_size, cfg.num_heads, cfg.attention_path, plan)
        self.mlp = (ConvSwiGLU if cfg.family == 'urm' else SwiGLU)(cfg.hidden_size, cfg.expansion)
        self.token_mix_fn = None

    def forward(self, h, rope=None, mask=None):
        if self.token_mix_fn is not None:
            h = self.token_mix_fn(h, self.mlp_t.gate_up_proj.weight, self.mlp_t.down_proj.weight, self.eps)
        elif self.mlp_t_mixing:
            # The reference transposes to [B, D, L] and normalises over L; same math on axis 1.
            h = rms_norm(h + self.mlp_t(h), self.eps, dim=1)
        else:
            h = rms_norm(h + self.self_attn(h, rope, mask), self.eps)
        return rms_norm(h + self.mlp(h), self.eps)


class RecursiveNetwork(nn.Module):
    """Embeddings and heads around a family's recursion; ACT bookkeeping lives in act.py.

    A subclass builds its layer stack and reset states after this __init__ and defines
    initial_states() and recur(). `checkpoint_fn` recomputes each network call of the
    gradient-carrying part of the recursion in backward when grad_checkpointing is on
    (gradient_call); a backend may replace it on the instance with its own
    rematerialisation function.
    """

    checkpoint_fn = staticmethod(functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=False))

    def __init__(self, cfg: TRMConfig):
        super().__init__()
        self.config = cfg
        self.dtype = getattr(torch, cfg.forward_dtype)
        hidden = cfg.hidden_size
        self.embed_scale = math.sqrt(hidden)
        # Construction order follows the references so a shared seed gives the same init.
        self.embed_tokens = CastedEmbedding(cfg.vocab_size, hidden, 1 / self.embed_scale, self.dtype)
        self.lm_head = CastedLinear(hidden, cfg.vocab_size)
        self.q_head = CastedLinear(hidden, 2, bias=True)
        if cfg.puzzle_emb_ndim > 0:
            # Trained by SignSGD, not the main optimizer: see puzzle_emb_parameters().
            self.puzzle_emb = nn.Parameter(torch.zeros(cfg.num_puzzle_identifiers, cfg.puzzle_emb_ndim))
        else:
            self.register_parameter(PUZZLE_EMB, None)
        if cfg.pos_encodings == 'rope':
            cos, sin = rope_tables(cfg.head_dim, cfg.total_len, cfg.rope_theta)
            self.register_buffer('rope_cos', cos, persistent=False)
            self.register_buffer('rope_sin', sin, persistent=False)
        elif cfg.pos_encodings == 'learned':
            self.embed_pos = CastedEmbedding(cfg.total_len, hidden, 1 / self.embed_scale, self.dtype)
        # A constant of the config, built once: not trained, not in the checkpoint ('full': None).
        mask = attention_mask(cfg.attention_mask, cfg.seq_len, cfg.prefix_len, cfg.attention_window)
        self.register_buffer('attention_mask', mask, persistent=False)
        # The blockwise attention's schedule follows the mask, read here on the host once; the
        # family's blocks take it.
        self.attention_plan = attention.schedule(cfg.total_len, mask, cfg.attention_block) \
            if cfg.attention_path == 'blockwise' else None
        with torch.no_grad():
            # Start by never halting on its own: q_halt = -5 for every input.
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)

    def use_float32_weight_grads(self, enabled=True):
        """Accumulate every casted weight's gradient in float32 out of its matmuls (the same
        bfloat16 products) instead of rounding it to bfloat16 per use. A weight is used at
        every network call, so under SPMD data parallelism the rounded form costs one
        bfloat16 all-reduce per use; this form lets the compiler sum the uses first and
        all-reduce each gradient once, in float32. Set by backends that partition the batch
        (XlaRuntime.float32_weight_grads); no effect with forward_dtype float32."""
        for module in self.modules():
            if isinstance(module, CastedLinear):
                module.float32_weight_grad = enabled
        return self

    def use_attention_kernel(self, fn):
        """Every block's attention core, softmax(q k^T / sqrt(d), masked) v, computed by fn
        (Attention.kernel_fn): a backend's kernel (XlaRuntime.attention_kernel)."""
        for module in self.modules():
            if isinstance(module, Attention):
                module.kernel_fn = fn
        return self

    def gradient_call(self, call):
        """`call` (one network call) as the gradient-carrying recursion runs it: with
        grad_checkpointing, recomputed in backward from its inputs, so the backward holds one
        call's activations at a time beside the calls' inputs (recomputing the whole recursion
        at once would hold them all again: 4.38 against 1.50 GiB at 916 positions)."""
        if not (self.config.grad_checkpointing and torch.is_grad_enabled()):
            return call
        return functools.partial(self.checkpoint_fn, call)

    def use_attention_recompute(self, barrier):
        """Every blockwise attention recomputes its scores behind `barrier` (the forward's second
        pass and the backward; Attention.recompute_barrier; XlaRuntime.serialize) instead of
        letting a compiler store them once, float32, for every use (xla.attention_recompute)."""
        for module in self.modules():
            if isinstance(module, Attention):
                module.recompute_barrier = barrier
        return self

    def use_token_mix_kernel(self, fn):
        """Every block's token-mixing sublayer, rms_norm(h + mlp_t(h)) over positions,
        computed by fn (Block.token_mix_fn): a backend's kernel (XlaRuntime.token_mix_kernel)."""
        for module in self.modules():
            if isinstance(module, Block) and module.mlp_t_mixing:
                module.token_mix_fn = fn
        return self

    # ---- parameter groups ----------------------------------------------------

    def puzzle_emb_parameters(self):
        return [] if self.puzzle_emb is None else [self.puzzle_emb]

    def named_main_parameters(self):
        return [(n, p) for n, p in self.named_parameters() if n != PUZZLE_EMB]

    def main_parameters(self):
        return [p for _, p in self.named_main_parameters()]

    # ---- forward pieces -------------------------------------------------------

    def _rope(self):
        return (self.rope_cos, self.rope_sin) if self.config.pos_encodings == 'rope' else None

    def _cycles(self, H_cycles, L_cycles):
        H = self.config.H_cycles if H_cycles is None else H_cycles
        L = self.config.L_cycles if L_cycles is None else L_cycles
        if H < 1 or L < 0:
            raise ValueError(f'the recursion needs H_cycles >= 1 and L_cycles >= 0, got {H} and {L}')
        return H, L

    def input_embeddings(self, inputs, puzzle_identifiers):
        """[B, total_len, hidden] in the forward dtype: puzzle prefix tokens, then the cells."""
        cfg = self.config
        emb = self.embed_tokens(inputs.to(torch.int32))
        if self.puzzle_emb is not None:
            if cfg.num_puzzle_identifiers == 1:
                # Every row uses the one entry: a broadcast, whose backward is a plain sum
                # (torch 2.9's inductor fails to compile the scatter into a one-row table on CPU).
                pe = self.puzzle_emb.expand(puzzle_identifiers.shape[0], -1)
            else:
                pe = F.embedding(puzzle_identifiers.long(), self.puzzle_emb)
            pe = pe.to(self.dtype)
            pad = cfg.prefix_len * cfg.hidden_size - cfg.puzzle_emb_ndim
            if pad > 0:
                pe = F.pad(pe, (0, pad))
            emb = torch.cat((pe.view(-1, cfg.prefix_len, cfg.hidden_size), emb), dim=1)
        if cfg.pos_encodings == 'learned':
            # 1/sqrt(2) keeps the variance of the sum of two unit-variance tables.
            emb = 0.707106781 * (emb + self.embed_pos.weight.to(self.dtype))
        return self.embed_scale * emb

    def heads(self, answer):
        """float32 (logits [B, seq_len, vocab], q_halt [B], q_continue [B]) of the answer state."""
        # Slicing before the head gives the references' values at a fraction of their cost.
        logits = self.lm_head(answer[:, self.config.prefix_len:]).float()
        q = self.q_head(answer[:, 0]).float()
        return logits, q[..., 0], q[..., 1]

    def initial_states(self):
        """{state name: the [hidden] vector a halted row's state restarts from} (config.state_names)."""
        raise NotImplementedError

    def recur(self, states, input_embeddings, H_cycles=None, L_cycles=None):
        """The family's recursion for one ACT step: states dict -> states dict."""
        raise NotImplementedError

    def forward(self, states, inputs, puzzle_identifiers, H_cycles=None, L_cycles=None):
        """One ACT step of the inner model -> (states detached, logits, q_halt, q_continue).

        states: {name: [B, total_len, hidden]} for every name of config.state_names; the
        heads read the first (TRM's z_H, URM's hidden). H_cycles / L_cycles (Python ints)
        override the config for this call, e.g. for a curriculum; each distinct pair traces
        its own graph.
        """
        x = self.input_embeddings(inputs, puzzle_identifiers)
        states = self.recur(states, x, H_cycles, L_cycles)
        logits, q_halt, q_continue = self.heads(states[self.config.state_names[0]])
        return {k: v.detach() for k, v in states.items()}, logits, q_halt, q_continue


def trainable_param_count(model: RecursiveNetwork) -> int:
    """Parameters the main optimizer trains (the puzzle embedding excluded, as the reference counts)."""
    return sum(p.numel() for p in model.main_parameters())
