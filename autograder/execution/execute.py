"""Run a notebook cell by cell in a sandboxed IPython kernel, within limits, whatever its cells do.

``execute_notebook`` fills in outputs and execution counts as nbclient would, but a cell that breaks the
rules costs that cell only: a cell that runs too long, prints too much or kills its kernel gets an error
output (so nbgrader gives it 0 points) and the kernel is interrupted, or replaced by a new one in which
the cells that had worked before are re-run silently; then the next cell runs as usual. A sandboxed kernel is
forked, ready, from a kernel server that has ipykernel, torch and the course imported (kernel_server.py).

The notebook never goes to disk where the kernel could see it: it holds the hidden tests. Nothing in the kernel
watches or repairs what a student's code does there: what the sandbox's file system holds (no hidden test, no
finished answer of the notebook's exercises: stripped.py) and the secret inputs decide:

* a test cell written as probe and judge (judging.py) is judged here, in the grader's process: the kernel only
  sends data, and the hidden tests' inputs come from a secret drawn per submission (``COURSE_TEST_SEED`` in the
  kernel's environment) that the judges draw again from the grader's own copy, so a recorded or made-up payload
  cannot pass;
* any other test cell (an instructor's own plain ``assert`` cell) passes or fails on the kernel's word, as in
  plain nbgrader (grade.py names such cells when it grades): a cell whose reply says it failed gets an error even
  if the kernel was made not to show one, and that is all the grader can tell of it.
"""
import copy
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from queue import Empty

import nbformat
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from ..cells import is_test
from .judge_process import JudgeProcess
from .judging import JUDGE_OUTSIDE, MAX_CELL_BYTES, SEED_VARIABLE, is_judged, kernel_source, take_probe_data
from .kernel_server import ForkServerError, forget, server_for
from .sandbox import (
    FILES_DO_NOT_FIT,
    RUNTIME,
    drain,
    hand_over,
    kernel_environment,
    limited_command,
    memory_cgroups,
    sandbox_command,
    sandbox_root,
)

STARTUP_TIMEOUT = 60   # seconds a new kernel gets to answer
INTERRUPT_GRACE = 3    # seconds an interrupted cell gets to stop before its kernel is killed
MAX_REPLY = 1_000      # characters of an error's message taken from the kernel's reply, when no error was shown


@dataclass
class Problem:
    index: int     # the cell, in nb.cells
    kind: str      # timeout, output-limit, kernel-died, restart, not-run; "flag": for a person to read, not a fault
    message: str


class KernelStartError(RuntimeError):
    def __init__(self, message, submission_at_fault=False):
        super().__init__(message)
        self.submission_at_fault = submission_at_fault   # its files did not fit in the kernel's work folder


