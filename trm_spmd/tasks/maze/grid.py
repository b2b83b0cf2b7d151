"""Maze-Hard grids as numpy arrays: tokens, checks, symmetries, the generator, drawings.

A maze is a square n x n grid, row-major, one character a cell from CHARSET: '#' wall,
' ' open, 'S' start, 'G' goal, 'o' a cell of the path. A question holds no 'o'; its answer
marks the cells of one shortest S->G path (4-neighbour moves, S and G themselves unmarked).
Token ids follow the official TinyRecursiveModels builder: PAD 0, CHARSET[i] -> i + 1.
"""

import collections

import numpy as np

CHARSET = '# SGo'
PAD_TOKEN = 0
WALL, OPEN, START, GOAL, PATH = 1, 2, 3, 4, 5
VOCAB_SIZE = 6
DIHEDRAL_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)     # dihedral(dihedral(x, k), DIHEDRAL_INVERSE[k]) == x

_TOKEN_OF_CODE = np.full(256, 255, np.uint8)
for _i, _ch in enumerate(CHARSET):
    _TOKEN_OF_CODE[ord(_ch)] = _i + 1
_CHAR_OF_TOKEN = np.array(list('?' + CHARSET), dtype='<U1')
_CELL_KIND = {PAD_TOKEN: 'padding', WALL: 'wall', OPEN: 'open cell', START: 'start',
              GOAL: 'goal', PATH: 'path cell'}
_AS_NEW = {PAD_TOKEN: 'padding', WALL: 'a wall', OPEN: 'an open cell', START: 'a start (S)',
           GOAL: 'a goal (G)', PATH: 'a path cell'}
_DRAWING = {PAD_TOKEN: '?', WALL: '#', OPEN: '.', START: 'S', GOAL: 'G', PATH: 'o'}
_UNREACHABLE = 'goal is not reachable from the start'
_ROUNDS = (64, 512, 4096, 16384)    # candidates per round of generate; the last size repeats


def side(length):
    """The side n of a square grid of `length` cells; ValueError if there is none."""
    length = int(length)
    n = int(round(length ** 0.5))
    if length <= 0 or n * n != length:
        raise ValueError(f'has {length} cells, which is not a square grid (n x n)')
    return n


def _where(index, n):
    return f'row {index // n + 1} column {index % n + 1}'


def encode(texts):
    """Grid strings (all the same length n*n) -> uint8 tokens [N, n*n]; ValueError with the reason."""
    texts = list(texts)
    if not texts:
        return np.zeros((0, 0), np.uint8)
    length = len(texts[0])
    for i, text in enumerate(texts):
        if len(text) != length:
            raise ValueError(f'grid {i + 1} has {len(text)} characters but grid 1 has {length}')
    try:
        n = side(length)
    except ValueError as e:
        raise ValueError(f'grids have {length} characters, which is not a square grid (n x n)') from e
    codes = np.frombuffer(''.join(texts).encode('utf-32-le'), np.uint32).reshape(len(texts), length)
    tokens = _TOKEN_OF_CODE[np.minimum(codes, 255)]
    tokens[codes > 255] = 255
    bad = np.flatnonzero((tokens == 255).any(axis=1))
    if bad.size:
        row = int(bad[0])
        cell = int(np.argmax(tokens[row] == 255))
        prefix = f'grid {row + 1}: ' if len(texts) > 1 else ''
        raise ValueError(f'{prefix}character {texts[row][cell]!r} at {_where(cell, n)} is not one '
                         f'of {CHARSET!r} (wall, open, start, goal, path)')
    return tokens


def encode_one(text):
    """One grid string -> uint8 tokens [n*n]."""
    return encode([text])[0]


def decode(tokens):
    """One token grid [n*n] back to its string; PAD (or any unknown id) -> '?'."""
    tokens = np.asarray(tokens).reshape(-1).astype(np.int64)
    tokens = np.where((tokens < 0) | (tokens > PATH), PAD_TOKEN, tokens)
    return ''.join(_CHAR_OF_TOKEN[tokens].tolist())


