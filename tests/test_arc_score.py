"""ARC's score: votes over augmented copies mapped back, pass@K per task, the submission."""

import numpy as np
import pytest

from trm_spmd.tasks.arc.grid import augmented_name, forward, to_tokens
from trm_spmd.tasks.arc.score import ArcScorer

QUESTION = np.array([[1, 2, 0], [3, 4, 5]], np.uint8)
ANSWER = np.array([[5, 4], [0, 3], [2, 1]], np.uint8)
WRONG = np.array([[7]], np.uint8)


def _copies(count, seed=0):
    """'task' and `count` - 1 augmented copies, each a symmetry and a colour map that keeps black."""
    rng = np.random.default_rng(seed)
    names = ['<blank>', 'task']
    for i in range(count - 1):
        mapping = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        names.append(augmented_name('task', i % 8, mapping))
    return names


def _rows(names, answers, question=QUESTION):
    """Token rows of the question and the model's answer as each copy sees them (transformed)."""
    inputs, predictions = [], []
    for name, answer in zip(names[1:], answers):
        transform = forward(name)
        inputs.append(to_tokens(transform(question), transform(question))[0])
        predictions.append(to_tokens(transform(answer), transform(answer))[0])
    return np.arange(1, len(names)), np.stack(inputs), np.stack(predictions)


def _score(names, answers, confidences=None, test=None):
    test = test or {'task': {'train': [], 'test': [{'input': QUESTION.tolist(), 'output': ANSWER.tolist()}]}}
    scorer = ArcScorer(names, test)
    ids, inputs, predictions = _rows(names, answers)
    scorer.add_rows(ids, inputs, predictions, np.full(len(ids), 0.5) if confidences is None else confidences)
    return scorer.result()


def test_right_answers_seen_through_every_transform_score_everything():
    names = _copies(9)
    metrics, submission = _score(names, [ANSWER] * 8)
    assert metrics == {'pass@1': 1.0, 'pass@2': 1.0, 'tasks': 1.0}
    assert submission == {'task': [{'attempt_1': ANSWER.tolist(), 'attempt_2': ANSWER.tolist()}]}


def test_the_answer_with_more_votes_wins():
    names = _copies(6)
    assert _score(names, [ANSWER] * 3 + [WRONG] * 2)[0]['pass@1'] == 1.0
    metrics, submission = _score(names, [WRONG] * 3 + [ANSWER] * 2)
    assert (metrics['pass@1'], metrics['pass@2']) == (0.0, 1.0)
    assert submission['task'][0] == {'attempt_1': WRONG.tolist(), 'attempt_2': ANSWER.tolist()}


def test_equal_votes_rank_by_halting_confidence():
    names = _copies(5)
    answers = [ANSWER, WRONG, ANSWER, WRONG]
    assert _score(names, answers, np.array([0.9, 0.1, 0.9, 0.1]))[0]['pass@1'] == 1.0
    assert _score(names, answers, np.array([0.1, 0.9, 0.1, 0.9]))[0]['pass@1'] == 0.0


def test_a_task_scores_the_fraction_of_its_test_inputs_and_tasks_average():
    names = _copies(3)
    other = np.array([[3, 3]], np.uint8)
    test = {'task': {'test': [{'input': QUESTION.tolist(), 'output': ANSWER.tolist()},
                              {'input': other.tolist(), 'output': other.tolist()}]},
            'unseen': {'test': [{'input': QUESTION.tolist(), 'output': ANSWER.tolist()}]}}
    scorer = ArcScorer(names, test)
    ids, inputs, predictions = _rows(names, [ANSWER] * 2)
    scorer.add_rows(ids, inputs, predictions, np.full(2, 0.5))
    metrics, submission = scorer.result()
    assert metrics['pass@2'] == pytest.approx((0.5 + 0.0) / 2) and metrics['tasks'] == 2
    assert len(submission['task']) == 2 and submission['unseen'] == [{'attempt_1': [[0]], 'attempt_2': [[0]]}]