class _Kernel:
    """One IPython kernel process (sandboxed unless told otherwise) and a client on its Unix sockets."""

    def __init__(self, workdir, limits, env, sandbox, until, package=None, server=None):
        """``server``: the kernel server (kernel_server.py) to fork the kernel from, else a new process."""
        self.folder = server.folder() if server else tempfile.mkdtemp(prefix="kernel-")
        os.mkdir(os.path.join(self.folder, RUNTIME))
        connection_file = os.path.join(self.folder, "kernel.json")
        # ipc: Unix sockets in the kernel's RUNTIME folder (in the sandbox: in memory, its own), the only way in and
        # out of a sandbox without a network.
        write_connection_file(connection_file, transport="ipc", ip=os.path.join(self.folder, RUNTIME, "ipc"),
                              key=secrets.token_hex(16).encode())
        self.log = open(os.path.join(self.folder, "kernel.log"), "w+b")
        try:
            if server:
                self.process = server.start(self.folder, workdir, limits, env, max(until - time.monotonic(), 1))
            else:
                self.process = _new_process(connection_file, workdir, limits, env, sandbox, package, self.log)
        except (ForkServerError, KernelStartError):
            self.log.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self.client = BlockingKernelClient(connection_file=connection_file)
        self.client.load_connection_file()
        self.client.ip = self.process.sockets   # the same sockets, as the grader reaches them (sandbox.py)
        self.pending = None  # the request the kernel has not finished yet
        self.reply = None    # the content of the last reply
        try:
            self._connect(until)
        except KernelStartError:
            self.close()
            raise

    def _connect(self, until):
        """Open the channels and wait for the kernel; a failure to connect (a socket's path over the system's limit
        of about 107 bytes, say) is a KernelStartError, never a kernel left running."""
        try:
            self.client.start_channels(stdin=False, hb=False)
        except Exception as error:   # zmq's errors: the grader's environment, not the submission
            raise KernelStartError(f"the grader could not connect to the kernel ({error}): is TMPDIR a long path? "
                                   "The kernel's sockets live under it") from None
        self._wait_until_ready(until)

    def _wait_until_ready(self, until):
        """Until a kernel_info request is answered on the shell *and* the IOPub channel: then IOPub's
        subscription is up, and the first cell's outputs cannot be lost."""
        until = min(until, time.monotonic() + STARTUP_TIMEOUT)
        while self._wait(self.client.kernel_info(), min(until, time.monotonic() + 1)) != "ok":
            if not self.alive or time.monotonic() >= until:
                self.log.seek(0)
                tail = self.log.read()[-2000:].decode(errors="replace")
                raise KernelStartError(f"the kernel did not start: {tail or 'no message'}",
                                       self.process.files_did_not_fit)

    @property
    def alive(self):
        return self.process.poll() is None

    @property
    def usable(self):
        return self.alive and self.pending is None

    def run(self, code, timeout, on_output=None, silent=False):
        """Run ``code``: "ok", "error", "timeout", "output-limit" (``on_output`` said stop) or "died"."""
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     stop_on_error=False)
        return self._wait(msg_id, time.monotonic() + timeout, on_output)

    def _wait(self, msg_id, until, on_output=None):
        """Until the reply to ``msg_id`` and the end of its outputs (IOPub idle) have come."""
        self.pending, self.reply = msg_id, None
        idle = False
        while self.reply is None or not idle:
            if not self.alive:
                return "died"
            if time.monotonic() >= until:
                return "timeout"
            message = _next(self.client.get_iopub_msg, 0.05)
            if message is UNREADABLE:
                return self._unreadable()
            if message and message["parent_header"].get("msg_id") == msg_id:
                if message["msg_type"] == "status":
                    idle = idle or message["content"]["execution_state"] == "idle"
                elif on_output is not None and not on_output(message):
                    return "output-limit"
            message = _next(self.client.get_shell_msg, 0)
            if message is UNREADABLE:
                return self._unreadable()
            if message and message["parent_header"].get("msg_id") == msg_id:
                self.reply = message["content"]
        self.pending = None
        return "ok" if self.reply["status"] == "ok" else "error"

    def _unreadable(self):
        """A kernel that sent what the grader cannot read is of no more use: it is killed, and the cell fails as if
        the kernel had died (the grader starts a new one and re-runs the cells that had worked)."""
        self.process.kill()
        return "died"

    def interrupt(self, grace):
        """Interrupt the running request, and wait ``grace`` seconds for it to stop (outputs dropped)."""
        self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))
        self._wait(self.pending, time.monotonic() + grace)

    def close(self):
        self.client.stop_channels()
        self.process.kill()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class _NewProcess(subprocess.Popen):
    """A kernel in a process of its own: kill() takes along everything it started (its session, and with
    bubblewrap's the whole sandbox, then its cgroup)."""
    sockets = cgroup = logging = None   # the prefix of its sockets' paths; its KernelCgroup; the thread of its log

    def poll(self):
        status = super().poll()
        if status is not None and self.logging:
            self.logging.join(1)   # its last words in its log
        return status

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.wait()
        if self.cgroup:
            self.cgroup.remove()

    @property
    def files_did_not_fit(self):
        return self.poll() == FILES_DO_NOT_FIT


def _package_first(command, package):
    """``command`` (python -I -m ipykernel_launcher ...) with the folder ``package`` (the copies of the course
    package and the kit) first on the kernel's sys.path, where no sandbox shows them at the packages' own paths
    (-I ignores PYTHONPATH)."""
    start = (f"import runpy, sys; sys.path.insert(0, {str(package)!r}); "
             "runpy.run_module('ipykernel_launcher', run_name='__main__', alter_sys=True)")
    return [command[0], "-I", "-c", start, *command[command.index("ipykernel_launcher") + 1:]]


