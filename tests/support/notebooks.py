"""Notebooks for the tests: the solutions, the realistic answers of tests/submissions/, nbgrader's cells, and
releases filled with chosen answers (as a student hands them in)."""
import copy
import runpy
import uuid
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
SUBMISSIONS = ROOT / "tests" / "submissions"


@dataclass
class Answer:
    """A student's answer cell for one exercise: ``why`` says what is wrong or unusual about it;
    for a wrong answer, ``message`` is a fragment the failing tests' feedback must contain, and ``misleading``
    one it must not (a hint for another mistake)."""
    exercise: str
    why: str
    source: str
    message: str = ""
    misleading: str = ""


def load_suite(assignment):
    """The realistic answers of ``tests/submissions/<assignment>.py``: (WRONG, UNUSUAL)."""
    suite = runpy.run_path(str(SUBMISSIONS / f"{assignment}.py"), init_globals={"Answer": Answer})
    return suite["WRONG"], suite["UNUSUAL"]


def finished_answers(exercises):
    """Every route to the course's finished version of each exercise: answers that must score 0 there."""
    import transformer_course

    answers = []
    for name in exercises:
        finished = getattr(transformer_course, name)
        routes = {
            "imports the finished version": f"from transformer_course import {name}",
            "an alias through its module": f"import {finished.__module__} as finished_module\n{name} = finished_module.{name}",
            "a lookup by name": f"import importlib\n{name} = getattr(importlib.import_module('transformer_course'), '{name}')",
            "a verbatim copy of the package's source": (
                f"import inspect\nimport transformer_course\n"
                f"finished_globals = dict(vars(inspect.getmodule(transformer_course.{name})))\n"
                f"exec(inspect.getsource(transformer_course.{name}), finished_globals)\n"
                f"{name} = finished_globals['{name}']"),
        }
        if isinstance(finished, type):
            routes["a subclass"] = f"import transformer_course\nclass {name}(transformer_course.{name}):\n    pass"
            routes["a module that holds the finished one"] = (
                f"import transformer_course\nclass {name}(nn.Module):\n    def __init__(self, *args, **kwargs):\n"
                f"        super().__init__()\n        self.inner = transformer_course.{name}(*args, **kwargs)\n\n"
                f"    def forward(self, *args, **kwargs):\n        return self.inner(*args, **kwargs)")
        else:
            routes["a wrapper around a reference taken earlier"] = (
                f"import transformer_course\n_finished = transformer_course.{name}\n\n"
                f"def {name}(*args, **kwargs):\n    return _finished(*args, **kwargs)")
            routes["a wrapper that looks it up by name"] = (
                f"def {name}(*args, **kwargs):\n    import importlib\n"
                f"    return getattr(importlib.import_module('transformer_course'), '{name}')(*args, **kwargs)")
        answers += [Answer(name, why, source, f"finished `{name}`") for why, source in routes.items()]
    return answers


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


def nbgrader_cell(cell, grade_id, *, solution=False, grade=False, points=0):
    """`cell` (a cell, or the source of a code cell) with nbgrader's metadata: an answer cell (`solution`), a
    test cell (`grade`, worth `points`), both (a written answer graded by hand), or a locked cell (neither)."""
    cell = nbformat.v4.new_code_cell(cell) if isinstance(cell, str) else cell
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "solution": solution, "grade": grade, "locked": not solution,
                                 "schema_version": 3, **({"points": points} if grade else {})}
    return cell


def colab(nb, ids="new"):
    """What Colab hands back: the nbgrader metadata (and nbgrader's editable/deletable) dropped, its own
    added, the cell ids regenerated (``ids="new"``), kept (``"keep"``) or gone with nbformat 4.0 (``"none"``)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for key in ("nbgrader", "editable", "deletable"):
            cell.metadata.pop(key, None)
        cell.metadata["colab"] = {"id": uuid.uuid4().hex[:12]}
        if ids == "new":
            cell.id = uuid.uuid4().hex[:12]
        elif ids == "none":
            del cell["id"]
    if ids == "none":
        nb.nbformat_minor = 0
    nb.metadata["colab"] = {"provenance": []}
    return nb


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
