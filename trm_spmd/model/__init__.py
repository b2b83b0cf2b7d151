"""The TRM and URM models, ACT, losses and FLOP counts: pure torch, no device or XLA knowledge.

It imports only the floor (batch, errors); config/, runtime/ and train/ build on it.
"""

from trm_spmd.model.act import act_step, exploration_prob_at, initial_carry
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.families import build_model
from trm_spmd.model.flops import eval_flops_per_example_step, network_call_flops, train_flops_per_example_step
from trm_spmd.model.losses import loss_and_metrics, predictions
from trm_spmd.model.official import (CheckpointMismatchError, infer_config_from_official, load_official,
                                     to_official)
from trm_spmd.model.network import trainable_param_count
from trm_spmd.model.rng import counter_uniforms
from trm_spmd.model.trm import TRM
from trm_spmd.model.urm import URM

__all__ = [
    'CheckpointMismatchError', 'TRM', 'TRMConfig', 'URM', 'act_step', 'build_model', 'counter_uniforms',
    'eval_flops_per_example_step', 'exploration_prob_at', 'infer_config_from_official', 'initial_carry',
    'load_official', 'loss_and_metrics', 'network_call_flops', 'predictions', 'to_official',
    'train_flops_per_example_step', 'trainable_param_count',
]