def _new_process(connection_file, workdir, limits, env, sandbox, package, log):
    # -I: ipykernel itself from the installation, never from a file in the submission.
    command = [sys.executable, "-I", "-m", "ipykernel_launcher", "-f", connection_file]
    folder = os.path.dirname(connection_file)
    info, told, cgroup = None, None, None
    if sandbox:
        hand_over(folder)
        info, told = os.pipe()   # bubblewrap tells the sandbox's PID there
        cgroup = memory_cgroups().kernel(limits.memory_mb)
        argv, scratch = sandbox_command(command, workdir, folder, limits, package, told, cgroup), "/tmp"
    else:
        command = _package_first(command, package) if package else command
        argv, scratch = limited_command(command, limits), folder
    # Its own session, for kill(); its stdout and stderr reach its log through a pipe, capped (sandbox.drain).
    process = _NewProcess(argv, cwd=workdir, env=kernel_environment(workdir, env, scratch), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                          pass_fds=[told] if sandbox else [])
    process.cgroup, process.logging = cgroup, drain(process.stdout, log.name)
    process.sockets = os.path.join(folder, RUNTIME, "ipc")
    if sandbox:
        os.close(told)
        root = sandbox_root(info, time.monotonic() + STARTUP_TIMEOUT)
        if root is None:
            process.kill()
            log.seek(0)
            raise KernelStartError(f"the kernel's sandbox did not start: {log.read()[-2000:].decode(errors='replace')}")
        process.sockets = root + process.sockets
    return process


UNREADABLE = object()   # a message the grader could not read


def _next(get, timeout):
    try:
        return get(timeout=timeout)
    except Empty:
        return None
    except Exception:   # a bad signature, broken framing: what the kernel sent cannot be trusted or read
        return UNREADABLE


class _Outputs:
    """A cell's outputs as the kernel sends them, up to a budget of bytes kept, counted as the notebook's file stores
    them (``_size``): a line break, a control character or a non-ASCII character costs what it costs there."""

    def __init__(self, budget):
        self.kept, self.sizes, self.size, self.budget, self.clear_on_next = [], [], 0, budget, False

    def add(self, message):
        """Record ``message``; False once the budget is spent (what does not fit is dropped)."""
        kind, content = message["msg_type"], message["content"]
        if kind == "clear_output":
            self.clear_on_next = True
            if not content.get("wait"):
                self._clear()
            return True
        if kind not in ("stream", "display_data", "execute_result", "error"):
            return True
        if self.clear_on_next:
            self._clear()
        output = nbformat.v4.output_from_msg(message)
        last = self.kept[-1] if self.kept else None
        if kind == "stream" and last is not None and last.output_type == "stream" and last.name == output.name:
            # One output per stream, with progress bars' carriage returns applied, as Jupyter shows them.
            last.text = _apply_carriage_returns(last.text + output.text)
            self.size -= self.sizes.pop()
        else:
            self.kept.append(output)
        self.sizes.append(_size(self.kept[-1]))
        self.size += self.sizes[-1]
        over = self.size - self.budget
        if over <= 0:
            return True
        size = self.sizes.pop()
        left = _cut(self.kept[-1], size - over)   # what the budget leaves it
        if left:
            self.sizes.append(left)
        else:
            self.kept.pop()
        self.size += left - size
        return False

    def _clear(self):
        # Errors stay: a cell cannot hide that it failed by clearing its output.
        kept = [(o, size) for o, size in zip(self.kept, self.sizes) if o.output_type == "error"]
        self.kept[:], self.sizes[:] = [o for o, _ in kept], [size for _, size in kept]
        self.size, self.clear_on_next = sum(self.sizes), False


# An output's lines are indented this deep in the notebook's file (cells, a cell, its outputs, the output); a cell's
# list of outputs ends with a line of its own that takes as many bytes.
OUTPUT_DEPTH = 4
# The media types whose text nbformat stores as a list of lines, besides text/* (nbformat.v4.rwbase).
SPLIT_TYPES = ("application/javascript", "image/svg+xml")


