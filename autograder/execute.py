"""Run a notebook cell by cell in a sandboxed IPython kernel, within limits, whatever its cells do.

``execute_notebook`` fills in outputs and execution counts as nbclient would, but a cell that breaks the
rules costs that cell only: a cell that runs too long, prints too much or kills its kernel gets an error
output (so nbgrader gives it 0 points) and the kernel is interrupted, or replaced by a new one in which
the cells that had worked before are re-run silently; then the next cell runs as usual. A sandboxed kernel is
forked, ready, from a kernel server that has ipykernel, torch and the course imported (kernel_server.py).

The notebook never goes to disk where the kernel could see it: it holds the hidden tests. Before the
first cell a guard (kernel_guard.py) captures the original objects of builtins, torch, numpy, math, the
course package and the kernel's own error machinery; after every cell, and again before every graded test
cell, it puts back whatever the cell replaced. A graded test cell after which something had to be put back
gets a ``Tampering`` error, since it may have passed only thanks to the replacement. A test cell passes
only if the kernel's reply says so too: an error the kernel was made not to show still counts.
"""
import ast
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
from pathlib import Path
from queue import Empty

import nbformat
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from .cells import is_locked_setup, is_test
from .judging import JUDGE_OUTSIDE, MAX_CELL_BYTES, is_judged, judge_cell, take_probe_data
from .kernel_server import ForkServerError, forget, server_for
from .sandbox import FILES_DO_NOT_FIT, hand_over, kernel_environment, limited_command, sandbox_command

STARTUP_TIMEOUT = 60   # seconds a new kernel gets to answer
INTERRUPT_GRACE = 3    # seconds an interrupted cell gets to stop before its kernel is killed
CHECK_TIMEOUT = 10     # seconds for the guard's silent check (may run a little past the notebook's time)
GUARD_BROKEN = "the grader's tamper check"


@dataclass
class Problem:
    index: int     # the cell, in nb.cells
    kind: str      # timeout, output-limit, kernel-died, tampering, restart, not-run
    message: str


# The guard's source, executed in the kernel (never imported here): see kernel_guard.py.
GUARD_SOURCE = Path(__file__).with_name("kernel_guard.py").read_text(encoding="utf-8")


class KernelStartError(RuntimeError):
    def __init__(self, message, submission_at_fault=False):
        super().__init__(message)
        self.submission_at_fault = submission_at_fault   # its files did not fit in the kernel's work folder


class _Kernel:
    """One IPython kernel process (sandboxed unless told otherwise) and a client on its Unix sockets."""

    def __init__(self, workdir, limits, env, sandbox, until, package=None, server=None):
        """``server``: the kernel server (kernel_server.py) to fork the kernel from, else a new process."""
        self.folder = server.folder() if server else tempfile.mkdtemp(prefix="kernel-")
        connection_file = os.path.join(self.folder, "kernel.json")
        # ipc: Unix sockets in self.folder, the only way in and out of a sandbox without a network.
        write_connection_file(connection_file, transport="ipc", ip=os.path.join(self.folder, "ipc"),
                              key=secrets.token_hex(16).encode())
        self.log = open(os.path.join(self.folder, "kernel.log"), "w+b")
        try:
            if server:
                self.process = server.start(self.folder, workdir, limits, env, max(until - time.monotonic(), 1))
            else:
                self.process = _new_process(connection_file, workdir, limits, env, sandbox, package, self.log)
        except ForkServerError:
            self.log.close()
            raise
        self.client = BlockingKernelClient(connection_file=connection_file)
        self.client.load_connection_file()
        self.client.start_channels(stdin=False, hb=False)
        self.pending = None  # the request the kernel has not finished yet
        self.reply = None    # the content of the last reply
        try:
            self._wait_until_ready(until)
        except KernelStartError:
            self.close()
            raise

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

    def run(self, code, timeout, on_output=None, silent=False, user_expressions=None):
        """Run ``code``: "ok", "error", "timeout", "output-limit" (``on_output`` said stop) or "died"."""
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     user_expressions=user_expressions or {}, stop_on_error=False)
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
            if message and message["parent_header"].get("msg_id") == msg_id:
                if message["msg_type"] == "status":
                    idle = idle or message["content"]["execution_state"] == "idle"
                elif on_output is not None and not on_output(message):
                    return "output-limit"
            message = _next(self.client.get_shell_msg, 0)
            if message and message["parent_header"].get("msg_id") == msg_id:
                self.reply = message["content"]
        self.pending = None
        return "ok" if self.reply["status"] == "ok" else "error"

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
    bubblewrap's the whole sandbox)."""

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.wait()

    @property
    def files_did_not_fit(self):
        return self.poll() == FILES_DO_NOT_FIT


