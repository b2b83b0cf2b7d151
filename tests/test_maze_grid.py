"""Maze-Hard grids: tokens, the example and prediction checks, symmetries; and the generator."""

import numpy as np
import pytest

from trm_spmd.tasks.maze import generate as G, grid as M

# 5x5, S at row 1 column 1, G at row 5 column 5; the only route runs down column 1 and then
# along row 5 (8 moves); column 5 above G is a dead end.
QUESTION = ('S#   '
            ' # # '
            ' # # '
            ' ### '
            '    G')
ANSWER = ('S#   '
          'o# # '
          'o# # '
          'o### '
          'ooooG')
# 4x4 with two routes from S to G: along row 1 (3 moves) and round the walls (7 moves).
OPEN_QUESTION = ('S  G'
                 ' ## '
                 '    '
                 '####')
SHORT_ANSWER = ('SooG'
                ' ## '
                '    '
                '####')
LONG_ANSWER = ('S  G'
               'o##o'
               'oooo'
               '####')


def tokens(text):
    return M.encode_one(text)


def test_token_values_and_round_trip():
    assert (M.CHARSET, M.PAD_TOKEN, M.VOCAB_SIZE) == ('# SGo', 0, 6)
    assert (M.WALL, M.OPEN, M.START, M.GOAL, M.PATH) == (1, 2, 3, 4, 5)
    grids = M.encode(['# SG', 'oSG#'])
    assert grids.dtype == np.uint8 and grids.shape == (2, 4)
    assert grids.tolist() == [[1, 2, 3, 4], [5, 3, 4, 1]]
    assert M.encode_one(ANSWER).shape == (25,)
    for text in (QUESTION, ANSWER, OPEN_QUESTION):
        assert M.decode(M.encode_one(text)) == text
    assert M.decode(np.array([0, 1, 2, 3, 4, 5, 9, 0, 0])) == '?# SGo???'
    assert M.side(900) == 30 and M.side(1) == 1
    with pytest.raises(ValueError, match='not a square'):
        M.side(899)


def test_encode_names_the_bad_character_and_its_place():
    with pytest.raises(ValueError, match=r"'x' at row 2 column 3"):
        M.encode_one('S  ' '  x' '  G')
    with pytest.raises(ValueError, match=r"grid 2: character '\.' at row 1 column 1"):
        M.encode(['S  G', '.SG '])
    with pytest.raises(ValueError, match=r"'é' at row 1 column 2"):
        M.encode_one('Sé G')
    with pytest.raises(ValueError, match='not a square grid'):
        M.encode_one('S G  ')
    with pytest.raises(ValueError, match='grid 2 has 9 characters but grid 1 has 4'):
        M.encode(['S  G', 'S       G'])


def _bellman_ford(open_cells, source):
    """Distances by relaxing every edge until nothing changes (no queue, no visiting order)."""
    rows, cols = open_cells.shape
    big = rows * cols + 1
    dist = np.full((rows, cols), big, np.int64)
    dist[source] = 0
    while True:
        padded = np.pad(dist, 1, constant_values=big)
        best = np.minimum.reduce([padded[:-2, 1:-1], padded[2:, 1:-1], padded[1:-1, :-2],
                                  padded[1:-1, 2:]]) + 1
        new = np.where(open_cells, np.minimum(dist, best), big)
        new[source] = 0
        if (new == dist).all():
            break
        dist = new
    return np.where(dist >= big, -1, dist).astype(np.int32)


@pytest.mark.parametrize('shape, walls', [((9, 9), 0.3), ((12, 7), 0.4), ((20, 20), 0.35)])
def test_distances_agree_with_bellman_ford(shape, walls):
    rng = np.random.default_rng(sum(shape))
    for _ in range(5):
        open_cells = rng.random(shape) >= walls
        source = tuple(int(x) for x in np.argwhere(open_cells)[rng.integers(open_cells.sum())])
        got = M.distances(open_cells, source)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, _bellman_ford(open_cells, source))


def test_check_example_accepts_a_correct_example():
    assert M.check_example(tokens(QUESTION), tokens(ANSWER)) is None
    assert M.check_example(tokens(OPEN_QUESTION), tokens(SHORT_ANSWER)) is None
    # S next to G: the path has no cells at all, one move.
    assert M.check_example(tokens('SG  '), tokens('SG  ')) is None


