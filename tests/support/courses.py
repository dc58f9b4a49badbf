"""Grade notebooks the way an instructor does: plain nbgrader on a scratch course directory.

Used by the round-trip tests: release an assignment from solutions/, hand in notebooks made from the release
(support/notebooks.py), run ``nbgrader autograde`` and read the scores back from the gradebook (each nbgrader
command as ``python -m nbgrader`` runs it, forked from a process that imported nbgrader once: warm_nbgrader.py).
"""
import functools
import os
import shutil
from pathlib import Path

import nbformat

from autograder import CONFIG

from .notebooks import ROOT, SOLUTIONS, answer_ids, nbgrader_cells
from .warm_nbgrader import WarmNbgrader

# One thread per kernel: the tests already run one grading job per core. COURSE_SMOKE makes the
# notebooks' training demos take a handful of steps: grading many students must stay quick.
# COURSE_TEST_SEED: the secret of the hidden tests' inputs, fixed so that a failure can be repeated (set it to try
# another; tests/test_secret_inputs.py grades with others).
TEST_SEED = os.environ.get("COURSE_TEST_SEED", "20261128")
GRADING_ENV = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg", COURSE_SMOKE="1", COURSE_TEST_SEED=TEST_SEED)


def stripped_path(assignment):
    """A folder to put first on the kernel's PYTHONPATH so that it imports ``assignment``'s copies of the course
    package and the kit (autograder/execution/stripped.py: without the finished answers of that notebook and the
    later ones), with the oracles, since the replay's kernel judges the cells itself."""
    from autograder.execution.stripped import stripped_package

    return str(stripped_package(assignment, keep_oracles=True))


@functools.cache
def worker_nbgrader():
    """One per test worker, started by its first nbgrader command."""
    return WarmNbgrader(GRADING_ENV)


class ScratchCourse:
    """An nbgrader course directory with the course's configuration and one assignment, released with
    ``nbgrader generate_assignment`` from `source` (a notebook; default: solutions/<assignment>), or, with
    `released_copy`, the course's own release (notebooks/<assignment>) copied, without a source. `config`:
    lines added to the course's nbgrader_config.py. The one way the tests build a course directory."""

    def __init__(self, directory: Path, assignment: str, source=None, config="", released_copy=False):
        self.root, self.assignment = Path(directory), assignment
        (self.root / "nbgrader_config.py").write_text(CONFIG.read_text() + config)
        if released_copy:
            self.path("release").parent.mkdir(parents=True)
            shutil.copy(ROOT / "notebooks" / assignment / f"{assignment}.ipynb", self.path("release"))
            self.solution = None
        else:
            if source is None:
                shutil.copytree(SOLUTIONS / assignment, self.root / "source" / assignment)
            else:
                self.path("source").parent.mkdir(parents=True)
                nbformat.write(source, self.path("source"))
            self.nbgrader("generate_assignment", assignment)
            self.solution = nbformat.read(self.path("source"), as_version=4)
        self.release = nbformat.read(self.path("release"), as_version=4)

    def path(self, stage, student=None):
        parts = [stage] + ([student] if student else []) + [self.assignment, f"{self.assignment}.ipynb"]
        return self.root.joinpath(*parts)

    def nbgrader(self, *args):
        """``python -m nbgrader <args>`` in the course's folder (run by the worker's warm nbgrader)."""
        worker_nbgrader().run([*args, "--log-level=ERROR"], self.root)

    def submit(self, student, notebook, timestamp=None):
        """Hand in `notebook` as `student` (with nbgrader's timestamp.txt when `timestamp` is given); returns
        the student's folder."""
        target = self.path("submitted", student)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, target)
        if timestamp is not None:
            (target.parent / "timestamp.txt").write_text(timestamp)
        return target.parent

    def solution_answers(self):
        cells = nbgrader_cells(self.solution)
        return {g: cells[g].source for g in answer_ids(self.solution)}

    def autograde(self):
        self.nbgrader("autograde", self.assignment, "--force")

    def scores(self):
        """student -> {grade_id: (score, max_score)} for every autograded test cell."""
        from nbgrader.api import Gradebook
        result = {}
        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gradebook:
            for student in gradebook.students:
                submission = gradebook.find_submission_notebook(self.assignment, self.assignment, student.id)
                result[student.id] = {g.name: (g.score, g.max_score) for g in submission.grades
                                      if g.cell_type == "code"}
        return result
