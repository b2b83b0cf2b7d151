"""The model's own view of the run config: everything the network, ACT and loss read.

One config serves both model families (`family`): TRM (two states, z_H and z_L, and blocks
of a token mix and a SwiGLU) and URM (one hidden state re-injected with the input every
loop, blocks of attention and a ConvSwiGLU). Everything else (embeddings, heads, ACT,
losses) is shared, so the fields mean the same in both; where a field reads differently
for URM it says so.

Its checks are the one place the model's rules live: the run config's validation builds a
TRMConfig to apply them, so messages name the run config's keys (model.hidden_size, ...).
"""

import dataclasses

from trm_spmd.errors import UserError
from trm_spmd.model import attention, attention_mask as masks

FAMILIES = ('trm', 'urm')
_DTYPES = ('bfloat16', 'float32', 'auto')
_POS_ENCODINGS = ('none', 'rope', 'learned')
_LOSS_TYPES = ('stablemax', 'softmax')
# Field -> its key in the run config (trm_spmd/config/schema.py), for messages.
_KEYS = {'halt_max_steps': 'act.halt_max_steps', 'exploration_prob': 'act.exploration_prob',
         'no_ACT_continue': 'act.no_ACT_continue', 'loss_type': 'loss.type', 'q_loss_weight': 'loss.q_loss_weight',
         'vocab_size': 'dataset vocab_size', 'seq_len': 'dataset seq_len',
         'num_puzzle_identifiers': 'dataset num_puzzle_identifiers'}


def _key(field):
    return _KEYS.get(field, f'model.{field}')


class ModelConfigError(UserError, ValueError):
    """A model setting the network cannot be built with; one line naming the config key."""