def _size(output):
    """The bytes ``output`` takes in the notebook's file as nbformat writes it (JSON indented by one space a level,
    text as a list of lines, non-ASCII characters as they are): what Limits.output_bytes caps. Counted without
    writing the indented JSON (slow in Python): the compact JSON, plus a line break and the indentation for every
    item of a list or object."""
    node = dict(output)
    if isinstance(node.get("text"), str):
        node["text"] = node["text"].splitlines(True)
    if isinstance(node.get("data"), dict):
        node["data"] = {key: value.splitlines(True) if isinstance(value, str) and (key.startswith("text/") or
                                                                                  key in SPLIT_TYPES) else value
                        for key, value in node["data"].items()}
    compact = json.dumps(node, ensure_ascii=False, separators=(",", ": "))
    return len(compact.encode("utf-8", "surrogatepass")) + _indentation(node, OUTPUT_DEPTH) + OUTPUT_DEPTH + 2


def _indentation(value, depth):
    """The line breaks and spaces that indented JSON adds to ``value``, written ``depth`` levels deep."""
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, list):
        items = value
    else:
        return 0
    if not items:
        return 0
    nested = sum(_indentation(item, depth + 1) for item in items if isinstance(item, (dict, list)))
    return len(items) * (depth + 2) + depth + 1 + nested


def _fit(outputs, budget, grader, last=()):
    """Cut ``outputs`` (in place) to ``budget`` bytes as stored: the outputs ``grader`` added (its errors, which
    decide the cell) stay; the kernel's are cut from the end first, then those in ``last`` (the judges' print)."""
    def among(output, chosen):
        return any(output is other for other in chosen)

    over = sum(map(_size, outputs)) - budget
    order = [o for o in reversed(outputs) if not among(o, grader) and not among(o, last)] + list(last)
    for output in order:
        if over <= 0:
            return
        size = _size(output)
        left = _cut(output, size - over)
        if not left:
            del outputs[next(i for i, o in enumerate(outputs) if o is output)]
        over -= size - left


def _cut(output, room):
    """Cut a stream's text from the end until ``output`` takes ``room`` bytes at most; its size then (0: it does not
    fit at all, or it is not a stream, which is kept whole or not at all)."""
    if output.output_type != "stream" or room <= _size(nbformat.v4.new_output("stream", name=output.name, text="")):
        return 0
    size = _size(output)
    while size > room:
        output.text = output.text[:min(len(output.text) - 1, len(output.text) * room // size)]
        size = _size(output)
    return size


def _apply_carriage_returns(text):
    return re.sub(r"[^\n]*\r(?=[^\n])", "", text)


class _ProbeData:
    """The probe data a cell sends (kept out of its outputs), up to MAX_CELL_BYTES; past that, none is kept."""

    def __init__(self):
        self.texts, self.size = [], 0

    def add(self, message):
        """True if ``message`` carried probe data (it is not an output then)."""
        text = take_probe_data(message)
        if text is None:
            return False
        self.size += len(text)
        self.texts = self.texts + [text] if self.size <= MAX_CELL_BYTES else [None] * (len(self.texts) + 1)
        return True


def _as_text(error):
    """An error the kernel reported in a judged cell, as one line of stderr: its type and first line, capped."""
    first = (str(error.get("evalue", "")).strip().splitlines() or [""])[0][:300]
    return nbformat.v4.new_output("stream", name="stderr", text=f"{str(error.get('ename', 'Error'))[:80]}: {first}\n")


def _write_verdict(cell, verdict):
    """The judge's verdict as the cell's last outputs: what it printed, and its message as an error."""
    if verdict.printed:
        cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=verdict.printed))
    if not verdict.passed:
        cell.outputs.append(_error("AssertionError", verdict.message))


