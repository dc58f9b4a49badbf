"""``python -m autograder check NOTEBOOK.ipynb``: what the grader will make of a notebook, before it is handed in.

It runs the notebook as the grader does: matched back to its release (repair.py: Colab drops the cells'
grading metadata), read-only cells put back as the release has them, then every cell in a fresh kernel with
the grader's limits and the training demos in smoke mode (execution/execute.py; sandboxed where bubblewrap is
installed). It prints, per exercise, the visible tests passed and the points their failures cost, of the
exercise's (the hidden tests can cost more), the answers the grader will refuse (the course's finished versions,
and someone else's code: source/library_answers.py), the written questions still unanswered, and the cells that ran too
long, each named as the student sees it (the exercise, the question, or the cell's first line). A repair of the
grading metadata (Colab's) is one line, and so is a copy made from an earlier release; ``--verbose`` lists each
repair. The cell time limit is the grader's (c.Execute.timeout of the course's nbgrader_config.py). The exit
status is non-zero when something will cost points. The hidden tests are not in a student's notebook: passing
the visible tests is necessary, not sufficient.

From a notebook, its last cell calls ``course_testkit.handin.check_this_notebook()``, which runs this
command on the notebook (see handin.py for how it finds the notebook's file).
"""
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import nbformat

from .cells import exercise_of, grade_id, is_answer, is_grade, is_locked, is_solution, is_test
from .execution.execute import execute_notebook
from .execution.sandbox import REPOSITORY, Limits, sandbox_available
from .repair import RELEASE_CHANGED, SCORES_NOTHING, RepairError, of_an_earlier_release, repair_notebook
from .source.library_answers import flagged_answers

REFUSED = "FinishedAnswerUsed"   # the error the course's finished answers raise in their own tests
READ_ONLY_CHANGED = "the grader runs the release's version"   # the end of the repair sentence for such a cell
NO_RELEASE = "no release notebook was found to compare with"
LIMITS = ("timeout", "output-limit", "kernel-died", "not-run")  # execution/execute.py's problems that stop a cell


@dataclass
class ExerciseResult:
    name: str
    points: float = 0.0          # the points of its test cells
    cells: int = 0               # its test cells
    passed: int = 0              # the test cells whose visible tests passed
    failing: float = 0.0         # the points of its test cells whose visible tests failed
    failures: list = field(default_factory=list)   # "test_id: the first line of the error"
    refused: bool = False        # the answer is the course's finished version
    not_own: str = ""            # why the grader will score it 0 as someone else's code (source/library_answers.py)

    @property
    def lost(self):
        """The points the grader will take at least: those of the failing visible tests, all of them for an answer
        it refuses. The hidden tests can take more."""
        return self.points if self.refused or self.not_own else self.failing


@dataclass
class CheckReport:
    exercises: list
    repairs: list        # what the grader would repair, as sentences
    slow: list           # graded cells (answers, tests) that broke a limit (time, memory, output): they cost points
    problem: str = ""    # why the notebook cannot be graded at all
    unanswered: list = field(default_factory=list)   # written questions left as released, named by their text
    slowed: list = field(default_factory=list)       # ungraded cells over a limit: nothing in them is graded

    @property
    def ok(self):
        return not (self.problem or self.slow or self.unanswered
                    or any(e.failures or e.not_own for e in self.exercises))

    @property
    def notable_repairs(self):
        """The repairs a student should know of: a deleted answer cell, an edited read-only cell. The others
        (metadata Colab dropped, cell ids, order) change nothing of their work."""
        return [r for r in self.repairs if any(text in r for text in (SCORES_NOTHING, READ_ONLY_CHANGED, NO_RELEASE))]


def course_releases():
    """assignment -> the release notebook's text, from the course package (or this checkout's notebooks/)."""
    try:
        folder = resources.files("transformer_course.releases")
    except ModuleNotFoundError:
        folder = REPOSITORY / "notebooks" if REPOSITORY else None
    if folder is None or not folder.is_dir():
        return {}
    return {entry.name: (entry / f"{entry.name}.ipynb").read_text(encoding="utf-8") for entry in folder.iterdir()
            if entry.is_dir() and (entry / f"{entry.name}.ipynb").is_file()}


