"""The Maze-Hard generator: random mazes kept when their shortest S->G path is long enough.

At 30x30 with min_path 110 only about 1 candidate in 100,000 is kept, so candidates are
judged in large rounds with bitsets: a grid row is one machine word (column c at bit c)
and the candidate index is the last axis, so every BFS move is a few whole-array shifts
and ORs over [rows, words, candidates].
"""

import numpy as np

from trm_spmd.tasks.maze.grid import GOAL, OPEN, PATH, START, WALL

_ROUNDS = (64, 512, 4096, 16384)    # candidates per round of generate; the last size repeats


def _word_type(n):
    return np.uint32 if n <= 32 else np.uint64


def _pack(open_cells):
    """bool [n, n, B] -> words [n, w, B] with cell (r, c) at bit c % bits of word c // bits."""
    n, _, count = open_cells.shape
    word = _word_type(n)
    bits = np.dtype(word).itemsize * 8
    words = np.zeros((n, -(-n // bits), count), word)
    for c in range(n):
        words[:, c // bits] |= open_cells[:, c].astype(word) << word(c % bits)
    return words


def _nth_open(open_cells, running, k):
    """Flat index of the k-th (0-based, row-major) open cell of each candidate in bool
    [n, n, B]; `running` [n, B] counts the open cells up to the end of each row."""
    n, _, count = open_cells.shape
    columns = np.arange(count)
    row = np.minimum((running <= k).sum(axis=0), n - 1)
    before = np.where(row > 0, running[np.maximum(row - 1, 0), columns], 0)
    in_row = np.cumsum(open_cells[row, :, columns], axis=1)        # [B, n]
    return row * n + (in_row <= (k - before)[:, None]).sum(axis=1)


def _pair_distances(passable, starts, goals, accept_above):
    """S->G move counts of a batch of packed grids [n, w, B], -1 where G is unreachable.

    Two BFS balls grow in turn, one around S and one around G; the first time one reaches a
    cell the other has seen, their radii add up to the distance. A ball that stops growing
    first proves G unreachable, usually long before a one-sided BFS would have (most
    candidates have S or G in a small pocket). Only the first candidate longer than
    `accept_above` is wanted, so candidates after it are abandoned and left at -2.
    """
    n, w, count = passable.shape
    word = passable.dtype.type
    bits = passable.dtype.itemsize * 8
    one, carry = word(1), word(bits - 1)
    dist = np.full(count, -2, np.int64)
    index = np.arange(count)
    live = np.ones(count, bool)
    fronts, avail = [], []       # avail: passable cells the ball has not reached yet
    for cells in (starts, goals):
        front = np.zeros_like(passable)
        column = cells % n
        front[cells // n, column // bits, index] = one << (column % bits).astype(word)
        fronts.append(front)
        avail.append(passable & ~front)
    moves = 0
    while index.size:
        turn = moves % 2
        moves += 1
        f = fronts[turn]
        new = f << one
        new |= f >> one
        if w > 1:
            new[:, 1:] |= f[:, :-1] >> carry
            new[:, :-1] |= f[:, 1:] << carry
        new[1:] |= f[:-1]
        new[:-1] |= f[1:]
        new &= avail[turn]
        avail[turn] ^= new
        fronts[turn] = new
        flat = (n * w, index.size)
        # `new` lies in passable, so new & ~avail(other) is new & seen(other).
        met = live & (np.bitwise_or.reduce((new & ~avail[1 - turn]).reshape(flat), axis=0) != 0)
        dead = live & ~met & (np.bitwise_or.reduce(new.reshape(flat), axis=0) == 0)
        dist[index[met]] = moves
        dist[index[dead]] = -1
        live &= ~(met | dead)
        if moves > accept_above and met.any():
            live &= index < index[met][0]
        if 4 * live.sum() <= 3 * live.size:      # compacting costs several steps' work
            keep = np.flatnonzero(live)
            index, live = index[keep], live[keep]
            fronts = [x.take(keep, axis=2) for x in fronts]
            avail = [x.take(keep, axis=2) for x in avail]
    return dist


def _field(open_cells, source):
    """BFS move counts from `source` over bool [n, n] by whole-grid dilation; -1 unreachable."""
    passable = np.pad(open_cells, 1)
    dist = np.full(passable.shape, -1, np.int32)
    front = np.zeros_like(passable)
    front[source[0] + 1, source[1] + 1] = True
    dist[front] = 0
    moves = 0
    while front.any():
        moves += 1
        grown = np.zeros_like(front)
        grown[1:-1, 1:-1] = front[:-2, 1:-1] | front[2:, 1:-1] | front[1:-1, :-2] | front[1:-1, 2:]
        front = grown & passable & (dist < 0)
        dist[front] = moves
    return dist[1:-1, 1:-1]


def default_min_path(size):
    """Maze-Hard's bar (a shortest path of more than 110 moves at 30x30), scaled by area."""
    return int(round(110 * (size / 30) ** 2))


def generate(rng, size, min_path, wall_fraction=(0.3, 0.5), max_attempts=100000):
    """One Maze-Hard example: (question uint8 [size*size], answer uint8 [size*size], attempts).

    The recipe of the HRM paper (after Lehnert et al. 2024): wall probability p ~ U(wall_fraction),
    each cell a wall with probability p, S and G on two distinct random open cells; kept when
    the shortest S->G path has more than min_path moves. The answer is the shortest path that
    steps from S towards G trying up, down, left, right in that order. `attempts` counts the
    candidates drawn up to the kept one. Candidates are drawn in rounds of fixed sizes and the
    first kept one in draw order wins, so the bytes depend only on `rng`.
    """
    size, min_path, max_attempts = int(size), int(min_path), int(max_attempts)
    low, high = (float(x) for x in wall_fraction)
    if size < 2:
        raise ValueError(f'maze size {size} is too small; it needs at least 2x2 cells')
    if not 0.0 <= low <= high < 1.0:
        raise ValueError(f'wall_fraction {wall_fraction!r} must be (low, high) with 0 <= low <= high < 1')
    if min_path >= size * size - 1:
        raise ValueError(f'no {size}x{size} maze has a path of more than {min_path} moves')
    cells = size * size
    attempts, round_ = 0, 0
    while attempts < max_attempts:
        count = min(_ROUNDS[min(round_, len(_ROUNDS) - 1)], max_attempts - attempts)
        round_ += 1
        # Walls from 16-bit uniforms (4 from each raw 64-bit draw): p is honoured to within
        # 2**-16, far below what any statistic of a data set can see, at a fraction of the
        # cost of float draws.
        p = rng.uniform(low, high, size=count)
        threshold = np.minimum(np.round(p * 65536), 65535).astype(np.uint16)
        raw = rng.bit_generator.random_raw(-(-cells * count // 4)).astype('<u8', copy=False)
        uniform16 = raw.view('<u2')[:cells * count].reshape(size, size, count)
        open_ = uniform16 >= threshold
        # S is open cell number a and G open cell number b != a: a uniform distinct pair.
        running = open_.sum(axis=1, dtype=np.int64)
        for row in range(1, size):          # (np.cumsum along a leading axis is slow)
            running[row] += running[row - 1]
        free = running[-1]
        a = rng.integers(0, np.maximum(free, 2))
        b = rng.integers(0, np.maximum(free - 1, 1))
        b += b >= a
        starts, goals = _nth_open(open_, running, a), _nth_open(open_, running, b)
        usable = np.flatnonzero(free >= 2)
        passable = _pack(open_)
        if usable.size < count:
            passable = passable.take(usable, axis=2)
        dist = np.full(count, -1, np.int64)
        dist[usable] = _pair_distances(passable, starts[usable], goals[usable], min_path)
        accepted = np.flatnonzero(dist > min_path)
        if not accepted.size:
            attempts += count
            continue
        pick = int(accepted[0])
        attempts += pick + 1
        open_cells = open_[:, :, pick]
        question = np.where(open_cells.reshape(-1), OPEN, WALL).astype(np.uint8)
        s, g = int(starts[pick]), int(goals[pick])
        question[s], question[g] = START, GOAL
        to_goal = _field(open_cells, divmod(g, size))
        answer = question.copy()
        r, c = divmod(s, size)
        while (r, c) != divmod(g, size):
            for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):   # up, down, left, right
                if 0 <= nr < size and 0 <= nc < size and to_goal[nr, nc] == to_goal[r, c] - 1:
                    r, c = nr, nc
                    break
            answer[r * size + c] = PATH
        answer[g] = GOAL
        return question, answer, attempts
    raise ValueError(f'no {size}x{size} maze with a shortest path of more than {min_path} moves in '
                     f'{max_attempts} attempts (wall fraction {low}..{high}); lower min_path or '
                     'raise max_attempts')
