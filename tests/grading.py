"""Grade notebooks the way an instructor does: plain nbgrader on a scratch course directory.

Used by the round-trip tests: release an assignment from solutions/, hand in notebooks made from the
release (filled with the solutions, untouched, or with chosen answers), run ``nbgrader autograde`` and
read the scores back from the gradebook (each nbgrader command as ``python -m nbgrader`` runs it, forked from a
process that imported nbgrader once: tests/warm_nbgrader.py). ``KernelReplay`` scores many more answers with
nbgrader's rule in one kernel, for the wide suites of realistic answers.
"""
import ast
import contextlib
import copy
import functools
import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import symtable
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
sys.path.insert(0, str(ROOT))
from autograder import CONFIG  # noqa: E402
from warm_nbgrader import WarmNbgrader  # noqa: E402


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


# One thread per kernel: the tests already run one grading job per core. COURSE_SMOKE makes the
# notebooks' training demos take a handful of steps: grading many students must stay quick.
# COURSE_TEST_SEED: the secret of the hidden tests' inputs, fixed so that a failure can be repeated (set it to try
# another; tests/test_secret_inputs.py grades with others).
TEST_SEED = os.environ.get("COURSE_TEST_SEED", "20261128")
GRADING_ENV = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg", COURSE_SMOKE="1", COURSE_TEST_SEED=TEST_SEED)


def stripped_path(assignment):
    """A folder to put first on the kernel's PYTHONPATH so that it imports ``assignment``'s copies of the course
    package and the kit (autograder/stripped.py: without the finished answers of that notebook and the later ones),
    with the oracles, since the replay's kernel judges the cells itself."""
    from autograder.stripped import stripped_package

    return str(stripped_package(assignment, keep_oracles=True))


@functools.cache
def _warm_nbgrader():
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
        _warm_nbgrader().run([*args, "--log-level=ERROR"], self.root)

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


class CellNames(NamedTuple):
    binds: set     # global names it assigns, defines or imports
    reads: set     # global names it reads, in its functions too
    changes: set   # global names whose object it may change: x.a = ..., x[i] = ..., x.method(...)
    imports: set   # the names it binds by importing


def cell_names(source):
    """The global names a cell binds, reads and changes (CellNames), or None where that cannot be told: a cell that
    is not plain Python (IPython's magics, a shell command) or that imports *."""
    try:
        nodes = list(ast.walk(ast.parse(source)))
        table = symtable.symtable(source, "<cell>", "exec")
    except SyntaxError:
        return None
    if any(isinstance(n, ast.ImportFrom) and n.names[0].name == "*" for n in nodes):
        return None
    top = table.get_symbols()
    names = CellNames(binds={s.get_name() for s in top if s.is_assigned() or s.is_imported() or s.is_namespace()},
                      reads={s.get_name() for s in top if s.is_referenced()},
                      changes={_object_of(n) for n in nodes if _object_of(n)},
                      imports={s.get_name() for s in top if s.is_imported()})
    scopes = list(table.get_children())
    while scopes:
        scope = scopes.pop()
        scopes.extend(scope.get_children())
        for symbol in scope.get_symbols():
            if symbol.is_global() and symbol.is_referenced():
                names.reads.add(symbol.get_name())
            if symbol.is_declared_global() and symbol.is_assigned():
                names.binds.add(symbol.get_name())
    return names


def _object_of(node):
    """The name whose object ``node`` may change (x in x.a = ..., x[i] = ..., del x[i], x.method(...)), or None."""
    if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
        target = node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        target = node.func.value
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None


# The replay runs the same long test cells hundreds of times in one kernel, and for each run IPython transforms the
# source (magics, `!`), compiles it once to see whether it awaits, and ipykernel names it by a murmur2 hash written
# in Python: 4 to 17 ms for one of notebook 02's test cells with its hidden tests. Each is a function of the source
# alone, so the replay's kernel caches them (a C hash names the cells instead: only their file names in tracebacks
# change). test_autograde alone: 222 s before, 189 and 199 s after, on 2 cores.
REPEATS_CACHED = """
def __cache_repeats():
    import functools, zlib
    import ipykernel.compiler
    from IPython.core import interactiveshell
    ipykernel.compiler.murmur2_x86 = lambda data, seed: zlib.crc32(data.encode(), seed)
    if hasattr(interactiveshell, "_should_be_async"):   # private to IPython: without it the replay is only slower
        interactiveshell._should_be_async = functools.lru_cache(maxsize=512)(interactiveshell._should_be_async)
    manager = get_ipython().input_transformer_manager
    manager.transform_cell = functools.lru_cache(maxsize=512)(manager.transform_cell)
__cache_repeats()
del __cache_repeats
"""

