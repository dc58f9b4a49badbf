"""The local grader's fork server: multiprocessing's "forkserver", a fresh process that imports what every worker
needs once, then forks each worker from itself (dispatch.LocalPool). Its imports take 3-5 s on one core, so the
grading command starts it first thing (`__main__.main`), and they overlap the command's own imports and checks
(1-2 s) on another core. For that, this module imports nothing heavy.
"""
import multiprocessing
import multiprocessing.forkserver

# What every worker imports: the execution's modules (nbgrader, jupyter_client) and the judges' (torch, the course's
# package and oracles), 3-5 s of a fresh interpreter's time. The fork server imports them once per grading run and
# forks each worker from itself; a failed import there only costs the worker that time again.
# torch's symbolic shapes (and sympy, 1.3 s) are what the first torch._check of a process imports, and many torch
# functions check their arguments with it: nn.MultiheadAttention's, in the oracles of 04 and 06, for one.
PRELOADED = ["autograder.dispatch", "torch", "torch.fx.experimental.symbolic_shapes", "transformer_course.probing",
             "transformer_course.testing", "transformer_course.oracles"]
# What the judges of some assignments import on first use, by assignment: torch._dynamo (1-3 s), which an optimizer's
# first step imports (07, 09), and sacreBLEU (0.5 s), the BLEU oracle's (08). The fork server imports them too when
# one of these assignments is graded. A missing entry costs each worker that time, nothing else (tests/test_grader.py
# checks the table against the oracles the notebooks import).
JUDGES_FIRST_USE_IMPORTS = {"07_training": ["torch._dynamo"], "08_decoding_bleu": ["sacrebleu"],
                            "09_gpt": ["torch._dynamo"]}


def preloaded(assignment=None):
    """The modules the fork server imports for grading ``assignment``."""
    return PRELOADED + JUDGES_FIRST_USE_IMPORTS.get(assignment, [])


def fork_server(assignment=None):
    """multiprocessing's forkserver context, with its server running: started now, importing ``preloaded(assignment)``,
    unless this process started one already (which then keeps the modules it imported)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preloaded(assignment))
    multiprocessing.forkserver.ensure_running()
    return context