@pytest.mark.parametrize('question, answer, reason', [
    ('SS G' ' ## ' '    ' '####', 'SS G' ' ## ' '    ' '####', 'has 2 start cells (S), expected 1'),
    ('S   ' ' ## ' '    ' '####', 'S   ' ' ## ' '    ' '####', 'has 0 goal cells (G), expected 1'),
    ('S#  ' '##  ' '   G' '####', 'S#  ' '##  ' '   G' '####', 'goal is not reachable from the start'),
    ('So G' ' ## ' '    ' '####', 'So G' ' ## ' '    ' '####', 'question has a path cell (o) at row 1 column 2'),
    (OPEN_QUESTION, 'SooG' ' #o ' '    ' '####', 'answer differs from the question at row 2 column 3 (wall)'),
    (OPEN_QUESTION, 'SooG' ' ## ' '    ' '#o##', 'answer differs from the question at row 4 column 2 (wall)'),
    (OPEN_QUESTION, 'S#oG' ' ## ' '    ' '####', 'answer differs from the question at row 1 column 2 '
                                                  '(open cell turned into a wall)'),
    (OPEN_QUESTION, 'So G' ' ## ' '    ' '####', 'path is broken at row 1 column 2'),
    (OPEN_QUESTION, OPEN_QUESTION, 'path is broken at row 1 column 1'),
    (OPEN_QUESTION, 'SooG' 'o## ' '    ' '####', 'path branches at row 1 column 1'),
    (OPEN_QUESTION, LONG_ANSWER, 'path has 7 moves but the shortest has 3'),
    (QUESTION, QUESTION[:20] + 'oooo' + 'G', 'path is broken at row 1 column 1'),
])
def test_check_example_rejects_broken_examples(question, answer, reason):
    got = M.check_example(tokens(question), tokens(answer))
    assert got is not None and reason in got, got


def test_check_example_finds_a_loop_apart_from_the_route():
    question = ('S   G'
                '     '
                '     '
                '     '
                '     ')
    answer = ('SoooG'
              '     '
              ' oo  '
              ' oo  '
              '     ')
    assert 'not on the route from S to G' in M.check_example(tokens(question), tokens(answer))
    assert M.check_example(tokens(question), tokens(answer)[:24]).startswith('answer has 24 cells')


def test_check_prediction_messages():
    q = tokens(OPEN_QUESTION)
    assert M.check_prediction(q, tokens(SHORT_ANSWER)) == (True, True, 'valid shortest path of 3 moves')
    assert M.check_prediction(q, tokens(LONG_ANSWER)) == (
        True, False, 'valid path of 7 moves; the shortest has 3')
    valid, shortest, message = M.check_prediction(q, tokens('So G' ' ## ' '    ' '####'))
    assert (valid, shortest, message) == (False, False, 'invalid: path is broken at row 1 column 2')
    valid, shortest, message = M.check_prediction(q, tokens('SooG' ' #o ' '    ' '####'))
    assert not valid and not shortest
    assert message == 'invalid: changes the wall at row 2 column 3 into a path cell'
    assert M.check_prediction(q, tokens(OPEN_QUESTION))[:2] == (False, False)
    unreachable = tokens('S#  ' '##  ' '   G' '####')
    assert M.check_prediction(unreachable, unreachable) == (
        False, False, 'the goal cannot be reached from the start')
    assert M.check_prediction(q, q[:9])[2].startswith('invalid: has 9 cells')


def test_question_problem():
    assert M.question_problem(tokens(QUESTION)) is None
    assert M.question_problem(QUESTION) is None
    assert M.question_problem(tokens('S#  ' '##  ' '   G' '####')) == 'goal is not reachable from the start'
    assert 'has 2 goal cells' in M.question_problem(tokens('SG G'))
    assert 'path cell (o)' in M.question_problem(tokens(ANSWER))
    assert 'not a square grid' in M.question_problem(np.full(5, M.OPEN, np.uint8))
    assert 'token 0' in M.question_problem(np.array([3, 4, 0, 2], np.uint8))


def test_path_lengths():
    answers = M.encode([SHORT_ANSWER, LONG_ANSWER, 'SG  ' * 4])
    lengths = M.path_lengths(answers)
    assert lengths.dtype == np.int32 and lengths.tolist() == [3, 7, 1]


@pytest.mark.parametrize('k', range(8))
def test_dihedral_matches_numpy_and_inverts(k):
    rng = np.random.default_rng(k)
    grid = rng.integers(0, 6, (7, 7)).astype(np.uint8)
    expected = [grid, np.rot90(grid, 1), np.rot90(grid, 2), np.rot90(grid, 3), np.fliplr(grid),
                np.flipud(grid), grid.T, np.fliplr(np.rot90(grid, 1))][k]
    out = M.dihedral(grid.reshape(-1), k)
    assert out.dtype == np.uint8 and out.shape == (49,)
    np.testing.assert_array_equal(out, expected.reshape(-1))
    batch = rng.integers(0, 6, (3, 2, 49)).astype(np.int32)
    moved = M.dihedral(batch, k)
    assert moved.dtype == np.int32 and moved.shape == batch.shape
    np.testing.assert_array_equal(moved[1, 0], M.dihedral(batch[1, 0], k))
    inverse = [0, 3, 2, 1, 4, 5, 6, 7][k]
    assert M.DIHEDRAL_INVERSE[k] == inverse
    np.testing.assert_array_equal(M.dihedral(moved, inverse), batch)


