"""The judges of one notebook, in a child process with limits: a judge that hangs or swells fails its own cell.

The judges read data the student's kernel sent (judging.py), so what they compute is the student's to shape:
probing.unpack refuses data that is not plain, dense and small before any judge sees it, and what is left runs
here, in a process forked from the grader's worker at the notebook's first judged cell, with an address-space
limit (``memory_mb`` beyond what it held when forked) and a wall-clock limit per cell. A cell whose judges break
either gets a failing verdict that says so, the child is replaced at the next judged cell, and the worker goes
on with the notebook and the batch. One child serves every cell of a notebook: a fork of a process that has
torch loaded costs tens of milliseconds, which a child per cell would pay a dozen times per submission.

Requests and replies travel over two pipes as length-prefixed pickles: both ends are the grader's own code.
"""
import importlib
import os
import pickle
import resource
import select
import signal
import struct
import time

from .judging import Verdict, judge_cell

# What the judges import: torch, the course's package and the oracles, 3-5 s of a fresh interpreter's time. torch's
# symbolic shapes (and sympy, 1.3 s) are what the first torch._check of a process imports, and many torch functions
# check their arguments with it: nn.MultiheadAttention's, in the oracles of 04 and 06, for one. The local grader's fork
# server imports them ahead for the course's assignments (local_workers.py); a process that has not imports them before
# it forks its first child, so that the children of its later notebooks find them.
JUDGES_IMPORTS = ("torch", "torch.fx.experimental.symbolic_shapes", "course_testkit.probing", "course_testkit.testing",
                  "course_testkit.oracles")
JUDGE_SECONDS = 60       # one cell's judges, wall clock
JUDGE_MEMORY_MB = 3072   # address space a judge may take beyond what the child held when it was forked
MAX_PRINTED = 20_000     # characters kept of what one cell's judges printed
_HEADER = struct.Struct("<Q")


class JudgeProcess:
    """``judge(source, sent, seed)`` as judging.judge_cell, in a child process (started on the first call)."""

    def __init__(self, seconds=JUDGE_SECONDS, memory_mb=JUDGE_MEMORY_MB):
        self.seconds, self.memory_mb = seconds, memory_mb
        self.pid = None

    def judge(self, source, sent, seed):
        if self.pid is None:
            self._start()
        try:
            _send(self.requests, (source, list(sent), seed))
            reply = _receive(self.replies, time.monotonic() + self.seconds)
        except (BrokenPipeError, EOFError):
            return Verdict(False, self._death())
        except TimeoutError:
            self.close()
            return Verdict(False, f"checking this cell's results took more than {self.seconds} s, so it was stopped: "
                                  "does your code return far more data than the test asks for?")
        return Verdict(*reply)

    def _start(self):
        _import_judges_modules()
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: serve until the requests end, then exit without running the worker's cleanup
            code = 1
            try:
                os.close(requests_write)
                os.close(replies_read)
                _serve(requests_read, replies_write, self.memory_mb)
                code = 0
            finally:
                os._exit(code)
        os.close(requests_read)
        os.close(replies_write)
        self.pid, self.requests, self.replies = pid, requests_write, replies_read

    def _death(self):
        """Why the child stopped answering (it is reaped, and replaced at the next call)."""
        pid = self.pid
        self.close()
        status = _reap(pid, block=True)
        how = f" (signal {os.WTERMSIG(status)})" if status is not None and os.WIFSIGNALED(status) else ""
        return (f"checking this cell's results stopped the grader's judge{how}, within its limits of {self.memory_mb} "
                f"MB and {self.seconds} s: does your code return far more data than the test asks for?")

    def close(self):
        if self.pid is None:
            return
        for fd in (self.requests, self.replies):
            os.close(fd)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(self.pid, block=True)
        self.pid = None


def _import_judges_modules():
    """JUDGES_IMPORTS, in this process (at once where they are imported already); one that fails is left to the child,
    whose verdict then says why."""
    for module in JUDGES_IMPORTS:
        try:
            importlib.import_module(module)
        except Exception:   # noqa: BLE001 (whatever it is, the child meets it again and its verdict fails the cell)
            pass


def _serve(requests, replies, memory_mb):
    """The child's loop: a verdict for each request, within the memory limit."""
    import torch

    torch.set_num_threads(1)   # the worker's thread pool does not survive the fork; one thread needs none
    limit = _address_space() + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            source, sent, seed = _receive(requests, None)
        except EOFError:
            return
        try:
            verdict = judge_cell(source, sent, seed)
        except MemoryError:
            verdict = Verdict(False, f"checking this cell's results needed more than the grader's {memory_mb} MB "
                                     "for it: does your code return far more data than the test asks for?")
        _send(replies, (verdict.passed, verdict.message, verdict.printed[:MAX_PRINTED], verdict.flags[:10]))


def _address_space():
    """This process's virtual memory size in bytes (Linux: /proc; elsewhere 0, so the limit is memory_mb alone)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _reap(pid, block):
    try:
        _, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        return status
    except ChildProcessError:
        return None


def _send(fd, value):
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd, deadline):
    (length,) = _HEADER.unpack(_read(fd, _HEADER.size, deadline))
    return pickle.loads(_read(fd, length, deadline))


def _read(fd, count, deadline):
    """Exactly ``count`` bytes from ``fd``: EOFError if it closes first, TimeoutError past ``deadline``."""
    chunks, left = [], count
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
