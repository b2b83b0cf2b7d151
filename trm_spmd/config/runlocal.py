"""`:runlocal`: shrink any experiment to something a laptop CPU runs in seconds.

It keeps what makes the variant itself (T and n, the mixer, EMA on/off, the optimizer,
curriculum and halting schedules) and shrinks width, batch, data and run length.
"""


def apply_runlocal(c):
    c.runlocal = True
    c.model.hidden_size = 32
    c.model.num_heads = 2
    c.model.expansion = 2.0
    c.model.puzzle_emb_ndim = min(c.model.puzzle_emb_ndim, 32)
    c.model.forward_dtype = 'float32'
    c.act.halt_max_steps = min(c.act.halt_max_steps, 2)
    c.data.path = ''
    c.data.mixture_paths = ()
    c.data.generate = True
    c.data.generate_train = 64
    c.data.generate_test = 16
    c.data.global_batch_size = 16
    c.eval.global_batch_size = 16
    c.eval.max_examples = 16
    c.optim.grad_accum_steps = 1
    c.optim.warmup_steps = 2
    c.train.total_steps = 4
    c.train.eval_every_steps = 4
    c.train.log_every_steps = 2
    c.checkpoint.every_steps = 4
    return c