def _new_process(connection_file, workdir, limits, env, sandbox, package, log):
    # -I: ipykernel itself from the installation, never from a file in the submission.
    command = [sys.executable, "-I", "-m", "ipykernel_launcher", "-f", connection_file]
    folder = os.path.dirname(connection_file)
    if sandbox:
        hand_over(folder)
        argv, scratch = sandbox_command(command, workdir, folder, limits, package), "/tmp"
    else:
        argv, scratch = limited_command(command, limits), folder
    # Its own session, for kill().
    return _NewProcess(argv, cwd=workdir, env=kernel_environment(workdir, env, scratch), stdin=subprocess.DEVNULL,
                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _next(get, timeout):
    try:
        return get(timeout=timeout)
    except Empty:
        return None


class _Outputs:
    """A cell's outputs as the kernel sends them, up to a budget of bytes kept."""

    def __init__(self, budget):
        self.kept, self.size, self.budget, self.clear_on_next = [], 0, budget, False

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
            self.size -= len(last.text)
            last.text = _apply_carriage_returns(last.text + output.text)
        else:
            last = output
            self.kept.append(output)
        self.size += _size(last)
        over = self.size - self.budget
        if over <= 0:
            return True
        if last.output_type == "stream" and len(last.text) > over:
            last.text = last.text[:len(last.text) - over]
            self.size = self.budget
        else:
            self.size -= _size(self.kept.pop())
        return False

    def _clear(self):
        # Errors stay: a cell cannot hide that it failed by clearing its output.
        self.kept[:] = [output for output in self.kept if output.output_type == "error"]
        self.size, self.clear_on_next = sum(map(_size, self.kept)), False


def _size(output):
    return len(output.text) if output.output_type == "stream" else len(json.dumps(output))


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

    def __init__(self, workdir, limits, env, sandbox, package=None, fork=True, preload=()):
        self.workdir, self.limits, self.env, self.sandbox, self.fork = workdir, limits, env, sandbox, fork
        self.package = package   # the course package's copy the sandbox shows (stripped.py), or None
        self.preload = tuple(preload)   # what the kernel server imports besides its own list
        self.deadline = time.monotonic() + limits.total_timeout
        self.kernel = None
        self.completed = []   # sources of the cells that ran without error: re-run after a restart
        self.count = 0        # execution counts go on across restarts
        self.ready_for_test = None  # the test cell the last check prepared (its builtins unshadowed)
        self.problems = []

    def time_left(self):
        return self.deadline - time.monotonic()

    def run(self, index, cell, next_test=None):
        """Run one code cell; ``next_test``: (index, source) of the next code cell if it is a test cell."""
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
        if is_test(cell) and self.ready_for_test != index:   # e.g. right after a restart
            self._check_tampering(test_source=cell.source)
        judged = is_test(cell) and is_judged(cell.source)
        # The check after the cell rides on the cell's own request (its user expression, evaluated after the
        # cell and its post-execute callbacks, when the cell did not fail): one round trip less per cell.
        check = self._guard_call(protect=is_locked_setup(cell), test_source=next_test and next_test[1])
        outcome, sent = self._execute(cell, check)
        breakage = self._breakage(outcome)
        if judged:
            # The kernel's own errors decide nothing here (the judge's verdict does): they stay as text.
            cell.outputs[:] = [_as_text(o) if o.output_type == "error" else o for o in cell.outputs]
        if breakage:
            kind, ename, evalue = breakage
            cell.outputs.append(_error(ename, evalue))
            self.problems.append(Problem(index, kind, f"{ename}: {evalue}"))
        if judged:
            _write_verdict(cell, judge_cell(cell.source, sent))
        elif outcome == "error" and not any(o.output_type == "error" for o in cell.outputs):
            # The kernel said the cell failed, but no error was shown: the display was tampered with.
            reply = self.kernel.reply if self.kernel else {}
            cell.outputs.append(_error(reply.get("ename") or "Error", f"{reply.get('evalue', '')} (the cell raised "
                                       "this error, but the kernel was made not to show it)"))
        # The check after a cell also prepares the next test cell, if the next cell is one. A cell that failed
        # (or was stopped) had no check evaluated: it runs on its own then.
        if self.kernel and outcome == "ok":
            tampered = self._guard_answer(self.kernel.reply)
        else:
            tampered = self._check(check) if self.kernel else []
        self.ready_for_test = next_test[0] if next_test and self.kernel else None
        if self.kernel and not self.kernel.usable:
            self.stop_kernel()
        if tampered and is_test(cell) and not judged:
            evalue = f"the code replaced {', '.join(tampered)} while the tests ran"
            cell.outputs.append(_error("Tampering", evalue))
            self.problems.append(Problem(index, "tampering", f"Tampering: {evalue}"))
        elif tampered:
            self.problems.append(Problem(index, "tampering", f"the code replaced {', '.join(tampered)}; the "
                                         f"grader put the originals back before the next cell"))
        if outcome == "ok" and not (tampered and is_test(cell) and not judged):
            self.completed.append(cell.source)

    def _execute(self, cell, check):
        """Run the cell, recording its outputs and the probe data it sent, with the guard's ``check`` as its user
        expression; stop it if it breaks a limit, and drop a kernel that broke. Returns (outcome, the base64
        texts of probe data, in order)."""
        self.count += 1
        cell.execution_count = self.count
        outputs, sent = _Outputs(self.limits.output_bytes), _ProbeData()
        cell.outputs = outputs.kept
        outcome = self.kernel.run(cell.source, min(self.limits.cell_timeout, self.time_left()),
                                  lambda message: sent.add(message) or outputs.add(message), user_expressions=check)
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
        """A new kernel with the guard installed and, after a restart, the cells that had worked re-run."""
        self.ready_for_test = None
        self.kernel = self._new_kernel()
        self._install_guard()
        if self.completed and not self._replay(index):
            # The re-run broke this kernel too: a fresh one then, without the earlier cells.
            self.stop_kernel()
            self.completed = []
            self.kernel = self._new_kernel()
            self._install_guard()

    def _new_kernel(self):
        """A kernel forked from the kernel server when sandboxed; a process of its own when that server fails
        (that costs time, not isolation). KernelStartError when the submission's files do not fit in its folder."""
        if self.sandbox and self.fork:
            server = None
            try:
                server = server_for(self.limits, self.env, self.package, max(self.time_left(), 1), self.preload)
                return _Kernel(self.workdir, self.limits, self.env, self.sandbox, self.deadline, self.package, server)
            except KernelStartError as error:
                if error.submission_at_fault or self.time_left() <= 0:
                    raise
                failure = error
            except ForkServerError as error:
                failure = error
            print(f"autograder: the kernel server failed ({failure}); this kernel starts on its own", file=sys.stderr)
            if server is not None:
                forget(server)
        return _Kernel(self.workdir, self.limits, self.env, self.sandbox, self.deadline, self.package)

    def _install_guard(self):
        self.guard_name, self.nonce = "_grader_guard_" + secrets.token_hex(8), secrets.token_hex(16)
        setup = f"exec({GUARD_SOURCE!r}, {{'NAME': {self.guard_name!r}, 'NONCE': {self.nonce!r}}})"
        outcome = self.kernel.run(setup, min(STARTUP_TIMEOUT, max(self.time_left(), 1)), silent=True)
        if outcome != "ok" or self._check_tampering() != []:
            self.stop_kernel()
            raise KernelStartError(f"the tamper guard could not be set up in the kernel ({outcome})")

    def _replay(self, index):
        """Re-run, silently, the cells that had completed; whether the kernel came through it."""
        for source in self.completed:
            outcome = self.kernel.run(source, min(self.limits.cell_timeout, self.time_left()), silent=True)
            if outcome != "ok":
                self.problems.append(Problem(index, "restart", f"after the kernel restart, an earlier cell failed "
                                             f"when it was re-run ({outcome}); later cells may miss what it made"))
                break
        if self.kernel.usable:
            self._check_tampering()  # puts back, silently, what the re-run cells replaced
        return self.kernel.usable

    def _check_tampering(self, protect=False, test_source=None):
        """Names the last cell replaced, now put back (GUARD_BROKEN if the check did not answer truly).
        The first call, right after the setup, installs the guard. ``protect``: the last cell was a locked
        set-up cell, whose names are put back from now on; ``test_source``: a test cell runs next."""
        return self._check(self._guard_call(protect, test_source))

    def _guard_call(self, protect=False, test_source=None):
        """The check, as the user expressions of an execute request."""
        return {"guard": f"{self.guard_name}({protect!r}, {test_source!r})"}

    def _check(self, check):
        """Run ``check`` (from _guard_call) in a request of its own: the names it put back."""
        outcome = self.kernel.run("", CHECK_TIMEOUT, silent=True, user_expressions=check)
        return self._guard_answer(self.kernel.reply if outcome == "ok" else {})

    def _guard_answer(self, reply):
        """The names the check put back, from the reply to the request that carried it (GUARD_BROKEN if the
        answer is missing or lacks the nonce)."""
        answer = (reply.get("user_expressions") or {}).get("guard", {})
        try:
            nonce, *names = ast.literal_eval(answer["data"]["text/plain"]).split()
        except (KeyError, TypeError, ValueError, SyntaxError, AttributeError):
            return [GUARD_BROKEN]
        return list(dict.fromkeys(names)) if nonce == self.nonce else [GUARD_BROKEN]

    def stop_kernel(self):
        if self.kernel is not None:
            self.kernel.close()
            self.kernel = None


def execute_notebook(nb, workdir, limits, env=None, sandbox=True, package=None, fork=True, preload=()):
    """Run every code cell of ``nb`` (nbformat v4, in memory) in a fresh kernel with ``workdir`` as its
    folder and home, sandboxed unless ``sandbox`` is false, within ``limits`` (sandbox.Limits), with
    ``env`` added to the kernel's environment, and in the sandbox ``package`` (a folder) in place of the course
    package; sandboxed kernels are forked from the kernel server (kernel_server.py) unless ``fork`` is false,
    with the modules of ``preload`` imported there before the fork.
    Returns (a copy of nb with outputs and execution counts, the list of Problem records of the cells that
    broke)."""
    executed = copy.deepcopy(nb)
    # COURSE_GRADING: the notebook's own check (check.py) does not start a check of its own from here.
    # COURSE_JUDGE_OUTSIDE: judged test cells send their probe data here instead of judging in the kernel.
    runner = _Runner(os.path.abspath(workdir), limits,
                     {"COURSE_GRADING": "1", JUDGE_OUTSIDE: "1", **(env or {})}, sandbox, package, fork, preload)
    if sandbox:
        hand_over(workdir)
    try:
        code = [(index, cell) for index, cell in enumerate(executed.cells) if cell.cell_type == "code"]
        for (index, cell), after in zip(code, code[1:] + [None]):
            runner.run(index, cell, next_test=(after[0], after[1].source) if after and is_test(after[1]) else None)
    finally:
        runner.stop_kernel()
    return executed, runner.problems
