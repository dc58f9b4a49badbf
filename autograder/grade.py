"""``python -m autograder grade ASSIGNMENT``: grade every submission, sandboxed and in parallel.

Plain ``nbgrader autograde`` runs one submission at a time, with the instructor's rights, in a kernel that
can read the gradebook and every other submission. This grader keeps nbgrader's gradebook and its own
grading steps, and moves only the execution out of nbgrader:

1. **repair**  each submitted notebook is matched back to the release (Colab drops cell metadata:
   see repair.py) and copied to ``.autograder/ASSIGNMENT/repaired/``; a notebook that cannot be matched
   is left out, so it scores nothing, and the student's report says why.
2. **sanitize** ``nbgrader autograde`` runs on the repaired copies without executing anything: it clears
   outputs, restores the locked and test cells (hidden tests included) from the gradebook and checks the
   metadata, exactly as it always does. The results go to ``.autograder/ASSIGNMENT/sanitized/``.
3. **execute** the sanitized notebooks run in parallel, each in its own sandbox (bubblewrap: no network,
   no view of anything but the submission's own files, limits on time, memory, processes and output;
   see execution/sandbox.py and execution/execute.py). The notebook itself never enters the sandbox, so the hidden tests
   cannot be read from disk. The workers are local processes, or a Dask cluster's (execution/dispatch.py): each
   gets a submission and the release as bytes, and sends the executed notebooks back, with an error in
   the test cells of any exercise answered with someone else's code (source/library_answers.py). A test cell
   written as probe and judge is judged in the worker's own process, on inputs drawn from a secret of the
   grader's (execution/judging.py); any other test cell (an instructor's plain ``assert`` cell) passes or fails on the
   kernel's word, as in plain nbgrader: the grader names such cells of the assignment before it grades.
4. **record** ``nbgrader autograde --force`` runs again, on the sanitized copies and without sanitizing
   or checking them a second time, with its Execute step replaced by ``ReplayExecution``, which pastes in
   the outputs of step 3: nbgrader scores the cells and writes the gradebook and ``autograded/`` as it would
   have after executing them itself.

The steps overlap: a submission goes to a worker as soon as it is sanitized, and is recorded as soon as its
result is back, while the workers run the others. A recorded submission is marked done
(``.autograder/ASSIGNMENT/done/STUDENT.json``), so that ``resume`` skips it if it has not changed.

Finally ``grades-ASSIGNMENT.csv`` (one row per student and notebook), ``grades-ASSIGNMENT-cells.csv`` (one
row per student and graded cell) and ``.autograder/ASSIGNMENT/report.json`` (repairs, broken cells, errors:
what the feedback shows). Grading some students (``--student``) keeps the others' rows and reports.
A submission with no notebook that can be graded (not JSON, another assignment's), or that could not be executed or
recorded, is an error in its rows (an empty score, never a 0) and leaves no grade in the gradebook; every failure's
whole story (nbgrader's log, a traceback) goes to ``.autograder/ASSIGNMENT/logs/STUDENT.txt``.

A regrade keeps manual grading honest: nbgrader flags every answer graded by hand for review again. An answer whose
text did not change keeps its grade and comment; one that changed waits for a person everywhere (the CSVs, `report`,
the feedback page, the formgrader), its earlier grade set aside in ``.autograder/ASSIGNMENT/earlier-manual-grades.json``.
``report_assignment`` (``python -m autograder report``) writes the CSVs again from the gradebook as it is.
"""
import csv
import hashlib
import json
import os
import shutil
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from traitlets import Unicode

from .execution.dispatch import (
    ClusterError,
    copy_file,
    open_pool,
    read_chunks,
    submission_files,
    submission_payload,
    without_notebooks,
)
from .execution.sandbox import CELL_TIMEOUT, Limits, memory_accounting, sandbox_available
from .nbgrader_course import (
    autograde,
    faster_nbgrader,
    nbgrader_api,
    nbgrader_config,
    nbgrader_output,
    nbgrader_reason,
    open_gradebook,
    submitted_students,
)
from .repair import RepairError, repair_file

STAGING = ".autograder"


class GradingError(Exception):
    """The course directory or the assignment is not ready to be graded."""


def check_course(course):
    """The course directory, resolved, once it is one: it has the course's nbgrader_config.py. Without it the
    gradebook, the folders and the limits would be nbgrader's defaults, whatever the directory holds."""
    course = Path(course).resolve()
    if not (course / "nbgrader_config.py").is_file():
        found = " (it has a gradebook.db, but no configuration to say how it was made)" \
            if (course / "gradebook.db").exists() else ""
        raise GradingError(f"{course} is not a course directory: it has no nbgrader_config.py{found}; run the "
                           f"command in your course directory, or copy the course's configuration there (docs/"
                           f"instructors.md, step 1)")
    return course


def gradebook_path(course):
    """The gradebook's file when the course keeps it in SQLite (nbgrader's default), else None."""
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.engine import make_url

    url = make_url(CourseDirectory(config=nbgrader_config(course)).db_url)
    return Path(url.database) if url.drivername.startswith("sqlite") and url.database else None