def _error(ename, evalue):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class _Runner:
    """Runs a notebook's code cells one by one, replacing the kernel whenever a cell breaks it."""

    def __init__(self, workdir, limits, env, sandbox, package=None, fork=True, preload=(), seed=None):
        self.workdir, self.limits, self.env, self.sandbox, self.fork = workdir, limits, env, sandbox, fork
        # The secret the hidden tests draw their inputs from: the kernel gets it in its environment (a fork server
        # serves every submission, so not in the server's), the judges here.
        if seed is None:   # COURSE_TEST_SEED in the grader's own environment: a run the tests can repeat
            seed = int(os.environ[SEED_VARIABLE]) if os.environ.get(SEED_VARIABLE, "").isdigit() else secrets.randbits(62)
        self.seed = seed
        self.kernel_env = {**env, SEED_VARIABLE: str(self.seed)}
        self.package = package   # the course package's copy the sandbox shows (stripped.py), or None
        self.preload = tuple(preload)   # what the kernel server imports besides its own list
        self.deadline = time.monotonic() + limits.total_timeout
        self.kernel = None
        self.completed = []   # sources of the cells that ran without error: re-run after a restart
        self.count = 0        # execution counts go on across restarts
        self.problems = []
        self.judges = JudgeProcess()   # the judged cells' judges, in a child process with limits

    def time_left(self):
        return self.deadline - time.monotonic()

    def run(self, index, cell):
        """Run one code cell."""
        cell.outputs, cell.execution_count = [], None
        if self.kernel is None and self.time_left() > 0:
            try:
                self._start_kernel(index)
            except KernelStartError:
                if self.time_left() > 0:
                    raise
        if self.kernel is None:
            cell.outputs.append(_error("NotebookTimeoutError", f"this cell was not run: the notebook used up "
                                       f"its {self.limits.total_timeout:g} seconds before it got here"))
            return self.problems.append(Problem(index, "not-run", "not run: the notebook ran out of time"))
        judged = is_test(cell) and is_judged(cell.source)
        # The kernel runs a judged cell without its judges: they run here, from the full source.
        source = kernel_source(cell.source) if judged else cell.source
        outcome, sent = self._execute(cell, source)
        breakage = self._breakage(outcome)
        if judged:
            # The kernel's own errors decide nothing here (the judge's verdict does): they stay as text.
            cell.outputs[:] = [_as_text(o) if o.output_type == "error" else o for o in cell.outputs]
        kernels = len(cell.outputs)   # the outputs after these are the grader's: its errors and the judges' print
        if breakage:
            kind, ename, evalue = breakage
            cell.outputs.append(_error(ename, evalue))
            self.problems.append(Problem(index, kind, f"{ename}: {evalue}"))
        if judged:
            verdict = self.judges.judge(cell.source, sent, self.seed)
            _write_verdict(cell, verdict)
            self.problems += [Problem(index, "flag", flag) for flag in verdict.flags]
        elif outcome == "error" and not any(o.output_type == "error" for o in cell.outputs):
            # The kernel's reply says the cell failed, but no error was shown: the reply decides.
            reply = self.kernel.reply if self.kernel else {}
            ename, evalue = str(reply.get("ename") or "Error")[:80], str(reply.get("evalue", ""))[:MAX_REPLY]
            cell.outputs.append(_error(ename, f"{evalue} (the cell raised this error, but it was not shown, or not "
                                              "within the output limit)"))
        added = cell.outputs[kernels:]
        # Within the cap with the grader's own errors: the kernel's outputs make room for them.
        _fit(cell.outputs, self.limits.output_bytes - OUTPUT_DEPTH, [o for o in added if o.output_type == "error"],
             [o for o in added if o.output_type != "error"])
        if outcome == "ok":
            self.completed.append(source)

    def _execute(self, cell, source):
        """Run the cell (as ``source``), recording its outputs and the probe data it sent; stop it if it breaks a
        limit, and drop a kernel that broke. Returns (outcome, the base64 texts of probe data, in order)."""
        self.count += 1
        cell.execution_count = self.count
        outputs, sent = _Outputs(self.limits.output_bytes - OUTPUT_DEPTH), _ProbeData()
        cell.outputs = outputs.kept
        outcome = self.kernel.run(source, min(self.limits.cell_timeout, self.time_left()),
                                  lambda message: sent.add(message) or outputs.add(message))
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = self.count
        if outcome in ("timeout", "output-limit") and self.time_left() > 0:
            self.kernel.interrupt(INTERRUPT_GRACE)
        if not self.kernel.usable:
            self.stop_kernel()
        return outcome, sent.texts

    def _breakage(self, outcome):
        """(problem kind, ename, evalue) for a cell that broke the rules, else None."""
        limits = self.limits
        if outcome == "timeout" and self.time_left() <= 0:
            return ("timeout", "CellTimeoutError", f"the notebook ran out of time (all cells together may take "
                    f"{limits.total_timeout:g} seconds) while this cell ran, so it was stopped")
        if outcome == "timeout":
            return ("timeout", "CellTimeoutError", f"the cell ran longer than {limits.cell_timeout:g} seconds, "
                    f"so it was stopped")
        if outcome == "output-limit":
            return ("output-limit", "OutputLimitExceeded", f"the cell printed more than {limits.output_bytes} "
                    f"bytes, so the rest was dropped and the cell was stopped")
        if outcome == "died":
            return ("kernel-died", "KernelDied", f"the kernel died while this cell ran (it crashed, exited, was "
                    f"killed, or ran out of memory: the limit is {limits.memory_mb} MB); the grader started "
                    f"a new one and re-ran the cells before this one")
        return None

    def _start_kernel(self, index):
        """A new kernel and, after a restart, the cells that had worked re-run."""
        self.kernel = self._new_kernel()
        if self.completed and not self._replay(index):
            # The re-run broke this kernel too: a fresh one then, without the earlier cells.
            self.stop_kernel()
            self.completed = []
            self.kernel = self._new_kernel()

    def _new_kernel(self):
        """A kernel forked from the kernel server when sandboxed; a process of its own when that server fails
        (that costs time, not isolation). KernelStartError when the submission's files do not fit in its folder."""
        if self.sandbox and self.fork:
            server = None
            try:
                server = server_for(self.limits, self.env, self.package, max(self.time_left(), 1), self.preload)
                return _Kernel(self.workdir, self.limits, self.kernel_env, self.sandbox, self.deadline, self.package,
                               server)
            except KernelStartError as error:
                if error.submission_at_fault or self.time_left() <= 0:
                    raise
                failure = error
            except ForkServerError as error:
                failure = error
            print(f"autograder: the kernel server failed ({failure}); this kernel starts on its own", file=sys.stderr)
            if server is not None:
                forget(server)
        return _Kernel(self.workdir, self.limits, self.kernel_env, self.sandbox, self.deadline, self.package)

    def _replay(self, index):
        """Re-run, silently, the cells that had completed; whether the kernel came through it."""
        for source in self.completed:
            outcome = self.kernel.run(source, min(self.limits.cell_timeout, self.time_left()), silent=True)
            if outcome != "ok":
                self.problems.append(Problem(index, "restart", f"after the kernel restart, an earlier cell failed "
                                             f"when it was re-run ({outcome}); later cells may miss what it made"))
                break
        return self.kernel.usable

    def stop_kernel(self):
        if self.kernel is not None:
            self.kernel.close()
            self.kernel = None


