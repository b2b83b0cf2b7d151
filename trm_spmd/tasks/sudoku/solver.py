"""Exact Sudoku solver: bitmask candidates, naked and hidden singles, MRV backtracking.

A state is a list of 81 ints, bit d-1 set when digit d is still possible in that cell.
Plain Python lists beat numpy here: the work is many tiny dependent updates, where numpy's
per-call overhead dominates.
"""

import numpy as np

_UNITS = ([[r * 9 + c for c in range(9)] for r in range(9)]
          + [[r * 9 + c for r in range(9)] for c in range(9)]
          + [[(br * 3 + i) * 9 + bc * 3 + j for i in range(3) for j in range(3)]
             for br in range(3) for bc in range(3)])
_PEERS = [sorted({p for unit in _UNITS if c in unit for p in unit} - {c}) for c in range(81)]
_ALL = 0x1FF
_POPCOUNT = [bin(m).count('1') for m in range(512)]


def _propagate(cand, queue):
    """Applies naked and hidden singles until nothing changes; False on a contradiction.

    `queue` holds cells just fixed to one digit whose peers still list that digit.
    """
    while True:
        while queue:
            cell = queue.pop()
            bit = cand[cell]
            for peer in _PEERS[cell]:
                m = cand[peer]
                if m & bit:
                    m ^= bit
                    if not m:
                        return False
                    cand[peer] = m
                    if not m & (m - 1):
                        queue.append(peer)
        for unit in _UNITS:
            seen_once = seen_twice = 0
            for cell in unit:
                m = cand[cell]
                seen_twice |= seen_once & m
                seen_once |= m
            if seen_once != _ALL:
                return False
            hidden = seen_once & ~seen_twice
            if hidden:
                for cell in unit:
                    m = cand[cell]
                    h = m & hidden
                    if h and m != h:
                        if h & (h - 1):
                            return False
                        cand[cell] = h
                        queue.append(cell)
        if not queue:
            return True


def _initial(grid):
    """Candidates after propagating the givens, or None if they contradict."""
    digits = np.asarray(grid).reshape(-1).tolist()
    if len(digits) != 81:
        raise ValueError(f'a grid has 81 cells, got {len(digits)}')
    cand = [_ALL] * 81
    queue = []
    for cell, d in enumerate(digits):
        if d:
            cand[cell] = 1 << (d - 1)
            queue.append(cell)
    return cand if _propagate(cand, queue) else None


def _search(cand, limit, found, rng):
    best, best_count = -1, 10
    for cell in range(81):
        n = _POPCOUNT[cand[cell]]
        if 1 < n < best_count:
            best, best_count = cell, n
            if n == 2:
                break
    if best < 0:
        found.append(cand)
        return
    m = cand[best]
    bits = []
    while m:
        bit = m & -m
        bits.append(bit)
        m ^= bit
    if rng is not None:
        bits = [bits[i] for i in rng.permutation(len(bits))]
    for bit in bits:
        child = cand[:]
        child[best] = bit
        if _propagate(child, [best]):
            _search(child, limit, found, rng)
            if len(found) >= limit:
                return


def _to_digits(cand):
    return np.array([m.bit_length() for m in cand], np.uint8)


def solutions(grid, limit=2, rng=None):
    """Up to `limit` solutions of a grid (uint8 [81], 0 blank), as uint8 [81] arrays.

    With a numpy Generator `rng`, branches are tried in random order (random full grids).
    """
    cand = _initial(grid)
    found = []
    if cand is not None:
        _search(cand, limit, found, rng)
    return [_to_digits(c) for c in found]


def solve(grid):
    """One solution, or None when there is none (uniqueness is not checked)."""
    found = solutions(grid, limit=1)
    return found[0] if found else None


def count_solutions(grid, limit=2):
    """Number of solutions, counting stops at `limit` (2 answers 'is it unique?')."""
    return len(solutions(grid, limit=limit))


def has_other_solution(grid, cell, digit):
    """Whether the grid has a solution with something other than `digit` at `cell`.

    Tells whether blanking `cell` of a unique puzzle whose solution has `digit` there keeps
    it unique, while searching only the alternatives at that one cell.
    """
    cand = _initial(grid)
    if cand is None:
        return False
    others = cand[cell] & ~(1 << (digit - 1))
    while others:
        bit = others & -others
        others ^= bit
        child = cand[:]
        child[cell] = bit
        found = []
        if _propagate(child, [cell]):
            _search(child, 1, found, None)
        if found:
            return True
    return False