@dataclasses.dataclass(frozen=True)
class TRMConfig:
    family: str = 'trm'
    vocab_size: int = 11
    seq_len: int = 81
    num_puzzle_identifiers: int = 1
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    H_cycles: int = 3             # URM: outer loops, all but the last without gradients
    L_cycles: int = 6             # URM: loops per outer loop (inject the input, run every layer)
    L_layers: int = 2             # URM: num_layers
    mlp_t: bool = True
    pos_encodings: str = 'none'
    rope_theta: float = 1e4
    attention_mask: str = 'full'
    attention_window: int = 1
    attention_impl: str = 'auto'
    attention_block: int = attention.BLOCK
    puzzle_emb_ndim: int = 512
    puzzle_emb_len: int = 16
    rms_norm_eps: float = 1e-5
    forward_dtype: str = 'bfloat16'
    grad_checkpointing: bool = False
    halt_max_steps: int = 16
    exploration_prob: float = 0.1
    no_ACT_continue: bool = True
    loss_type: str = 'stablemax'
    q_loss_weight: float = 0.5

    def __post_init__(self):
        def check(ok, message):
            if not ok:
                raise ModelConfigError(message)

        def one_of(field, allowed):
            value = getattr(self, field)
            check(value in allowed, f'{_key(field)}={value!r} is not one of {", ".join(map(repr, allowed))}')

        one_of('family', FAMILIES)
        if self.family == 'urm':
            check(not self.mlp_t, "model.family='urm' mixes tokens by attention (its blocks are attention + "
                                  'ConvSwiGLU): set model.mlp_t=False')
        one_of('forward_dtype', _DTYPES)
        one_of('pos_encodings', _POS_ENCODINGS)
        one_of('loss_type', _LOSS_TYPES)
        for name in ('vocab_size', 'seq_len', 'num_puzzle_identifiers', 'hidden_size', 'num_heads',
                     'H_cycles', 'L_cycles', 'L_layers', 'halt_max_steps'):
            check(getattr(self, name) >= 1, f'{_key(name)}={getattr(self, name)} must be >= 1')
        check(self.expansion > 0, f'model.expansion={self.expansion} must be > 0')
        check(0.0 <= self.exploration_prob <= 1.0, f'act.exploration_prob={self.exploration_prob} must be in [0, 1]')
        if not self.mlp_t:
            check(self.hidden_size % self.num_heads == 0,
                  f'model.hidden_size={self.hidden_size} must be divisible by model.num_heads={self.num_heads}')
        one_of('attention_mask', masks.KINDS)
        if self.attention_mask != 'full':
            check(not self.mlp_t, f'model.attention_mask={self.attention_mask!r} restricts self-attention: '
                                  'set model.mlp_t=False, or model.attention_mask=\'full\'')
            unfit = masks.fits(self.attention_mask, self.seq_len)
            check(unfit is None, f'model.attention_mask={self.attention_mask!r} {unfit}, but the task has '
                                 f'seq_len {self.seq_len}; use \'full\' or a structure of this task')
        one_of('attention_impl', attention.IMPLS)
        check(self.attention_block >= 1, f'model.attention_block={self.attention_block} must be >= 1')
        if self.attention_mask == 'window':
            check(self.attention_window >= 1, f'model.attention_window={self.attention_window} must be >= 1')
        if self.pos_encodings == 'rope':
            check((self.hidden_size // self.num_heads) % 2 == 0,
                  'model.pos_encodings=rope needs an even head dimension (model.hidden_size / model.num_heads)')
        check(self.puzzle_emb_ndim >= 0 and self.puzzle_emb_len >= 0, 'model.puzzle_emb_ndim/len must be >= 0')
        if self.puzzle_emb_ndim > 0:
            check(1 <= self.puzzle_emb_len and self.puzzle_emb_ndim <= self.puzzle_emb_len * self.hidden_size,
                  f'model.puzzle_emb_ndim={self.puzzle_emb_ndim} does not fit in model.puzzle_emb_len='
                  f'{self.puzzle_emb_len} tokens of {self.hidden_size}; raise model.puzzle_emb_len')

    @property
    def prefix_len(self) -> int:
        """Positions holding the puzzle embedding; 0 means the state is just the cells."""
        return self.puzzle_emb_len if self.puzzle_emb_ndim > 0 else 0

    @property
    def state_names(self) -> tuple:
        """The recurrent states an ACT step carries per row, each [total_len, hidden_size]."""
        return ('hidden',) if self.family == 'urm' else ('z_H', 'z_L')

    def calls_per_cycle(self, L_cycles):
        """Network calls (one pass through every layer) in one outer cycle: TRM updates z_L
        L_cycles times and z_H once; URM runs L_cycles loops."""
        return L_cycles if self.family == 'urm' else L_cycles + 1

    @property
    def total_len(self) -> int:
        return self.prefix_len + self.seq_len

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def with_auto_dtype(self, fast_dtype):
        """forward_dtype 'auto' -> fast_dtype (what the device computes fastest); others stay."""
        return dataclasses.replace(self, forward_dtype=fast_dtype) if self.forward_dtype == 'auto' else self

    def with_auto_attention(self, fast_attention):
        """attention_impl 'auto' -> fast_attention (what the backend runs fastest: Runtime.fast_attention);
        others stay. A model built from an unresolved 'auto' computes dense attention."""
        if self.attention_impl != 'auto':
            return self
        return dataclasses.replace(self, attention_impl=fast_attention)

    def token_mixing(self, kernel=False):
        """How the blocks mix positions, in words for the run log; `kernel`: a backend's Pallas
        kernels compute it (xla.token_mix_kernel / xla.attention_kernel)."""
        if self.mlp_t:
            return 'MLP over positions' + (' (Pallas kernels)' if kernel else '')
        if kernel:
            return 'self-attention by fused flash-attention Pallas kernels'
        if self.attention_path == 'dense':
            return 'self-attention, dense (scaled_dot_product_attention)'
        return (f'self-attention, blockwise ({self.attention_block}-position blocks, two-pass softmax, '
                'recomputed in backward)')

    @property
    def attention_path(self):
        """The attention the model computes ('dense' or 'blockwise'), or None for the token-mixing MLP."""
        if self.mlp_t:
            return None
        return 'blockwise' if self.attention_impl == 'blockwise' else 'dense'

    @classmethod
    def from_config(cls, config, *, vocab_size=11, seq_len=81, num_puzzle_identifiers=1):
        """Builds from the run config (`model.*`, `act.*`, `loss.*`) plus the dataset's sizes."""
        m, a = config.model, config.act
        return cls(
            # A run's config.json from before model families existed (solve.py reads it) was a TRM.
            family=m.get('family', 'trm'),
            vocab_size=vocab_size,
            seq_len=seq_len,
            num_puzzle_identifiers=num_puzzle_identifiers,
            hidden_size=m.hidden_size,
            num_heads=m.num_heads,
            expansion=m.expansion,
            H_cycles=m.H_cycles,
            L_cycles=m.L_cycles,
            L_layers=m.L_layers,
            mlp_t=m.mlp_t,
            pos_encodings=m.pos_encodings,
            rope_theta=m.rope_theta,
            # A run's config.json from before these keys existed (solve.py reads it) meant full attention.
            attention_mask=m.get('attention_mask', 'full'),
            attention_window=m.get('attention_window', 1),
            attention_impl=m.get('attention_impl', 'auto'),
            attention_block=m.get('attention_block', attention.BLOCK),
            puzzle_emb_ndim=m.puzzle_emb_ndim,
            puzzle_emb_len=m.puzzle_emb_len,
            rms_norm_eps=m.rms_norm_eps,
            forward_dtype=m.forward_dtype,
            grad_checkpointing=m.grad_checkpointing,
            halt_max_steps=a.halt_max_steps,
            exploration_prob=a.exploration_prob,
            no_ACT_continue=a.no_ACT_continue,
            loss_type=config.loss.type,
            q_loss_weight=config.loss.q_loss_weight,
        )