def execute_notebook(nb, workdir, limits, env=None, sandbox=True, package=None, fork=True, preload=(), seed=None):
    """Run every code cell of ``nb`` (nbformat v4, in memory) in a fresh kernel with ``workdir`` as its
    folder and home, sandboxed unless ``sandbox`` is false, within ``limits`` (sandbox.Limits), with
    ``env`` added to the kernel's environment, and in the sandbox ``package`` (a folder) in place of the course
    package; sandboxed kernels are forked from the kernel server (kernel_server.py) unless ``fork`` is false,
    with the modules of ``preload`` imported there before the fork. ``seed``: the secret of the hidden tests'
    inputs (default: drawn afresh, unknown to anyone).
    Returns (a copy of nb with outputs and execution counts, the list of Problem records of the cells that
    broke)."""
    executed = copy.deepcopy(nb)
    # COURSE_GRADING: the notebook's own check (check.py) does not start a check of its own from here.
    # COURSE_JUDGE_OUTSIDE: judged test cells send their probe data here instead of judging in the kernel.
    runner = _Runner(os.path.abspath(workdir), limits,
                     {"COURSE_GRADING": "1", JUDGE_OUTSIDE: "1", **(env or {})}, sandbox, package, fork, preload, seed)
    if sandbox:
        hand_over(workdir)
    try:
        code = [(index, cell) for index, cell in enumerate(executed.cells) if cell.cell_type == "code"]
        for index, cell in code:
            runner.run(index, cell)
    finally:
        runner.stop_kernel()
        runner.judges.close()
    return executed, runner.problems