def find_release(notebook, name):
    """The release ``notebook`` was made from: the one named like it, else the one it matches best (a
    notebook saved by Colab may be called anything). None when no release is at hand."""
    releases = {assignment: nbformat.reads(text, as_version=4) for assignment, text in course_releases().items()}
    if name in releases:
        return releases[name]
    fits = []
    for release in releases.values():
        try:
            fits.append((len(repair_notebook(notebook, release)[1]), len(fits), release))
        except RepairError:
            pass
    return min(fits)[2] if fits else None


def as_the_grader_gets_it(notebook, release):
    """(notebook, repairs): matched back to the release, its read-only cells as the release has them."""
    if release is None:
        return notebook, [f"{NO_RELEASE}: give it with --release"]
    repaired, repairs = repair_notebook(notebook, release)
    originals = {grade_id(c): c.source for c in release.cells if is_locked(c) and grade_id(c)}
    released = {grade_id(c): c.metadata["nbgrader"] for c in release.cells if grade_id(c)}
    # the read-only cells of a copy made from an earlier release: the release changed them, not the student
    earlier = {grade_id(c) for c in notebook.cells if grade_id(c) in released
               and of_an_earlier_release(c.metadata["nbgrader"], released[grade_id(c)])}
    for index, cell in enumerate(repaired.cells):
        if grade_id(cell) in originals and cell.source != originals[grade_id(cell)]:
            cell.source = originals[grade_id(cell)]
            repairs.append(f"{cell_label(repaired, index)} changed in the current release, and {RELEASE_CHANGED}: "
                           f"{READ_ONLY_CHANGED}" if grade_id(cell) in earlier else
                           f"you changed {cell_label(repaired, index)}, which is read-only: {READ_ONLY_CHANGED}")
    return repaired, repairs


def cell_label(notebook, index):
    """A cell named as a student sees it: the exercise it answers or tests, the question it answers, else
    its first line."""
    cell = notebook.cells[index]
    exercises = [grade_id(c) for c in notebook.cells if is_answer(c)]
    if is_answer(cell):
        return f"your {grade_id(cell)}"
    if is_test(cell):
        owner = exercise_of(grade_id(cell), exercises)
        return f"the tests of {owner}" if owner else f"the test cell {grade_id(cell)}"
    if cell.cell_type == "markdown" and is_solution(cell) and is_grade(cell):
        return f"your answer to {_question(notebook, index)}"
    return f"the cell that begins {_first_line(cell.source)}"


def _question(notebook, index):
    """The question a written answer answers: the first sentence of the text above it, quoted."""
    for cell in reversed(notebook.cells[:index]):
        lines = [line for line in cell.source.splitlines() if line.strip() and not line.startswith("#")]
        if cell.cell_type == "markdown" and lines:
            return _first_line(" ".join(lines).split(". ")[0])
    return "the written question"


def _first_line(text, width=60):
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f'"{line if len(line) <= width else line[:width - 1].rstrip() + "…"}"'


def unanswered_questions(notebook, release):
    """The written questions (answers graded by hand) left as the release has them, named by their text."""
    stubs = {grade_id(c): c.source.strip() for c in (release.cells if release else [])
             if c.cell_type == "markdown" and is_solution(c)}
    return [f"{_question(notebook, index)} ({cell.metadata['nbgrader'].get('points', 0):g} points)"
            for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "markdown" and is_solution(cell) and is_grade(cell)
            and cell.source.strip() in ("", stubs.get(grade_id(cell), ""))]


def exercise_results(executed):
    """One ExerciseResult per exercise of the executed notebook, in notebook order."""
    names = [grade_id(c) for c in executed.cells if is_answer(c)]
    results = {name: ExerciseResult(name) for name in names}
    for cell in executed.cells:
        owner = results.get(exercise_of(grade_id(cell), names)) if is_test(cell) else None
        if owner is None:
            continue
        points = float(cell.metadata["nbgrader"].get("points", 0))
        errors = [o for o in cell.outputs if o.output_type == "error"]
        owner.points += points
        owner.cells += 1
        if errors:
            owner.failing += points
            first_line = (str(errors[0].evalue).splitlines() or [""])[0]   # NotImplementedError() has none
            owner.failures.append(f"{grade_id(cell)}: {errors[0].ename}: {first_line}".rstrip(": "))
            owner.refused = owner.refused or any(e.ename == REFUSED for e in errors)
        else:
            owner.passed += 1
    return list(results.values())


def assignment_of(release):
    """The course's assignment whose exercises the release's answer cells are ("" for none of them)."""
    from .registry import registry

    answers = {grade_id(c) for c in release.cells if is_answer(c)} if release is not None else set()
    return next((name for name, exercises in registry().notebooks.items() if answers and answers <= set(exercises)), "")