def course_assignments(course):
    """The assignments of the course's source/ folder, each a folder holding the instructor's notebooks."""
    source = Path(course) / "source"
    return sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []


def _release_advice(course, assignment):
    """How to record `assignment` in the gradebook, when source/ holds it: nbgrader skips an assignment whose
    release/ folder exists, recording nothing, unless it is given --force."""
    if assignment not in course_assignments(course):
        return f"source/ has no assignment {assignment!r} (it has: {', '.join(course_assignments(course)) or 'none'})"
    return (f"release it with `nbgrader generate_assignment {assignment} --force`, which records its tests from "
            f"source/{assignment} in the gradebook and writes release/{assignment} (without --force nbgrader skips an "
            f"assignment whose release/ folder exists, and records nothing)")


def check_assignment(course, assignment, graded=False):
    """Refuse, before anything is written, an assignment the course's gradebook does not know (and, for
    `graded`, one nobody was graded in yet). Opening a gradebook that does not exist would create it."""
    from nbgrader.api import MissingEntry

    database = gradebook_path(course)
    if database is not None and not database.exists():
        raise GradingError(f"there is no gradebook ({database}): {_release_advice(course, assignment)}")
    with open_gradebook(course) as gradebook:
        try:
            gradebook.find_assignment(assignment)
        except MissingEntry:
            known = ", ".join(a.name for a in gradebook.assignments) or "none"
            advice = f"; {_release_advice(course, assignment)}" if assignment in course_assignments(course) else ""
            raise GradingError(f"the gradebook has no assignment {assignment!r} (it has: {known}){advice}") from None
    if graded and not (any((course / "autograded").glob(f"*/{assignment}")) or read_report(course, assignment)):
        raise GradingError(f"nobody's {assignment} is graded yet: run `python -m autograder grade {assignment}` first")


def course_cell_timeout(course):
    """The seconds a cell may run: the course's c.Execute.timeout (its nbgrader_config.py), which plain nbgrader
    uses too, else the course package's (sandbox.CELL_TIMEOUT); None where the course sets no limit (0, -1, None)."""
    config = nbgrader_config(Path(course).resolve())
    if "timeout" not in config.Execute:
        return CELL_TIMEOUT
    timeout = config.Execute.timeout
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None


def _replay_preprocessor():
    """The Execute step of the record phase (defined lazily: nbgrader is imported only when grading)."""
    from nbgrader.preprocessors import NbGraderPreprocessor

    class ReplayExecution(NbGraderPreprocessor):
        """Fill a sanitized notebook with the outputs its sandboxed execution produced."""

        executed_directory = Unicode("", help="folder of the executed notebooks: STUDENT/ASSIGNMENT/NB.ipynb"
                                     ).tag(config=True)

        def preprocess(self, nb, resources):
            info = resources["nbgrader"]
            path = Path(self.executed_directory, info["student"], info["assignment"], info["notebook"] + ".ipynb")
            executed = nbformat.read(path, as_version=4) if path.exists() else None
            code_cells = [c for c in nb.cells if c.cell_type == "code"]
            if executed is None or [c.source for c in executed.cells] != [c.source for c in nb.cells]:
                reason = "it was not executed" if executed is None else "it changed after execution"
                for cell in code_cells:    # nothing to trust: every test cell scores 0
                    cell.outputs = [nbformat.v4.new_output("error", ename="NotExecuted", traceback=[],
                                                           evalue=f"the grader has no outputs for this notebook: {reason}")]
                return nb, resources
            # The outputs include the errors the worker added to the test cells of an exercise answered with
            # someone else's code (dispatch.execute_submission).
            for cell, done in zip(nb.cells, executed.cells):
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = done.outputs, done.execution_count
            return nb, resources

    return ReplayExecution


# ----------------------------------------------------------------------------- one run's submissions

@dataclass
class NotebookReport:
    notebook: str
    repairs: list = field(default_factory=list)    # what repair.py changed
    problems: list = field(default_factory=list)   # cells that broke: timeouts, dead kernels, restarts, ...
    error: str = ""                                # why the notebook could not be graded at all
    seconds: float = 0.0
    skipped: list = field(default_factory=list)    # the submission's files left out: links, oversized files


def _nbgrader_step(course, single_pass, **overrides):
    """A function (assignment, student) -> "" or nbgrader's error: one `nbgrader autograde --force` with
    `overrides`. Students go one at a time: the gradebook is one SQLite file."""
    api = nbgrader_api(course, **overrides)

    def run(assignment, student):
        started = time.perf_counter()
        result = autograde(api, assignment, student, single_pass)
        run.seconds += time.perf_counter() - started
        if result["success"]:
            return ""
        return nbgrader_output(result) or "nbgrader autograde failed"

    run.seconds = 0.0    # spent in nbgrader so far: the part of grading that stays on this machine
    return run


