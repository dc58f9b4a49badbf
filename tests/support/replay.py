"""``KernelReplay``: many submissions of one assignment scored with nbgrader's rule in one kernel, for the wide
suites of realistic answers."""
import ast
import copy
import os
import symtable
import textwrap
from typing import NamedTuple

import nbformat
from nbclient import NotebookClient

from .courses import GRADING_ENV, stripped_path
from .notebooks import nbgrader_cells


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

    The kernel first runs the cells that matter (below) of the solution notebook (release, solutions and hidden
    tests), from the top. A submission, given as its answers (grade_id -> source), then re-runs the set-up cell
    (imports are cached by then; it resets the random seed), and every cell from its first answer to the end, in order, with
    its answers in place of the solutions'. Cells before that point cannot see its answers, so they keep
    the solution run's scores. Names left behind by the previous submission, and the names it answers, are
    deleted first (an answer cell that fails leaves its name undefined, as in a fresh kernel), and any
    cells it ran with other answers are re-run: each submission starts from the solution run's state.
    The replay stops at the last test cell: the demonstrations after it cannot change a score, and they never run.
    A demonstration before it does not run either (in the solution's run too) when it neither binds nor changes
    (x.a = ..., x.method(...)) a name that a later answer or test cell reads (in its functions too), directly or
    through another demonstration that runs. In these notebooks such cells draw and print; a test that needs one
    through something else (a file it writes) needs it to be a cell of nbgrader's (locked), which always runs. The
    solution's run is the replay's own way through the notebook, so that scoring the solution as nbgrader does (the
    tests' first check) vouches for what it leaves out.

        with KernelReplay(solution_notebook, workdir) as replay:
            scores, errors = replay.grade({"attention": "def attention(q, k, v): ..."})
    """

    def __init__(self, solution, workdir, assignment=None):
        self.notebook = copy.deepcopy(solution)
        self.assignment = assignment   # with one, the kernel sees that notebook's copy of the package, as graded
        self.cells = list(self.notebook.cells)
        self.notebook.cells.append(nbformat.v4.new_code_cell())     # where the replay runs its own code
        # "immediate": the kernel is killed at the end instead of asked to exit (2-3 s of waiting for each notebook)
        self.client = NotebookClient(self.notebook, timeout=600, kernel_name="python3", allow_errors=True,
                                     shutdown_kernel="immediate", resources={"metadata": {"path": str(workdir)}})
        self.setup = next(i for i, c in enumerate(self.cells)
                          if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
        self.end = 1 + max(index for index, *_ in self._graded_cells())
        self.replayed = self._cells_that_matter()
        # Cells from here on may not hold the solution run's state: they last ran with somebody else's answers.
        self.dirty = self.end

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
        for index in sorted(self.replayed):
            self._run(index, self.cells[index].source)
        self.reference = self._scores(range(self.end))
        failed = {g: e for g, e in self._errors(range(self.end)).items() if e}
        assert not failed, f"the solution notebook fails its own tests in one kernel: {failed}"
        self._run_hidden("__replay_names__ = set(globals()) | {\"__replay_names__\", \"__name\", \"__plt\"}")
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
