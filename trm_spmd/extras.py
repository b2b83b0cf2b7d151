"""Optional extras the library runs without, imported only where a config asks for one: import
it, or say in one line how to install it. Below config/ and train/, so that validation can
check on every host that a run's extras are there before any host trains."""

from trm_spmd.errors import UserError

WANDB_INSTALL = ('install the optional extra with PY=$(bash launch/setup.sh --wandb) and run with that $PY '
                 '(README.md: Weights & Biases), or set logging.wandb=False')


def require_wandb():
    """Imports wandb (logging.wandb, train/wandb_run.py), or says in one line how to get it."""
    try:
        import wandb
    except ImportError as e:
        if e.name == 'wandb':
            raise UserError(f'logging.wandb=True needs the wandb package: {WANDB_INSTALL}') from None
        raise UserError(f'logging.wandb=True: the wandb package does not import ({e}); {WANDB_INSTALL}') from None
    return wandb