def _graded_package(notebook, release):
    """The course package as the grader's kernel of this assignment sees it (execution/stripped.py: without the finished
    answers of this notebook and the later ones)."""
    from .execution.judging import all_judged
    from .execution.stripped import stripped_package

    return stripped_package(assignment_of(release), keep_oracles=not all_judged(notebook))


def check_notebook(notebook, release, limits=None, sandbox=None):
    """Run ``notebook`` as the grader would and report on it (a CheckReport)."""
    try:
        prepared, repairs = as_the_grader_gets_it(notebook, release)
    except RepairError as error:
        return CheckReport([], [], [], problem=str(error))
    sandbox = sandbox_available() if sandbox is None else sandbox
    with tempfile.TemporaryDirectory(prefix="course-check-") as workdir:
        executed, problems = execute_notebook(prepared, workdir, limits or Limits(), env={"COURSE_SMOKE": "1"},
                                              sandbox=sandbox, package=_graded_package(prepared, release))
    over = [(p.index, f"{cell_label(executed, p.index)}: {p.message}") for p in problems if p.kind in LIMITS]
    graded = {i for i, cell in enumerate(executed.cells) if is_answer(cell) or is_test(cell)}
    results, not_own = exercise_results(executed), flagged_answers(prepared, release)
    for result in results:
        result.not_own = not_own.get(result.name, "")
        # In judged cells the kernel's refusal decides nothing, but the same answer is found in the source.
        result.refused = result.refused or "the course's finished" in result.not_own
    return CheckReport(results, repairs, [text for i, text in over if i in graded],
                       unanswered=unanswered_questions(prepared, release),
                       slowed=[text for i, text in over if i not in graded])


def render(report, verbose=False):
    """The report as text for a terminal or a notebook cell. ``verbose``: every repair, not one line for them."""
    if report.problem:
        return f"This notebook cannot be graded: {report.problem}"
    lines = [f"{'exercise':<30} {'test cells passed':<18} {'points lost':<16} verdict"]
    for result in report.exercises:
        verdict = "REFUSED: it is the course's finished version" if result.refused else (
            "REFUSED: not your own work, 0 points" if result.not_own else
            "ok" if not result.failures else "will lose points")
        lost = f"{result.lost:g} of {result.points:g}"
        lines.append(f"{result.name:<30} {f'{result.passed} of {result.cells}':<18} {lost:<16} {verdict}")
        lines += [f"    {result.name}: {result.not_own}"] if result.not_own else []
        lines += [f"    {failure}" for failure in result.failures]
    shown = report.repairs if verbose else report.notable_repairs
    for title, items in (("Written questions not answered yet (graded by hand):", report.unanswered),
                         ("Over the grader's limits (these cost points):", report.slow),
                         ("Over the grader's limits (nothing in these cells is graded, but the grader stops them "
                          "and the cells after them may miss what they define):", report.slowed),
                         ("The grader will repair:", shown)):
        if items:
            lines += ["", title] + [f"  - {item}" for item in items]
    rest = [r for r in report.repairs if r not in shown]
    if any(RELEASE_CHANGED in r for r in rest):
        lines += ["", "Your copy was made from an earlier release of this assignment, which has changed since: the "
                      "grader takes the changed cells from the current release (details: --verbose)."]
    if any(RELEASE_CHANGED not in r for r in rest):
        lines += ["", "This notebook lost some of its grading metadata (Colab and some editors drop it): the grader "
                      "puts it back from the release, and nothing of your work is lost (details: --verbose)."]
    if report.exercises:
        lines += ["", "Points lost: what the failing visible tests cost, of the exercise's points (the hidden tests "
                      "can cost more)."]
    lines += ["", "Everything the visible tests check passes; hidden tests decide the grade." if report.ok else
              "Something above will cost points."]
    return "\n".join(lines)


def main(notebook_path, release_path=None, cell_timeout=None, verbose=False):
    """The command: returns its exit status."""
    path = Path(notebook_path)
    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as error:
        print(f"error: cannot read {path}: {error}", file=sys.stderr)
        return 2
    release = nbformat.read(release_path, as_version=4) if release_path else find_release(notebook, path.stem)
    limits = Limits(cell_timeout=cell_timeout) if cell_timeout else Limits()
    report = check_notebook(notebook, release, limits)
    print(render(report, verbose))
    return 0 if report.ok else 1
