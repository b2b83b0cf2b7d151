"""Maze-Hard grids as numpy arrays: tokens, checks, symmetries, drawings (the generator: generate.py).

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