def _tokens(grid):
    """Token row from tokens or a grid string."""
    if isinstance(grid, str):
        return encode_one(grid)
    return np.asarray(grid).reshape(-1)


def distances(open_cells, source):
    """BFS move counts from `source` (row, column) through the True cells; -1 where unreachable."""
    open_cells = np.asarray(open_cells, bool)
    rows, cols = open_cells.shape
    passable = open_cells.tolist()
    dist = [[-1] * cols for _ in range(rows)]
    r0, c0 = int(source[0]), int(source[1])
    dist[r0][c0] = 0
    queue = collections.deque([(r0, c0)])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < rows and 0 <= nc < cols and passable[nr][nc] and dist[nr][nc] < 0:
                dist[nr][nc] = dist[r][c] + 1
                queue.append((nr, nc))
    return np.array(dist, np.int32)


def _question_problem(q):
    """(reason or None, side, start index, goal index, shortest moves or -1) of a question row."""
    try:
        n = side(q.size)
    except ValueError as e:
        return f'question {e}', 0, -1, -1, -1
    bad = np.flatnonzero((q < WALL) | (q > PATH))
    if bad.size:
        return (f'question has token {int(q[bad[0]])} at {_where(int(bad[0]), n)}, '
                f'expected {WALL}..{PATH}'), n, -1, -1, -1
    if (q == PATH).any():
        return (f'question has a path cell (o) at {_where(int(np.argmax(q == PATH)), n)}; '
                'a question marks no path'), n, -1, -1, -1
    for token, name in ((START, 'start cells (S)'), (GOAL, 'goal cells (G)')):
        count = int((q == token).sum())
        if count != 1:
            return f'question has {count} {name}, expected 1', n, -1, -1, -1
    s, g = int(np.argmax(q == START)), int(np.argmax(q == GOAL))
    shortest = int(distances((q != WALL).reshape(n, n), divmod(s, n))[g // n, g % n])
    if shortest < 0:
        return _UNREACHABLE, n, s, g, -1
    return None, n, s, g, shortest


def question_problem(question):
    """Why a maze cannot be asked (not square, not one S and one G, has 'o', G unreachable), or None."""
    return _question_problem(_tokens(question))[0]


def _route(grid, n, s, g):
    """(reason or None, moves) of the path marked in `grid`: the PATH cells with S and G must
    form one simple 4-connected chain from S to G (S, G one chain neighbour, path cells two)."""
    on = (grid == PATH) | (grid == START) | (grid == GOAL)
    on2 = np.pad(on.reshape(n, n), 1)
    neighbours = (on2[:-2, 1:-1].astype(np.int8) + on2[2:, 1:-1] + on2[1:-1, :-2]
                  + on2[1:-1, 2:]).reshape(-1)
    wanted = np.where(grid == PATH, 2, 1)
    wrong = np.flatnonzero(on & (neighbours != wanted))
    if wrong.size:
        cell = int(wrong[0])
        if neighbours[cell] < wanted[cell]:
            return f'path is broken at {_where(cell, n)}', -1
        return f'path branches at {_where(cell, n)} ({int(neighbours[cell])} path neighbours)', -1
    # Degrees alone allow loops apart from the route; walk the route and see what it covers.
    visited = np.zeros(n * n, bool)
    previous, cell, moves = -1, s, 0
    while cell != g:
        visited[cell] = True
        r, c = divmod(cell, n)
        following = [x for x in (cell - n if r > 0 else -1, cell + n if r < n - 1 else -1,
                                 cell - 1 if c > 0 else -1, cell + 1 if c < n - 1 else -1)
                     if x >= 0 and x != previous and on[x]]
        previous, cell, moves = cell, following[0], moves + 1
    stray = np.flatnonzero((grid == PATH) & ~visited)
    if stray.size:
        return f'path cell at {_where(int(stray[0]), n)} is not on the route from S to G (a loop)', -1
    return None, moves


def check_example(question, answer):
    """None when (question, answer) token rows are a valid Maze-Hard example, else the reason."""
    q, a = _tokens(question), _tokens(answer)
    reason, n, s, g, shortest = _question_problem(q)
    if reason:
        return reason
    if a.size != q.size:
        return f'answer has {a.size} cells but the question has {q.size}'
    differs = np.flatnonzero((a != q) & ~((q == OPEN) & (a == PATH)))
    if differs.size:
        cell = int(differs[0])
        kind = _CELL_KIND.get(int(q[cell]), 'unknown')
        if q[cell] == OPEN:
            kind = f'open cell turned into {_AS_NEW.get(int(a[cell]), "token " + str(int(a[cell])))}'
        return f'answer differs from the question at {_where(cell, n)} ({kind})'
    reason, moves = _route(a, n, s, g)
    if reason:
        return reason
    if moves != shortest:
        return f'path has {moves} moves but the shortest has {shortest}'
    return None


def check_prediction(question, prediction):
    """(valid, shortest, message) for a model's predicted tokens on a question."""
    q, p = _tokens(question), _tokens(prediction)
    reason, n, s, g, shortest = _question_problem(q)
    if reason == _UNREACHABLE:
        return False, False, 'the goal cannot be reached from the start'
    if reason:
        return False, False, f'invalid question: {reason}'
    if p.size != q.size:
        return False, False, f'invalid: has {p.size} cells but the question has {q.size}'
    differs = np.flatnonzero((p != q) & ~((q == OPEN) & (p == PATH)))
    if differs.size:
        cell = int(differs[0])
        into = _AS_NEW.get(int(p[cell]), f'token {int(p[cell])}')
        return False, False, (f'invalid: changes the {_CELL_KIND[int(q[cell])]} at '
                              f'{_where(cell, n)} into {into}')
    reason, moves = _route(p, n, s, g)
    if reason:
        return False, False, f'invalid: {reason}'
    if moves == shortest:
        return True, True, f'valid shortest path of {moves} moves'
    return True, False, f'valid path of {moves} moves; the shortest has {shortest}'


def path_lengths(answers):
    """int32 [N]: moves of each answer's path (PATH cells + 1), the difficulty measure."""
    return ((np.asarray(answers) == PATH).sum(axis=-1) + 1).astype(np.int32)


def dihedral(grids, k):
    """The official builder's symmetry k (0..7) of flat row-major grids [..., n*n]."""
    grids = np.asarray(grids)
    n = side(grids.shape[-1])
    a = grids.reshape(grids.shape[:-1] + (n, n))
    if k == 0:
        out = a
    elif k in (1, 2, 3):
        out = np.rot90(a, k, axes=(-2, -1))
    elif k == 4:
        out = a[..., :, ::-1]
    elif k == 5:
        out = a[..., ::-1, :]
    elif k == 6:
        out = np.swapaxes(a, -2, -1)
    elif k == 7:
        out = np.rot90(a, 1, axes=(-2, -1))[..., :, ::-1]
    else:
        raise ValueError(f'dihedral transform {k!r} is not one of 0..7')
    return np.ascontiguousarray(out).reshape(grids.shape)


# ---- the generator --------------------------------------------------------------------
# At 30x30 with min_path 110 only about 1 candidate in 100,000 is kept, so candidates are
# judged in large rounds with bitsets: a grid row is one machine word (column c at bit c)
# and the candidate index is the last axis, so every BFS move is a few whole-array shifts
# and ORs over [rows, words, candidates].

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


def render(question, prediction=None):
    """A drawing, one line a row, two characters a cell: '#' wall, '.' open, S, G, 'o' path.

    With a prediction, its path cells are drawn onto the question; one on a cell that is not
    open shows as '!'.
    """
    q = _tokens(question)
    n = side(q.size)
    chars = [_DRAWING.get(int(t), '?') for t in q.tolist()]
    if prediction is not None:
        p = _tokens(prediction)
        for cell in np.flatnonzero(p[:q.size] == PATH).tolist():
            chars[cell] = 'o' if q[cell] == OPEN else '!'
    return '\n'.join(' '.join(chars[r * n:(r + 1) * n]) for r in range(n))
