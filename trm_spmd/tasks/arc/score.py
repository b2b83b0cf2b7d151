"""ARC's own score: votes over the augmented copies of each test input, pass@K per task.

Every augmented copy of a test input (a dihedral transform and a colour permutation, named
in identifiers.json) yields a predicted grid: cropped at its EOS border, mapped back through
the inverse transform, and counted as one vote for that grid. A test input's candidates rank
by votes, ties by their mean halting confidence (sigmoid of q_halt), as the official
evaluator ranks them. A task scores the fraction of its test inputs whose answer is among
the first K candidates (the ARC Prize's pass@2 gives two attempts), and the score is the
mean over tasks that have their solutions (new tasks may have none: then only the
submission). The first two candidates of every test input make the submission, in the ARC
Prize's JSON format.
"""

import json
import os

import numpy as np

from trm_spmd.tasks.arc.grid import crop, grid_hash, inverse

PASS_KS = (1, 2)
ATTEMPTS = 2


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def attempts_of(candidates):
    """{'attempt_1': grid, 'attempt_2': grid} of one test input from its candidate grids, best
    first: the ARC Prize's entry for it."""
    # A test input without any vote still gets its attempts, so the file is a valid submission.
    chosen = candidates[:ATTEMPTS] or [np.zeros((1, 1), np.uint8)]
    chosen += [chosen[0]] * (ATTEMPTS - len(chosen))
    # An empty answer (no colour at the canvas's corner) is no grid the format allows.
    return {f'attempt_{i + 1}': g.tolist() if g.size else [[0]] for i, g in enumerate(chosen)}


class ArcScorer:
    """add() the model's answers to test rows (any order, any split into calls), then
    result() -> ({'pass@1': .., 'pass@2': .., 'tasks': ..}, submission)."""

    def __init__(self, names, test_puzzles, split=None):
        self.names = names                  # identifiers.json: augmented puzzle name by identifier
        self.test_puzzles = test_puzzles    # task id -> {'train': [...], 'test': [{'input', 'output'}]}
        self.split = split                  # the test split: inputs and identifiers by example index (add)
        if split is not None:
            self._puzzle_of_example = np.repeat(np.arange(len(split.puzzle_indices) - 1),
                                                np.diff(split.puzzle_indices))
        self._inverse = {}
        self.votes = {}                     # task -> input hash -> answer hash -> [votes, sum of confidence]
        self.grids = {}                     # answer hash -> grid

    def _inverse_of(self, identifier):
        if identifier not in self._inverse:
            self._inverse[identifier] = inverse(self.names[identifier])
        return self._inverse[identifier]

    def add(self, example_indices, predictions, q_halt_logits):
        """example_indices [n] of the test split; predictions [n, 900] tokens; q_halt_logits [n]."""
        identifiers = self.split.puzzle_identifiers[self._puzzle_of_example[example_indices]]
        self.add_rows(identifiers, np.asarray(self.split.inputs[example_indices]), predictions,
                      _sigmoid(q_halt_logits))

    def add_rows(self, identifiers, inputs, predictions, confidences):
        """One vote per row: the answer to `inputs` (tokens [n, 900]) of augmented puzzle
        `identifiers` [n], mapped back to the original task's colours and orientation;
        confidences [n] (the halting probability) rank answers with equal votes."""
        for identifier, tokens, answer, confidence in zip(identifiers, inputs, predictions, confidences):
            task, undo = self._inverse_of(int(identifier))
            question = grid_hash(undo(crop(tokens)))
            grid = undo(crop(answer))
            key = grid_hash(grid)
            self.grids.setdefault(key, grid)
            tally = self.votes.setdefault(task, {}).setdefault(question, {}).setdefault(key, [0, 0.0])
            tally[0] += 1
            tally[1] += float(confidence)

    def ranked(self, task, question_grid):
        """[(answer grid, votes)] of one test input, best first."""
        tallies = self.votes.get(task, {}).get(grid_hash(np.asarray(question_grid, np.uint8)), {})
        order = sorted(tallies.items(), key=lambda kv: (kv[1][0], kv[1][1] / kv[1][0]), reverse=True)
        return [(self.grids[key], votes) for key, (votes, _) in order]

    def result(self):
        solved = {k: 0.0 for k in PASS_KS}
        submission, scored = {}, 0
        for task, puzzle in self.test_puzzles.items():
            attempts, hits = [], {k: 0 for k in PASS_KS}
            known = all('output' in pair for pair in puzzle['test'])
            for pair in puzzle['test']:
                candidates = [grid for grid, _ in self.ranked(task, pair['input'])]
                if known:
                    answer = grid_hash(np.asarray(pair['output'], np.uint8))
                    for k in PASS_KS:
                        hits[k] += any(grid_hash(g) == answer for g in candidates[:k])
                attempts.append(attempts_of(candidates))
            submission[task] = attempts
            scored += known
            for k in PASS_KS:
                solved[k] += hits[k] / len(puzzle['test']) if known else 0.0
        metrics = {f'pass@{k}': solved[k] / scored for k in PASS_KS} if scored else {}
        metrics['tasks'] = float(len(self.test_puzzles))
        if scored != len(self.test_puzzles):
            metrics['tasks_with_solutions'] = float(scored)
        return metrics, submission


def with_solutions(test_puzzles, solutions):
    """test_puzzles with the test outputs of `solutions` ({task id: [output grid per test pair]})
    put in; a task whose solutions do not match its test inputs in number is left unscored."""
    merged = {}
    for task, puzzle in test_puzzles.items():
        grids = solutions.get(task)
        if isinstance(grids, list) and len(grids) == len(puzzle['test']):
            puzzle = dict(puzzle, test=[dict(pair, output=grid) for pair, grid in zip(puzzle['test'], grids)])
        merged[task] = puzzle
    return merged


def load_scorer(dataset_dir, split, solutions=None):
    """The scorer of an ARC dataset directory (identifiers.json and test_puzzles.json); with
    `solutions` ({task id: [grid per test pair]}) its tasks are scored against them."""
    with open(os.path.join(dataset_dir, 'identifiers.json')) as f:
        names = json.load(f)
    with open(os.path.join(dataset_dir, 'test_puzzles.json')) as f:
        test_puzzles = json.load(f)
    if solutions:
        test_puzzles = with_solutions(test_puzzles, solutions)
    return ArcScorer(names, test_puzzles, split)