def nbgrader_steps(course, stage, single_pass=True):
    """(sanitize, record): nbgrader's two steps as the grader runs them, each a function (assignment, student)
    -> "" or nbgrader's error. `stage`: the staging folders {"repaired", "sanitized", "executed"}. Each step is
    one pass of nbgrader's autograde over each notebook (`single_pass`; else nbgrader's two, one doing nothing)."""
    relative = {name: os.path.relpath(path, course) for name, path in stage.items()}
    sanitize = _nbgrader_step(course, single_pass, **{
        "CourseDirectory.submitted_directory": relative["repaired"],
        "CourseDirectory.autograded_directory": relative["sanitized"],
        "Autograde.autograde_preprocessors": []})
    # Recording reads the sanitized copy, which this grader wrote: sanitizing it again would change nothing
    # (each sanitizing step gives its own output back unchanged) and took 40 % of the record step's time. The
    # recording preprocessors take the place of the sanitizing ones, in the pass that reads the submission.
    record = _nbgrader_step(course, single_pass, **{
        "CourseDirectory.submitted_directory": relative["sanitized"],
        "Autograde.sanitize_preprocessors": _recording_preprocessors(),
        "Autograde.autograde_preprocessors": [],
        "ReplayExecution.executed_directory": str(stage["executed"])})
    return sanitize, record


class _Batch:
    """The submissions of one run: each repaired and sanitized here, executed by a pool's worker, and
    recorded here (the gradebook stays on this machine) as soon as its result is back."""

    def __init__(self, course, assignment, release, students, log):
        self.course, self.assignment, self.log = course, assignment, log
        self.release, self.staging = release, course / STAGING / assignment
        self.stage = _clear_stages(self.staging, students)
        notebooks = sorted(p.stem for p in release.glob("*.ipynb"))
        self.releases = {notebook: (release / f"{notebook}.ipynb").read_bytes() for notebook in notebooks}
        self.reports = {s: {nb: NotebookReport(nb) for nb in notebooks} for s in students}
        self.fingerprints = {}    # student -> digest of the submission as it was read: what a done mark is of
        self.details = {}         # student -> what a failure's log adds to its one line (nbgrader's log, a traceback)
        self.sanitize, self.record_step = nbgrader_steps(course, self.stage)

    def prepare(self, student):
        """Repair and sanitize one submission: (notebooks, files) for a worker, or None if it cannot be graded
        (the student's report says why). Whatever goes wrong here costs this student only."""
        repaired = self.stage["repaired"] / student / self.assignment
        try:
            return self._prepare(student, repaired)
        except Exception as error:  # one submission the grader cannot handle must not stop the batch
            self._fail(student, f"the grader could not prepare the submission: {_one_line(error)}", error)
            shutil.rmtree(repaired, ignore_errors=True)   # nothing of it is graded (record forgets it)
            return None

    def _prepare(self, student, repaired):
        submitted = self.course / "submitted" / student / self.assignment
        files, skipped = submission_files(submitted)
        # Before repairing it: a submission replaced while it is graded is regraded by a resumed run.
        self.fingerprints[student] = _fingerprint(files, skipped)
        _repair_student(submitted, (files, skipped), self.release, repaired, self.reports[student])
        if not self._repaired(student):
            return None     # no notebook to grade: each notebook's report says why
        error = self.sanitize(self.assignment, student)
        if error:
            self._nbgrader_failed(student, "nbgrader could not read the submission", error)
            return None
        return submission_payload(self.stage["sanitized"] / student / self.assignment)

    def take(self, student, future):
        """Keep a finished execution's notebooks for the record step; whether the execution succeeded."""
        try:
            results = future.result()
        except Exception as error:  # the grader's own failure for one student must not stop the batch
            self.log(f"  {student}: execution failed: {error!r}")
            self._fail(student, f"the grader could not execute the submission: {error!r}", error)
            return False
        folder = self.stage["executed"] / student / self.assignment
        folder.mkdir(parents=True, exist_ok=True)
        for notebook, result in results.items():
            (folder / f"{notebook}.ipynb").write_bytes(result["notebook"])
            self.reports[student][notebook].problems += result["problems"]
            self.reports[student][notebook].seconds = result["seconds"]
        return True

    def record(self, student, executed):
        """Score one student's notebooks into the gradebook; an executed one that recorded is marked done. A
        submission that was not executed, or that nbgrader could not record, leaves no grade behind (an earlier
        submission's included): never zeros for cells that did not run. Every failure gets its log."""
        try:
            if not executed or not self._repaired(student):
                return self._forget(student)
            before = {nb: answer_texts(self._autograded(student, nb)) for nb in self.reports[student]}
            error = self.record_step(self.assignment, student)
            if error:
                self._nbgrader_failed(student, "nbgrader could not record the grades", error)
                return self._forget(student)
            for line in settle_manual_grades(self.course, self.assignment, student, before, self._autograded):
                self.log(f"  {student}: {line}")
            _mark_done(self.staging, student, self.fingerprints[student], self.reports[student])
            seconds = sum(r.seconds for r in self.reports[student].values())
            self.log(f"  recorded {student} (executed in {seconds:.0f} s)")
        finally:
            self._write_log(student)

    @property
    def nbgrader_seconds(self):
        return self.sanitize.seconds + self.record_step.seconds

    def _repaired(self, student):
        return any((self.stage["repaired"] / student / self.assignment / f"{nb}.ipynb").exists()
                   for nb in self.reports[student])

    def _autograded(self, student, notebook):
        return self.course / "autograded" / student / self.assignment / f"{notebook}.ipynb"

    def _fail(self, student, message, error=None):
        for report in self.reports[student].values():
            report.error = report.error or message
        if error is not None:
            self.details.setdefault(student, []).append("".join(traceback.format_exception(error)))

    def log_path(self, student):
        return self.staging / "logs" / f"{student}.txt"

    def _write_log(self, student):
        """LOGS/STUDENT.txt, for a student with a notebook that could not be graded: each notebook's error in one
        line, then what the failures said in full (nbgrader's log, a traceback)."""
        errors = [r.error if f"{nb}.ipynb" in r.error else f"{nb}.ipynb: {r.error}"
                  for nb, r in sorted(self.reports[student].items()) if r.error]
        if errors or self.details.get(student):
            path = self.log_path(student)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join([*errors, "", *self.details.get(student, [])]).rstrip() + "\n", encoding="utf-8")

    def _nbgrader_failed(self, student, what, error):
        """One line on the console and in the CSV; nbgrader's whole log (a traceback) in the student's log."""
        self.details.setdefault(student, []).append(error)
        reason = nbgrader_reason(error)
        self._fail(student, f"{what}: {reason}")
        self._write_log(student)
        self.log(f"  {student}: {what}: {reason} (nbgrader's log: {os.path.relpath(self.log_path(student), self.course)})")

    def _forget(self, student):
        """Nothing of this submission can be graded: remove an earlier submission's grades and autograded
        notebooks, so that the gradebook, the feedback and the CSV all say the same. Its grades given by hand
        are set aside first (earlier-manual-grades.json)."""
        from nbgrader.api import MissingEntry

        if not any(r.error for r in self.reports[student].values()):
            self._fail(student, "no notebook to grade")
        errors = sorted({r.error for r in self.reports[student].values() if r.error})
        self.log(f"  {student}: not graded: {'; '.join(errors)} "
                 f"(log: {os.path.relpath(self.log_path(student), self.course)})")
        set_aside = set_aside_manual_grades(self.course, self.assignment, student, "the submission could not be graded")
        if set_aside:
            self.log(f"  {student}: the grades given by hand to the earlier submission are kept in {set_aside}")
        with open_gradebook(self.course) as gradebook:
            try:
                gradebook.remove_submission(self.assignment, student)
            except MissingEntry:
                pass
        shutil.rmtree(self.course / "autograded" / student / self.assignment, ignore_errors=True)


