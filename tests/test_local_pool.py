"""The local grader's pool of workers (autograder.execution.dispatch.LocalPool): a submission that kills its worker
fails alone, with the reason, and every other submission is graded."""
import operator
import os

import pytest

from autograder.execution.dispatch import ClusterError, LocalPool

pytestmark = pytest.mark.slow   # starts worker processes


def test_a_worker_that_dies_fails_its_own_submission_only():
    pool = LocalPool(2, task=operator.call)
    try:
        pool.submit("alice", abs, -5)
        pool.submit("killer", os._exit, 9)      # the worker dies as one killed for memory would: no reply
        pool.submit("bob", pow, 2, 10)
        pool.submit("carol", max, 3, 7)
        results = {}
        for student, future in pool.completed():
            try:
                results[student] = future.result()
            except ClusterError as error:
                results[student] = str(error)
    finally:
        pool.close()
    assert results["alice"] == 5 and results["bob"] == 1024 and results["carol"] == 7
    assert "the worker grading it died" in results["killer"] and "not graded" in results["killer"]
