"""The local grader's fork server: multiprocessing's "forkserver", a fresh process that imports what every worker
needs once, then forks each worker from itself (dispatch.LocalPool). Its imports take 3-5 s on one core, so the
grading command starts it first thing (`__main__.main`), and they overlap the command's own imports and checks
(1-2 s) on another core. For that, this module imports nothing heavy.
"""
import multiprocessing
import multiprocessing.forkserver

from ..registry import registry
from .judge_process import JUDGES_IMPORTS

# What every worker imports: the execution's modules (nbgrader, jupyter_client) and, for the course's assignments, the
# judges' (judge_process.JUDGES_IMPORTS: torch, the course's package and oracles), 3-5 s of a fresh interpreter's time.
# The fork server imports them once per grading run and forks each worker from itself; a failed import there only
# costs the worker that time again.
EXECUTION_IMPORTS = ["autograder.execution.dispatch"]
WORKER_IMPORTS = EXECUTION_IMPORTS + list(JUDGES_IMPORTS)


def preloaded(assignment=None):
    """The modules the fork server imports for grading ``assignment``: the judges' only for the course's own assignments
    (or when none is named). An instructor's own assignment has no judges of the course's; should its cells judge
    with the kit, each worker imports those modules when it first needs them."""
    course = registry()
    if assignment is not None and assignment not in course.notebooks:
        return list(EXECUTION_IMPORTS)
    return WORKER_IMPORTS + list(course.judges_first_use_imports.get(assignment, ()))


def fork_server(assignment=None):
    """multiprocessing's forkserver context, with its server running: started now, importing ``preloaded(assignment)``,
    unless this process started one already (which then keeps the modules it imported)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preloaded(assignment))
    multiprocessing.forkserver.ensure_running()
    return context