def _grade_students(batch, pool, students, limits, sandbox, env):
    """Send every submission to the pool as soon as it is sanitized, and record each result as it comes."""
    for student in students:
        payload = batch.prepare(student)
        if payload is None:
            batch.record(student, executed=False)
        else:
            pool.submit(student, *payload, batch.releases, limits, env, sandbox)
        for done, future in pool.completed(wait=False):    # what came back meanwhile
            batch.record(done, batch.take(done, future))
    for done, future in pool.completed():
        batch.record(done, batch.take(done, future))
    return batch.reports


# ----------------------------------------------------------------------------- resuming an interrupted run

def _fingerprint(files, skipped):
    """A digest of a submission's files (submission_files' listing, links and oversized files by name only,
    never read): a resumed run regrades a submission that changed since."""
    digest = hashlib.sha256()
    for relative, path in files.items():
        content = hashlib.sha256()
        for chunk in read_chunks(path):
            content.update(chunk)
        digest.update(relative.encode() + b"\0" + content.digest())
    for relative, why in skipped.items():
        digest.update(f"skipped\0{relative}\0{why}\0".encode())
    return digest.hexdigest()


def _one_line(error):
    """An exception as one short line, for a CSV cell."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:200].rstrip(": ")


def _mark_done(staging, student, fingerprint, reports):
    """DONE/STUDENT.json: the student's reports and the submission they are of, written once recorded."""
    marker = staging / "done" / f"{student}.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"fingerprint": fingerprint,
                                  "reports": {nb: asdict(r) for nb, r in reports.items()}}, indent=1),
                      encoding="utf-8")


def finished_students(course, assignment, students):
    """student -> reports of the `students` whose submission, as it is now, is graded and in the gradebook."""
    from nbgrader.api import MissingEntry

    staging, finished = Path(course) / STAGING / assignment, {}
    with open_gradebook(course) as gradebook:
        for student in students:
            marker = staging / "done" / f"{student}.json"
            if not marker.exists():
                continue
            done = json.loads(marker.read_text(encoding="utf-8"))
            try:
                gradebook.find_submission(assignment, student)
            except MissingEntry:
                continue
            try:
                fingerprint = _fingerprint(*submission_files(Path(course) / "submitted" / student / assignment))
            except OSError:    # unreadable now: graded again, and its preparation says why
                continue
            if done["fingerprint"] == fingerprint:
                finished[student] = {nb: NotebookReport(**r) for nb, r in done["reports"].items()}
    return finished