# The replay reads an error's name and message only (`_errors`, `_scores`), never its traceback. IPython formats each
# traceback twice (to show it, and to keep it in the history), each time reading and highlighting the source of every
# frame: a third of the replay kernel's time on notebook 06, whose suite fails test cells on purpose. Its one-line
# tracebacks leave name and message as they were: the 06 replay took 24 s instead of 53 s, with the same scores and
# errors for every student of 02 and 07.
SHORT_TRACEBACKS = 'get_ipython().InteractiveTB.set_mode("Minimal")'


class KernelReplay:
    """Scores submissions of one assignment the way nbgrader does (an autograded test cell earns its points
    when it raises nothing), many in one kernel instead of a fresh kernel and fresh imports for each.

    The kernel first runs the solution notebook (release, solutions and hidden tests) top to bottom. A
    submission, given as its answers (grade_id -> source), then re-runs the set-up cell (imports are cached
    by then; it resets the random seed), and every cell from its first answer to the end, in order, with
    its answers in place of the solutions'. Cells before that point cannot see its answers, so they keep
    the solution run's scores. Names left behind by the previous submission, and the names it answers, are
    deleted first (an answer cell that fails leaves its name undefined, as in a fresh kernel), and any
    cells it ran with other answers are re-run: each submission starts from the solution run's state.
    A submission's replay stops at the last test cell: the demonstrations after it cannot change a score (they run
    once, after the solution, for ``imported``: the modules the whole notebook imports). A demonstration
    before it is not re-run either when it neither binds nor changes (x.a = ..., x.method(...)) a name that a later
    answer or test cell reads (in its functions too), directly or through another demonstration that is re-run: it
    keeps the solution run's results. In these notebooks such cells draw and print; a test that needs one through
    something else (a file it writes) needs it to be a cell of nbgrader's (locked), which is always re-run.

        with KernelReplay(solution_notebook, workdir) as replay:
            scores, errors = replay.grade({"attention": "def attention(q, k, v): ..."})
    """

    def __init__(self, solution, workdir, assignment=None):
        self.notebook = copy.deepcopy(solution)
        self.assignment = assignment   # with one, the kernel sees that notebook's copy of the package, as graded
        self.cells = list(self.notebook.cells)
        self.notebook.cells.append(nbformat.v4.new_code_cell())     # where the replay runs its own code
        self.client = NotebookClient(self.notebook, timeout=600, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(workdir)}})
        self.setup = next(i for i, c in enumerate(self.cells)
                          if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
        self.end = 1 + max(index for index, *_ in self._graded_cells())
        # Cells from here on may not hold the solution run's state: they last ran with somebody else's answers, or (at
        # first) before the demonstrations after the last test cell, which __enter__ runs once.
        self.dirty = 0
        self.replayed = self._cells_that_matter()

    def _cells_that_matter(self):
        """The indices of the cells a submission re-runs: nbgrader's cells (set-up, answers, tests), and the
        demonstrations that bind or change a name one of those, or a demonstration kept for them, reads later.
        A call on a module (torch.manual_seed, plt.show) counts as changing nothing: the tests seed their own random
        numbers (the replay skips every cell before a submission's first answer anyway)."""
        names = {i: cell_names(c.source) for i, c in enumerate(self.cells[:self.end]) if c.cell_type == "code"}
        modules = set().union(*(n.imports for n in names.values() if n is not None))
        kept, read = set(), set()
        for index, cell_read in sorted(names.items(), reverse=True):
            if cell_read is None:   # what it reads is not known: it and every cell before it are re-run
                return kept | set(range(index + 1))
            if "nbgrader" in self.cells[index].metadata or (cell_read.binds | cell_read.changes - modules) & read:
                kept.add(index)
                read |= cell_read.reads
        return kept

    def __enter__(self):
        env = dict(GRADING_ENV)
        if self.assignment:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [stripped_path(self.assignment), env.get("PYTHONPATH")]))
        self._kernel = self.client.setup_kernel(env=env)
        self._kernel.__enter__()
        self._run_hidden(REPEATS_CACHED)
        self._run_hidden(SHORT_TRACEBACKS)
        for index in range(self.end):
            self._run(index, self.cells[index].source)
        self.reference = self._scores(range(self.end))
        failed = {g: e for g, e in self._errors(range(self.end)).items() if e}
        assert not failed, f"the solution notebook fails its own tests in one kernel: {failed}"
        self._run_hidden("__replay_names__ = set(globals()) | {\"__replay_names__\", \"__name\", \"__plt\"}")
        # The demonstrations after the last test cell run once, for what the whole notebook imports. They may change
        # what the tests read: the first submission re-runs every cell it needs from the top (self.dirty is 0).
        for index in range(self.end, len(self.cells)):
            self._run(index, self.cells[index].source)
        self.imported = set(json.loads(self._run_hidden("print(__import__('json').dumps(sorted(__import__('sys').modules)))")))
        return self

    def __exit__(self, *exc):
        return self._kernel.__exit__(*exc)

    def grade(self, answers):
        """answers: grade_id -> source. Returns ({grade_id: (score, max)}, {grade_id: error text})."""
        cells = nbgrader_cells(self.notebook)
        positions = {self.cells.index(cells[g]): source for g, source in answers.items()}
        first = min(positions)
        start = min(first, self.dirty)
        # The answered names go too: an answer cell that fails must not leave the solution's definition behind.
        self._run_hidden(f"""
            for __name in (set(globals()) - __replay_names__) | {set(answers)!r}:
                globals().pop(__name, None)
            import matplotlib.pyplot as __plt
            __plt.close("all")
        """)
        self._run(self.setup, self.cells[self.setup].source)
        for index in sorted(self.replayed & set(range(start, self.end))):
            self._run(index, positions.get(index, self.cells[index].source))
        self.dirty = first
        ran = range(start, self.end)
        return {**self.reference, **self._scores(ran)}, self._errors(ran)

    def _run(self, index, source):
        cell = self.cells[index]
        if cell.cell_type != "code":
            return
        original, cell.source = cell.source, source
        try:
            self.client.execute_cell(cell, index)
        finally:
            cell.source = original

    def _run_hidden(self, source):
        """Run the replay's own code; what it printed."""
        cell = self.notebook.cells[-1]
        cell.source = textwrap.dedent(source)
        self.client.execute_cell(cell, len(self.cells))
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"the replay's own code failed: {errors}"
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")

    def _graded_cells(self, indices=None):
        """(index, grade_id, points, cell) of the autograded test cells among `indices` (default: all)."""
        for index in range(len(self.cells)) if indices is None else indices:
            cell = self.cells[index]
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade"):
                yield index, meta["grade_id"], meta.get("points", 0), cell

    def _scores(self, indices):
        return {g: (0.0 if any(o.output_type == "error" for o in cell.outputs) else float(points), float(points))
                for _, g, points, cell in self._graded_cells(indices)}

    def _errors(self, indices):
        return {g: "\n".join(f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error")
                for _, g, _, cell in self._graded_cells(indices)}


@dataclass
class DaskCluster:
    address: str
    processes: list   # the scheduler's, then worker w1's, w2's, ...: each leads a process group of its own


@contextlib.contextmanager
def dask_cluster(folder, workers=2):
    """A `dask scheduler` and `workers` `dask worker` processes (w1, w2, ...; one task at a time each) on
    localhost, run from `folder`, as an instructor would start them (README); all killed at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    processes = [_start(cli + ["--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], folder)]
    for name in (f"w{i + 1}" for i in range(workers)):
        (Path(folder) / name).mkdir()
        processes.append(_start([sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", name,
                                 "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"], Path(folder) / name))
    try:
        with dask_client(address) as client:
            client.wait_for_workers(workers, timeout=120)
        yield DaskCluster(address, processes)
    finally:
        for process in processes:
            kill_group(process)


def dask_client(address):
    from distributed import Client
    return Client(address, timeout="60s", set_as_default=False)


def _start(command, folder):
    return subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def kill_group(process):
    """SIGKILL for `process` and its process group (a dask worker's nanny, worker and kernels)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
