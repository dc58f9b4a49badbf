"""`python -m autograder grade --scheduler`: the sandboxed executions on a real Dask cluster on localhost, a
`dask scheduler` and two `dask worker` processes (one task at a time each), with repair, sanitize and record
on this side. The cluster records the same scores as the local grader; a worker killed while it executes a
submission loses nothing and records nothing twice; an interrupted run resumes without regrading what it
had recorded. The tiny problem set of test_grader.py keeps this quick.
"""
import os
import shutil
import subprocess
import sys
import time

import nbformat
import pytest
from support.clusters import dask_client, dask_cluster, kill_group
from support.courses import ScratchCourse
from test_grader import ASSIGNMENT, CORRECT_ADD, CORRECT_MUL, answer, source_notebook

from autograder.execution.sandbox import sandbox_available

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot "
                                 "create namespaces here: apt-get install bubblewrap"),
              pytest.mark.xdist_group("grader"), pytest.mark.slow]

WRONG_ADD = "def add(a, b):\n    return a - b"
WRONG_MUL = "def mul(a, b):\n    return a + b"
READS_ITS_FILE = CORRECT_ADD + "\nprint(open('data.txt').read())"
# student -> (add, mul, the scores of test_add and test_mul)
STUDENTS = {"ada": (READS_ITS_FILE, CORRECT_MUL, 1, 1), "ben": (WRONG_ADD, CORRECT_MUL, 0, 1),
            "cy": (CORRECT_ADD, WRONG_MUL, 1, 0)}
EXPECTED = {s: {"test_add": add, "test_mul": mul} for s, (_, _, add, mul) in STUDENTS.items()}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A course with the problem set released and every student's submission handed in, not graded yet."""
    course = ScratchCourse(tmp_path_factory.mktemp("course"), ASSIGNMENT, source=source_notebook())
    for student, (add, mul, _, _) in STUDENTS.items():
        folder = course.submit(student, answer(course.release, add, mul))
        (folder / "data.txt").write_text(f"{student}'s own file")   # sent to the worker with the notebook
    return course.root


@pytest.fixture
def course(template, tmp_path):
    shutil.copytree(template, tmp_path / "course")
    return tmp_path / "course"


@pytest.fixture
def cluster(tmp_path):
    """A scheduler and two workers, w1 and w2, on localhost, in folders outside the course."""
    with dask_cluster(tmp_path, workers=2) as running:
        yield running


def grade_command(*options):
    return [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--cell-timeout", "30", *options]


def grade(course, *options):
    result = subprocess.run(grade_command(*options), cwd=course, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"the grader failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def recorded(log):
    """The students a run's log says it recorded, as often as it says so."""
    return sorted(line.split()[1] for line in log.splitlines() if line.strip().startswith("recorded "))


def scores(course):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {s.student.id: {g.name: g.score for g in s.notebooks[0].grades if g.cell_type == "code"}
                for s in gradebook.find_assignment(ASSIGNMENT).submissions}


def test_the_cluster_records_the_same_scores_as_the_local_grader(template, cluster, tmp_path):
    # EXPECTED is what the local grader records for these students (the last test, which grades them locally)
    remote = tmp_path / "remote"
    shutil.copytree(template, remote)
    log = grade(remote, "--scheduler", cluster.address)
    assert "Dask cluster" in log, log
    assert recorded(log) == sorted(STUDENTS)
    assert scores(remote) == EXPECTED
    for student in STUDENTS:   # nbgrader wrote autograded/ here, as after a local run
        assert (remote / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").exists()
    executed = nbformat.read(remote / "autograded" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", []))
    assert "ada's own file" in printed, "the submission's other files did not reach the worker"


def test_a_worker_killed_in_the_middle_of_a_batch_loses_nothing_and_grades_nothing_twice(course, cluster):
    with open(course / "grader.log", "w+") as output:
        grader = subprocess.Popen(grade_command("--scheduler", cluster.address), cwd=course, stdout=output,
                                  stderr=subprocess.STDOUT, text=True)
        try:
            victim, task = _kill_a_busy_worker(cluster)
            assert grader.wait(timeout=600) == 0, (course / "grader.log").read_text()
        finally:
            if grader.poll() is None:
                grader.kill()
        log = (course / "grader.log").read_text()
    assert cluster.processes[victim].poll() is not None, "the worker was not killed"
    assert task.startswith("autograder-"), task
    assert recorded(log) == sorted(STUDENTS), f"a submission was lost or recorded twice:\n{log}"
    assert scores(course) == EXPECTED
    again = grade(course, "--scheduler", cluster.address, "--resume")
    assert recorded(again) == [], f"a resumed run regraded what was done:\n{again}"
    assert scores(course) == EXPECTED


def _kill_a_busy_worker(cluster):
    """Kill (SIGKILL, the worker and its kernels) a worker as soon as it is executing a submission:
    (its index in cluster.processes, the task it was executing)."""
    with dask_client(cluster.address) as client:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            processing = client.processing()
            # The client's view of the workers is refreshed apart from processing(): one may be missing yet.
            names = {address: info["name"] for address, info in client.scheduler_info()["workers"].items()}
            busy = [(names[address], keys[0]) for address, keys in processing.items() if keys and address in names]
            if busy:
                name, task = busy[0]
                victim = 1 + ["w1", "w2"].index(name)
                time.sleep(1)   # into the execution: the kernel is starting or running
                kill_group(cluster.processes[victim])
                return victim, task
            time.sleep(0.1)
    pytest.fail("no worker ever executed a submission")


def test_an_interrupted_run_resumes_without_regrading_what_it_recorded(course):
    grader = subprocess.Popen(grade_command("--workers", "1"), cwd=course, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    first = []
    for line in grader.stdout:     # interrupted right after its first submission is recorded
        if line.strip().startswith("recorded "):
            first.append(line.split()[1])
            break
    kill_group(grader)
    assert first, "the grader recorded nothing before it was stopped"
    resumed = grade(course, "--resume", "--workers", "2")
    assert first[0] not in recorded(resumed), resumed
    assert sorted(recorded(resumed) + first) == sorted(STUDENTS), resumed
    assert scores(course) == EXPECTED
    # A submission handed in again after the interruption is graded again, not kept.
    (course / "submitted" / first[0] / ASSIGNMENT / "data.txt").write_text("changed")
    assert recorded(grade(course, "--resume", "--workers", "2")) == [first[0]]
