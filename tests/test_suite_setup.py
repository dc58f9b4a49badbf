"""The test suite runs as pyproject.toml sets it up: tests marked with the same ``xdist_group`` share one worker,
so the expensive graded courses that a group shares (tests/test_autograde.py, tests/test_grader.py) are built
once, not once per worker."""
import pytest


@pytest.mark.xdist_group("suite_setup")
def test_xdist_groups_keep_their_tests_on_one_worker(request):
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("not run by pytest-xdist with --dist loadgroup (e.g. -n0)")
    assert request.node.nodeid.endswith("@suite_setup"), (
        f"pytest-xdist did not put this test in its group (node id {request.node.nodeid}): with this pytest, "
        "--dist loadgroup spreads a group over the workers (pytest-dev/pytest-xdist#1386); keep pytest below 9.2")
