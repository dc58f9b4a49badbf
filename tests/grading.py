"""Grade notebooks the way an instructor does: plain nbgrader on a scratch course directory.

Used by the round-trip tests: release an assignment from solutions/, hand in notebooks made from the
release (filled with the solutions, untouched, or with chosen answers), run ``nbgrader autograde`` and
read the scores back from the gradebook.
"""
import copy
import os
import runpy
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
sys.path.insert(0, str(ROOT))
from autograder import CONFIG  # noqa: E402


@dataclass
class Answer:
    """A student's answer cell for one exercise: ``why`` says what is wrong or unusual about it;
    for a wrong answer, ``message`` is a fragment the failing tests' feedback must contain."""
    exercise: str
    why: str
    source: str
    message: str = ""


def load_suite(assignment):
    """The realistic answers of ``tests/submissions/<assignment>.py``: (WRONG, UNUSUAL)."""
    suite = runpy.run_path(str(SUBMISSIONS / f"{assignment}.py"), init_globals={"Answer": Answer})
    return suite["WRONG"], suite["UNUSUAL"]


def nbgrader_cells(notebook):
    """grade_id -> cell for every nbgrader cell of a notebook."""
    return {c.metadata["nbgrader"]["grade_id"]: c for c in notebook.cells
            if "grade_id" in c.metadata.get("nbgrader", {})}


def answer_ids(notebook):
    return [g for g, c in nbgrader_cells(notebook).items()
            if c.metadata["nbgrader"].get("solution") and c.cell_type == "code"]


def grade_cells_of(notebook, exercise):
    """The grade ids of the autograder test cells of one exercise."""
    return [g for g, c in nbgrader_cells(notebook).items() if c.metadata["nbgrader"].get("grade")
            and c.cell_type == "code" and (g == f"test_{exercise}" or g.startswith(f"test_{exercise}_"))]


def with_answers(release, answers):
    """A copy of the release notebook whose answer cells take the given sources (grade_id -> source)."""
    notebook = copy.deepcopy(release)
    cells = nbgrader_cells(notebook)
    for grade_id, source in answers.items():
        cells[grade_id].source = source
    return notebook


def solved(release, solution):
    """The release with every answer cell holding the solution's answer: a submission that earns full marks."""
    answers = nbgrader_cells(solution)
    return with_answers(release, {g: answers[g].source for g, c in nbgrader_cells(release).items()
                                  if c.metadata["nbgrader"].get("solution")})


def pack(answers):
    """Spread answers over as few students as possible, at most one per exercise each, so that one
    grading run tests many answers and every student keeps correct exercises to compare against."""
    students = []
    for answer in answers:
        home = next((s for s in students if answer.exercise not in s), None)
        if home is None:
            home = {}
            students.append(home)
        home[answer.exercise] = answer
    return students


class ScratchCourse:
    """An nbgrader course directory with the course's configuration and one assignment."""

    def __init__(self, directory: Path, assignment: str):
        self.root, self.assignment = directory, assignment
        shutil.copy(CONFIG, directory / "nbgrader_config.py")
        shutil.copytree(SOLUTIONS / assignment, directory / "source" / assignment)
        self.nbgrader("generate_assignment", assignment)
        self.release = nbformat.read(self.path("release"), as_version=4)
        self.solution = nbformat.read(self.path("source"), as_version=4)

    def path(self, stage, student=None):
        parts = [stage] + ([student] if student else []) + [self.assignment, f"{self.assignment}.ipynb"]
        return self.root.joinpath(*parts)

    def nbgrader(self, *args):
        # One thread per kernel: the tests already run one grading job per core. COURSE_SMOKE makes the
        # notebooks' training demos take a handful of steps: grading many students must stay quick.
        env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg", COURSE_SMOKE="1")
        subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR"], cwd=self.root,
                       env=env, check=True, capture_output=True)

    def submit(self, student, notebook):
        target = self.path("submitted", student)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, target)

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

    def feedback_text(self, student, grade_id):
        """What the student sees under a graded test cell: its error name, message and traceback."""
        notebook = nbformat.read(self.path("autograded", student), as_version=4)
        outputs = nbgrader_cells(notebook)[grade_id].get("outputs", [])
        return "\n".join(f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error")
