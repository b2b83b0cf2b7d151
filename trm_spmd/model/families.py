"""The network of a config's model family (model.family)."""

from trm_spmd.model.config import TRMConfig
from trm_spmd.model.trm import TRM
from trm_spmd.model.urm import URM

NETWORKS = {'trm': TRM, 'urm': URM}


def build_model(cfg: TRMConfig):
    """TRM(cfg) or URM(cfg), initialised from torch's current random state."""
    return NETWORKS[cfg.family](cfg)