def test_dihedral_keeps_examples_valid():
    q, a = tokens(QUESTION), tokens(ANSWER)
    for k in range(8):
        assert M.check_example(M.dihedral(q, k), M.dihedral(a, k)) is None
    with pytest.raises(ValueError):
        M.dihedral(q, 8)


def _label_walk(question):
    """The label rule spelled out with the checker's BFS: from S, step to the first neighbour
    (up, down, left, right) that is one move closer to G."""
    n = M.side(question.size)
    grid = question.reshape(n, n)
    s = tuple(int(x) for x in np.argwhere(grid == M.START)[0])
    g = tuple(int(x) for x in np.argwhere(grid == M.GOAL)[0])
    to_goal = M.distances(grid != M.WALL, g)
    answer = grid.copy()
    r, c = s
    while True:
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < n and 0 <= nc < n and to_goal[nr, nc] == to_goal[r, c] - 1:
                r, c = nr, nc
                break
        if (r, c) == g:
            return answer.reshape(-1)
        answer[r, c] = M.PATH


def test_generate_is_deterministic_and_honours_min_path():
    first = [G.generate(np.random.default_rng(7), 10, 12) for _ in range(2)]
    (q1, a1, n1), (q2, a2, n2) = first
    assert q1.dtype == np.uint8 and q1.shape == (100,) and a1.shape == (100,)
    assert q1.tobytes() == q2.tobytes() and a1.tobytes() == a2.tobytes() and n1 == n2 >= 1
    other = G.generate(np.random.default_rng(8), 10, 12)
    assert other[0].tobytes() != q1.tobytes()

    rng = np.random.default_rng(0)
    examples = [G.generate(rng, 10, 12) for _ in range(40)]
    answers = np.stack([a for _, a, _ in examples])
    assert (M.path_lengths(answers) > 12).all()
    for question, answer, attempts in examples:
        assert attempts >= 1
        assert M.check_example(question, answer) is None
        np.testing.assert_array_equal(answer, _label_walk(question))


def test_generate_at_maze_hard_size():
    rng = np.random.default_rng(1)
    for _ in range(2):
        question, answer, _ = G.generate(rng, 30, 80, max_attempts=10**7)
        assert question.shape == (900,) and M.path_lengths(answer) > 80
        assert M.check_example(question, answer) is None
        np.testing.assert_array_equal(answer, _label_walk(question))
    for size in (33, 66):      # grid rows wider than one 32-bit / 64-bit word
        question, answer, _ = G.generate(rng, size, 40)
        assert M.check_example(question, answer) is None
        np.testing.assert_array_equal(answer, _label_walk(question))


def test_generate_wall_fraction():
    rng = np.random.default_rng(2)
    questions = np.stack([G.generate(rng, 10, 12)[0] for _ in range(200)])
    walls = (questions == M.WALL).mean(axis=1)
    assert 0.3 <= walls.mean() <= 0.5
    spread = 5 * np.sqrt(0.25 / 100)      # five binomial standard deviations of one maze
    assert (walls >= 0.3 - spread).all() and (walls <= 0.5 + spread).all()
    # With min_path 0 almost nothing is rejected, so the drawn probability shows unbiased.
    questions = np.stack([G.generate(rng, 30, 0, (0.25, 0.25))[0] for _ in range(200)])
    assert abs((questions == M.WALL).mean() - 0.25) < 0.005
    assert not (G.generate(rng, 8, 5, (0.0, 0.0))[0] == M.WALL).any()


def test_generate_places_start_and_goal_on_a_uniform_distinct_pair():
    rng = np.random.default_rng(3)
    counts = {}
    for _ in range(600):
        question, answer, attempts = G.generate(rng, 2, 0, (0.0, 0.0))
        assert attempts == 1 and M.check_example(question, answer) is None
        pair = (int(np.argmax(question == M.START)), int(np.argmax(question == M.GOAL)))
        counts[pair] = counts.get(pair, 0) + 1
    assert len(counts) == 12                     # every ordered pair of distinct cells of 2x2
    assert all(15 <= c <= 85 for c in counts.values()), counts     # 50 expected, 5 sigma


def test_generate_gives_up_with_a_clear_message():
    with pytest.raises(ValueError, match='in 300 attempts'):
        G.generate(np.random.default_rng(0), 5, 20, max_attempts=300)
    with pytest.raises(ValueError, match='no 4x4 maze has a path of more than 15 moves'):
        G.generate(np.random.default_rng(0), 4, 15)
    assert (G.default_min_path(30), G.default_min_path(10)) == (110, 12)


def test_render():
    drawing = M.render(tokens(QUESTION))
    lines = drawing.split('\n')
    assert len(lines) == 5 and lines[0] == 'S # . . .' and lines[4] == '. . . . G'
    with_path = M.render(tokens(QUESTION), tokens(ANSWER)).split('\n')
    assert with_path[1] == 'o # . # .' and with_path[4] == 'o o o o G'
    on_wall = M.render(tokens(OPEN_QUESTION), tokens('S  G' ' o# ' '    ' '####')).split('\n')
    assert on_wall[1] == '. ! # .'