# ----------------------------------------------------------------------------- the whole assignment

def _check_ready(course, assignment, students, sandbox, scheduler):
    """The release folder of `assignment`, once the course and this machine can grade it, and the students to
    grade (all who submitted, or `students`, each of whom must have submitted)."""
    check_assignment(course, assignment)     # first: it names the assignments there are, for a typo
    release = course / "release" / assignment
    if not release.is_dir() or not any(release.glob("*.ipynb")):
        raise GradingError(f"{release} holds no notebook: {_release_advice(course, assignment)}")
    submitted = submitted_students(course, assignment)
    missing = sorted(set(students or ()) - set(submitted))
    if missing:
        raise GradingError(f"no submission of {assignment} from {', '.join(missing)}: "
                           f"{course / 'submitted' / missing[0] / assignment} does not exist")
    if not (students or submitted):
        raise GradingError(f"nobody submitted {assignment}: no folder submitted/*/{assignment}")
    if sandbox and not scheduler and not sandbox_available():
        raise GradingError("bubblewrap (bwrap) is not available, so submissions cannot be sandboxed: install it "
                           "(Debian/Ubuntu: sudo apt-get install bubblewrap), or pass --unsafe-no-sandbox to run "
                           "student code with your own rights")
    return release, list(students or submitted), submitted


def plain_test_cells(course, assignment):
    """The grade ids of ``assignment``'s test cells that are not written as probe and judge (execution/judging.py),
    read from the gradebook's copy of their source (hidden tests included): their verdict is the kernel's word."""
    from .execution.judging import is_judged

    plain = []
    with open_gradebook(course) as gradebook:
        for notebook in gradebook.find_assignment(assignment).notebooks:
            answers = {cell.name for cell in notebook.solution_cells}
            sources = {cell.name: cell.source for cell in notebook.source_cells}
            plain += sorted(cell.name for cell in notebook.grade_cells
                            if cell.cell_type == "code" and cell.name not in answers and not is_judged(sources[cell.name]))
    return plain


def _say_plain_test_cells(course, assignment, log):
    """One line naming the test cells whose verdict is the kernel's word, if there are any."""
    plain = plain_test_cells(course, assignment)
    if plain:
        cells = f"{len(plain)} test cell{'s' if len(plain) > 1 else ''} of {assignment} "
        log(f"autograder: {cells}{'are' if len(plain) > 1 else 'is'} not written as probe and judge "
            f"({', '.join(plain)}): {'their' if len(plain) > 1 else 'its'} verdict is the kernel's word, as in plain "
            f"nbgrader")


def grade_assignment(course, assignment, *, workers=2, limits=None, students=None, sandbox=True,
                     env=None, log=print, scheduler=None, resume=False):
    """Grade `assignment` for every student who submitted it (or only `students`); returns
    {student: [NotebookReport, ...]} and writes the gradebook, autograded/, the CSV and the report.
    `scheduler`: a Dask scheduler's address; the executions run on its workers instead of `workers` local
    processes. `resume`: keep the students an earlier run graded, whose submission has not changed since."""
    course = check_course(course)
    release, students, submitted = _check_ready(course, assignment, students, sandbox, scheduler)
    _say_plain_test_cells(course, assignment, log)
    # the students graded before and not now keep their report, if their submission is still there
    earlier = {s: r for s, r in read_report(course, assignment).items() if s in submitted}
    finished = finished_students(course, assignment, students) if resume else {}
    todo = [s for s in students if s not in finished]
    started = time.perf_counter()
    if finished:
        log(f"resuming: {len(finished)} submissions were graded before and are kept; {len(todo)} to grade")
    reports, nbgrader_seconds = {}, 0.0
    if todo:
        try:
            pool = open_pool(scheduler, workers, sandbox, assignment)
        except ClusterError as error:
            raise GradingError(str(error)) from error
        limits = limits or Limits()
        log(f"grading {len(todo)} submissions of {assignment} on {pool.description} "
            f"({'sandboxed' if sandbox else 'NOT sandboxed'}; {limits.cell_timeout:g} s per cell, "
            f"{limits.total_timeout:g} s per notebook)")
        if sandbox and not scheduler:   # a Dask worker's machine may differ: each says so in its own log
            log(f"autograder: {memory_accounting()}")
        try:
            with faster_nbgrader():
                batch = _Batch(course, assignment, release, todo, log)
                reports = _grade_students(batch, pool, todo, limits, sandbox,
                                          {"COURSE_SMOKE": "1", **(env or {})})
        finally:
            pool.close()
        nbgrader_seconds = batch.nbgrader_seconds
    everyone = {**earlier, **finished, **reports}
    write_report(course / STAGING / assignment / "report.json", everyone)
    write_csv(course, assignment, everyone)
    log(f"graded {len(todo)} submissions of {assignment} in {time.perf_counter() - started:.1f} s "
        f"(nbgrader's sanitize and record steps here: {nbgrader_seconds:.1f} s); scores in the gradebook, "
        f"grades-{assignment}.csv and grades-{assignment}-cells.csv")
    return {**finished, **reports}


