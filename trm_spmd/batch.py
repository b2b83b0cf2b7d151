"""The batch contract shared by the data loaders, the runtimes and the model: the keys of a
batch, the label value the loss skips, and which rows of a global batch each host holds."""

from trm_spmd.errors import UserError

BATCH_KEYS = ('inputs', 'labels', 'puzzle_identifiers')
IGNORE_LABEL = -100      # label of padded rows and unlabelled cells: no loss, no metric


def host_rows(global_rows, process_index, process_count):
    """(start, stop) of this host's rows in the global batch."""
    if process_count < 1 or not 0 <= process_index < process_count:
        raise UserError(f'process_index={process_index} must lie in [0, process_count={process_count})')
    if global_rows < 1 or global_rows % process_count:
        raise UserError(f'global batch size {global_rows} is not divisible by the {process_count} '
                        f'hosts: use a multiple of {process_count}')
    per_host = global_rows // process_count
    return process_index * per_host, (process_index + 1) * per_host
