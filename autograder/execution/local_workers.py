"""The local grader's fork server: multiprocessing's "forkserver", a fresh process that imports what every worker
needs once, then forks each worker from itself (dispatch.LocalPool). Its imports take 3-5 s on one core, so the
grading command starts it first thing (`__main__.main`), and they overlap the command's own imports and checks
(1-2 s) on another core. For that, this module imports nothing heavy.
"""
import multiprocessing
import multiprocessing.forkserver

from ..registry import registry

# What every worker imports: the execution's modules (nbgrader, jupyter_client) and the judges' (torch, the course's
# package and oracles), 3-5 s of a fresh interpreter's time. The fork server imports them once per grading run and
# forks each worker from itself; a failed import there only costs the worker that time again.
# torch's symbolic shapes (and sympy, 1.3 s) are what the first torch._check of a process imports, and many torch
# functions check their arguments with it: nn.MultiheadAttention's, in the oracles of 04 and 06, for one.
WORKER_IMPORTS = ["autograder.execution.dispatch", "torch", "torch.fx.experimental.symbolic_shapes", "course_testkit.probing",
             "course_testkit.testing", "course_testkit.oracles"]

def preloaded(assignment=None):
    """The modules the fork server imports for grading ``assignment``."""
    return WORKER_IMPORTS + list(registry().judges_first_use_imports.get(assignment, ()))


def fork_server(assignment=None):
    """multiprocessing's forkserver context, with its server running: started now, importing ``preloaded(assignment)``,
    unless this process started one already (which then keeps the modules it imported)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preloaded(assignment))
    multiprocessing.forkserver.ensure_running()
    return context