def failed_students(reports):
    """The students of `reports` ({student: {notebook: NotebookReport}}) with a notebook that could not be graded."""
    return sorted(s for s, by_notebook in reports.items() if any(r.error for r in by_notebook.values()))


def report_assignment(course, assignment, log=print):
    """``python -m autograder report``: the CSVs again, from the gradebook as it is now (the scores given by hand
    in the formgrader since the last grading included), and the students nbgrader's export leaves out."""
    course = check_course(course)
    check_assignment(course, assignment, graded=True)
    reports = read_report(course, assignment)
    with open_gradebook(course) as gradebook:
        notebooks = [nb.name for nb in gradebook.find_assignment(assignment).notebooks]
        in_gradebook = {s.student.id for s in gradebook.find_assignment(assignment).submissions}
    for student in sorted(in_gradebook - set(reports)):      # graded by plain `nbgrader autograde`
        reports[student] = {nb: NotebookReport(nb) for nb in notebooks}
    write_csv(course, assignment, reports)
    pending = awaiting_manual_grading(gradebook_grades(course, assignment, reports))
    left_out = sorted(set(reports) - in_gradebook)
    log(f"wrote grades-{assignment}.csv and grades-{assignment}-cells.csv from the gradebook: {len(reports)} students, "
        f"{len(pending)} with written answers still to grade by hand{_listed(pending)}")
    if left_out:
        log(f"not in the gradebook, so not in `nbgrader export` (their notebooks could not be graded; the CSV's "
            f"error column says why): {', '.join(left_out)}")
    return reports


def awaiting_manual_grading(grades):
    """student -> the cells ("NOTEBOOK/CELL") waiting for a person, of `grades` (gradebook_grades'), for the students
    with any."""
    waiting = {s: [f"{nb}/{g.grade_id}" for nb, cells in sorted(by_nb.items()) for g in cells.values() if g.score is None]
               for s, by_nb in grades.items()}
    return {s: cells for s, cells in sorted(waiting.items()) if cells}


def _listed(pending, most=20):
    """`pending` (awaiting_manual_grading's) for the end of a line: the formgrader's "needs manual grade" list."""
    if not pending:
        return ""
    shown = [f"{s} ({', '.join(cells)})" for s, cells in list(pending.items())[:most]]
    more = f" and {len(pending) - most} more (the awaiting_manual column)" if len(pending) > most else ""
    return ": " + "; ".join(shown) + more


def stages(staging):
    """The staging folders of an assignment's grading: {"repaired", "sanitized", "executed"}."""
    return {name: staging / name for name in ("repaired", "sanitized", "executed")}


def _clear_stages(staging, students):
    """stages(staging), emptied of `students`' files only (and their marks of a finished grading)."""
    stage = stages(staging)
    for student in students:
        for folder in stage.values():
            shutil.rmtree(folder / student, ignore_errors=True)
        (staging / "done" / f"{student}.json").unlink(missing_ok=True)
        (staging / "logs" / f"{student}.txt").unlink(missing_ok=True)     # an earlier run's failure
    return stage


def _recording_preprocessors():
    """nbgrader's own autograde steps, with Execute swapped for the replay of the sandboxed run, and without
    CheckCellMetadata: the sanitize step ended with it on this very notebook, and nothing since changes its
    nbgrader metadata (the replay takes the outputs, the steps after it outputs and other metadata). Its schema
    check of every cell made a record 0.04 to 0.05 s longer (0.22 against 0.18 s for notebook 01)."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import CheckCellMetadata, Execute

    replay = _replay_preprocessor()
    return [replay if p is Execute else p for p in Autograde.class_traits()["autograde_preprocessors"].default()
            if p is not CheckCellMetadata]


def _repair_student(submitted, listing, release, repaired, reports):
    """Copy one submission to `repaired`, its notebooks matched back to the release. `listing`: its
    (files, skipped) as submission_files gives them: only those files are copied, and never through a link."""
    if not submitted.is_dir():
        return
    files, skipped = listing
    repaired.mkdir(parents=True, exist_ok=True)
    for relative, path in without_notebooks(files).items():
        copy_file(path, repaired / relative)
    for notebook, report in reports.items():
        name = f"{notebook}.ipynb"
        report.skipped = [f"{relative} was left out: {why}" for relative, why in skipped.items()]
        if name not in files:
            report.error = f"{name} was left out: {skipped[name]}" if name in skipped else \
                f"{name} is missing from the submission"
            continue
        try:
            report.repairs = repair_file(files[name], release / name, repaired / name)
        except RepairError as error:
            report.error = str(error)  # left out of repaired/: nbgrader scores it as missing
        except Exception as error:  # not a notebook at all (broken JSON, ...)
            report.error = f"{notebook}.ipynb could not be read: {error}"


def write_report(path, reports):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({s: {nb: asdict(r) for nb, r in by_nb.items()} for s, by_nb in reports.items()},
                               indent=1), encoding="utf-8")


def read_report(course, assignment):
    path = Path(course) / STAGING / assignment / "report.json"
    if not path.exists():
        return {}
    return {s: {nb: NotebookReport(**r) for nb, r in by_nb.items()}
            for s, by_nb in json.loads(path.read_text(encoding="utf-8")).items()}


@dataclass
class CellGrade:
    """One graded cell of one student's notebook, as the gradebook has it."""
    grade_id: str
    kind: str                     # "test" (autograded) or "written" (an answer graded by hand)
    score: float = None           # None: a written answer awaiting manual grading
    max_score: float = 0.0
    comment: str = ""             # the grader's comment (or nbgrader's own, "No response." for an untouched answer)


def cell_grades(gradebook, assignment, notebook, student):
    """grade_id -> CellGrade for one student's notebook ({} when the gradebook has no such submission)."""
    from nbgrader.api import MissingEntry

    try:
        submission = gradebook.find_submission_notebook(notebook, assignment, student)
    except MissingEntry:
        return {}
    answers = {c.name for c in [*submission.notebook.solution_cells, *submission.notebook.task_cells]}
    comments = {c.name: c.comment for c in submission.comments}
    grades = {}
    for grade in submission.grades:
        kind = "test" if grade.cell_type == "code" and grade.name not in answers else "written"
        # A written answer nbgrader flags waits for a person, even with a score given by hand earlier: nbgrader flags
        # it again when a regrade finds a score (the grader settles those: settle_manual_grades), and the formgrader
        # unflags it when a person grades it. A test cell's score given by hand overrides the tests, flagged or not.
        pending = grade.needs_manual_grade and (kind == "written" or grade.manual_score is None)
        grades[grade.name] = CellGrade(grade.name, kind, None if pending else grade.score, grade.max_score,
                                       comments.get(grade.name) or "")
    return grades


EARLIER_MANUAL = "earlier-manual-grades.json"   # in .autograder/ASSIGNMENT/: hand grades of answers that changed


def answer_texts(path):
    """grade_id -> the text graded by hand of each answer graded by hand in the autograded notebook at `path` (a
    written answer, a code answer graded by hand; for a task, the student's own cells, where it is answered); {}
    when there is no such notebook."""
    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return {}
    meta = [cell.metadata.get("nbgrader", {}) for cell in notebook.cells]
    own = "\n".join(cell.source for cell, m in zip(notebook.cells, meta) if not m or m.get("solution"))
    return {m["grade_id"]: (own if m.get("task") else cell.source) for cell, m in zip(notebook.cells, meta)
            if m.get("grade_id") and m.get("grade") and (m.get("solution") or m.get("task"))}


def _same_text(before, now):
    """The same answer, whatever an editor did to its whitespace."""
    return " ".join(before.split()) == " ".join(now.split())


def settle_manual_grades(course, assignment, student, before, autograded):
    """After a regrade. nbgrader's record step flags every cell graded by hand for review (needs_manual_grade),
    whether its answer changed or not. An answer whose text is the one that was graded keeps its grade and comment,
    unflagged; one that changed, or whose earlier text is gone, waits for a person again: its grade and comment are
    set aside (EARLIER_MANUAL), so that neither the CSVs, the feedback page, the formgrader nor `nbgrader export`
    presents them as its grade. `before`: notebook -> answer_texts of the notebook graded earlier; `autograded`:
    (student, notebook) -> the autograded notebook's path. Returns a line for the console per answer set aside."""
    from nbgrader.api import MissingEntry

    lines, set_aside = [], []
    with open_gradebook(course) as gradebook:
        for notebook, texts in before.items():
            try:
                submission = gradebook.find_submission_notebook(notebook, assignment, student)
            except MissingEntry:
                continue
            now = answer_texts(autograded(student, notebook))
            comments = {c.name: c for c in submission.comments}
            for grade in submission.grades:
                if grade.manual_score is None or grade.name not in now:   # not graded by hand, or a test cell
                    continue
                if grade.name in texts and _same_text(texts[grade.name], now[grade.name]):
                    grade.needs_manual_grade = False
                    continue
                why = "its answer changed" if grade.name in texts else "its earlier answer is not at hand to compare"
                lines.append(f"{grade.name} was graded by hand ({grade.manual_score:g} of {grade.max_score:g}) and "
                             f"{why}: it waits for grading by hand again")
                set_aside.append(_set_aside(student, notebook, grade, comments.get(grade.name), why))
        gradebook.db.commit()
    if set_aside:
        lines.append(f"the earlier grades and comments are kept in {_keep_earlier(course, assignment, set_aside)}")
    return lines


def set_aside_manual_grades(course, assignment, student, why):
    """Set aside (EARLIER_MANUAL) every grade given by hand to the student's submission, before it is removed; the
    file's path relative to the course, None when there was none."""
    from nbgrader.api import MissingEntry

    set_aside = []
    with open_gradebook(course) as gradebook:
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return None
        for notebook in submission.notebooks:
            comments = {c.name: c for c in notebook.comments}
            set_aside += [_set_aside(student, notebook.name, grade, comments.get(grade.name), why)
                          for grade in notebook.grades if grade.manual_score is not None]
        gradebook.db.commit()
    return _keep_earlier(course, assignment, set_aside) if set_aside else None


def _set_aside(student, notebook, grade, comment, why):
    """The grade given by hand (score, extra credit, comment) as a record of EARLIER_MANUAL; the gradebook's cell
    then has none, and waits for a person unless nbgrader scored it itself (an answer left as released)."""
    entry = {"student": student, "notebook": notebook, "cell": grade.name, "manual_score": grade.manual_score,
             "extra_credit": grade.extra_credit, "max_score": grade.max_score,
             "manual_comment": comment.manual_comment if comment is not None else None, "why": why,
             "set_aside": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    grade.manual_score = grade.extra_credit = None
    grade.needs_manual_grade = grade.auto_score is None
    if comment is not None:
        comment.manual_comment = None
    return entry


def _keep_earlier(course, assignment, entries):
    """Add `entries` to the assignment's EARLIER_MANUAL; its path relative to the course."""
    path = Path(course) / STAGING / assignment / EARLIER_MANUAL
    kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept + entries, indent=1), encoding="utf-8")
    return os.path.relpath(path, course)


def gradebook_grades(course, assignment, students):
    """student -> notebook -> {grade_id: CellGrade}, from the gradebook."""
    with open_gradebook(course) as gradebook:
        notebooks = [nb.name for nb in gradebook.find_assignment(assignment).notebooks]
        return {s: {nb: cell_grades(gradebook, assignment, nb, s) for nb in notebooks} for s in students}


TOTAL_COLUMNS = ["student", "notebook", "score", "max_score", "seconds", "repairs", "broken_cells", "error",
                 "awaiting_manual", "red_flags", "late"]
CELL_COLUMNS = ["student", "notebook", "cell", "kind", "score", "max_score", "awaiting_manual"]


def _csv_rows(student, report, grades, flags=0, late=False, possible=None):
    """The totals row and the cell rows of one student's notebook (grades: {grade_id: CellGrade}; ``flags``: the
    red flags of its cells, for a person to read in the similarity report; ``late``: the LMS marked it late;
    ``possible``: the notebook's points, as the gradebook has them). A notebook that could not be graded has an
    empty score, never a 0 that an LMS would import, and the notebook's points as its max_score."""
    pending = sum((g.max_score for g in grades.values() if g.score is None), 0.0)
    score = sum((g.score for g in grades.values() if g.score is not None), 0.0) if not report.error else ""
    max_score = sum(g.max_score for g in grades.values()) if grades else possible
    # A judge's flag (a result bit for bit a forbidden library's) is a red flag for a person, not a broken cell.
    judged_flags = sum(1 for p in report.problems if p.get("kind") == "flag")
    total = [student, report.notebook, score, max_score, report.seconds, len(report.repairs),
             len(report.problems) - judged_flags, report.error, pending, flags + judged_flags, int(late)]
    cells = [[student, report.notebook, g.grade_id, g.kind, g.score, g.max_score,
              g.max_score if g.score is None else 0.0] for g in grades.values()]
    return total, cells


def write_csv(course, assignment, reports):
    """grades-ASSIGNMENT.csv: a row per student and notebook, the totals (what LMS imports and spreadsheets
    read: one row each); grades-ASSIGNMENT-cells.csv: a row per student, notebook and graded cell. Written
    answers not graded yet count in awaiting_manual (their points), not as a 0 in score; late is 1 where the LMS
    marked the submission late (collect.py); red_flags counts what
    ``python -m autograder similarity`` lists for that notebook (copies of a public answer, code no exercise needs)."""
    from .lms import StudentRecord
    from .similarity import red_flag_counts  # similarity.py reads the submissions through this module

    grades = gradebook_grades(course, assignment, reports)
    flags, late = red_flag_counts(course, assignment), StudentRecord(course).late(assignment)
    with open_gradebook(course) as gradebook:
        possible = {nb.name: nb.max_score for nb in gradebook.find_assignment(assignment).notebooks}
    totals, cells = [], []
    for student in sorted(reports):
        for notebook, report in sorted(reports[student].items()):
            total, rows = _csv_rows(student, report, grades[student].get(notebook, {}), flags[student, notebook],
                                    student in late, possible.get(notebook))
            totals.append(total)
            cells += rows
    for name, columns, rows in ((f"grades-{assignment}.csv", TOTAL_COLUMNS, totals),
                                (f"grades-{assignment}-cells.csv", CELL_COLUMNS, cells)):
        with open(course / name, "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(columns)
            writer.writerows(rows)
