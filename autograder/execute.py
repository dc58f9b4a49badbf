"""Run a notebook cell by cell in a sandboxed IPython kernel, within limits, whatever its cells do.

``execute_notebook`` fills in outputs and execution counts as nbclient would, but a cell that breaks the
rules costs that cell only: a cell that runs too long, prints too much or kills its kernel gets an error
output (so nbgrader gives it 0 points) and the kernel is interrupted, or replaced by a new one in which
the cells that had worked before are re-run silently; then the next cell runs as usual.

The notebook never goes to disk where the kernel could see it: it holds the hidden tests. Before the
first cell a guard captures the original objects of builtins, torch, numpy, math and the course package;
after every cell it puts back whatever the cell replaced. A graded test cell after which something had to
be put back gets a ``Tampering`` error, since it may have passed only thanks to the replacement.
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
from queue import Empty

import nbformat
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from .sandbox import hand_over, kernel_environment, limited_command, sandbox_command

STARTUP_TIMEOUT = 60   # seconds a new kernel gets to answer
INTERRUPT_GRACE = 3    # seconds an interrupted cell gets to stop before its kernel is killed
CHECK_TIMEOUT = 10     # seconds for the guard's silent check (may run a little past the notebook's time)
GUARD_BROKEN = "the grader's tamper check"


@dataclass
class Problem:
    index: int     # the cell, in nb.cells
    kind: str      # timeout, output-limit, kernel-died, tampering, restart, not-run
    message: str


# Runs in the kernel, in a namespace of its own (the student's code cannot reach it by name), and imports
# the watched modules. The first call of builtins.<NAME>() captures their originals and replaces itself by
# the check; each later call is the check. The check uses only what it captured (a replaced setattr, vars
# or id cannot fool it), and answers with NONCE, which a fake check cannot know, and the names it restored.
# Besides the modules it watches what decides a cell's verdict in the kernel: the shell's and the kernel's
# methods and handlers (exception handlers, traceback display, the execution machinery, code transformers),
# event callbacks, trace, profile and monitoring hooks, PyTorch's global modes and module hooks, the code of
# the course's finished answers, and the names the notebook's locked set-up cells defined.
GUARD_SOURCE = r"""
import builtins, dis, importlib, os, sys, threading, types

import IPython

MODULES = ("math", "numpy", "numpy.testing", "torch", "torch.nn", "torch.nn.functional", "torch.testing",
           "transformer_course.testing", "IPython.core.interactiveshell", "IPython.core.ultratb",
           "ipykernel.ipkernel", "ipykernel.kernelbase", "ipykernel.zmqshell", "jupyter_client.session")
SWAPPED_BY_KERNEL = ("input", "exit", "quit", "get_ipython")
# Imported before the capture too, not watched: torch._dynamo, loaded by the first optimizer step, replaces
# torch.manual_seed with a wrapped version of its own.
PRELOADED = ("torch._dynamo",)
# Event callbacks a library registers while a cell runs (matplotlib's inline backend flushes figures after
# each cell); any other callback added after the capture is taken off.
LIBRARY_CALLBACKS = ("matplotlib_inline.backend_inline",)
# The shell's lists of code transformers: each can rewrite a test cell before it runs.
TRANSFORMER_LISTS = ("ast_transformers", "input_transformers_post")
MISSING = object()


def _import_originals():
    # From the installation, never from a file of the same name in the submission's folder.
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if p not in ("", os.getcwd())]
    try:
        for name in PRELOADED + MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    finally:
        sys.path[:] = saved
    names = [n for n in MODULES if n in sys.modules]
    names += [n for n in sys.modules if n.partition(".")[0] == "transformer_course" and n not in names]
    return [builtins] + [sys.modules[n] for n in names]


class Watch:
    # Named values and how to read and restore them: `same` says whether a value is still the original.
    def __init__(self, prefix, current, restore, originals, suffix="", same=None):
        self.prefix, self.suffix, self.current, self.restore = prefix, suffix, current, restore
        self.originals, self.same = list(originals), same or (lambda a, b: a is b)


def _class_watch(name, cls, setattr_, delattr_):
    # Every attribute a class has, its own or inherited: one set on the class is put back (or removed).
    own = vars(cls)

    def restore(key, original):
        if original is MISSING:
            delattr_(cls, key)
        else:
            setattr_(cls, key, original)

    return Watch(name + ".", own.get, restore, [(key, own.get(key, MISSING)) for key in dir(cls)])


def _instance_watch(name, obj, extra=()):
    # An object's own attributes that replace a method of its class, and the named handler attributes.
    own = vars(obj)
    cls = type(obj)
    keys = {k for k in dir(cls) if callable(getattr(cls, k, None))} | {k for k, v in own.items() if callable(v)}

    def restore(key, original):
        if original is MISSING:
            own.pop(key, None)
        else:
            own[key] = original

    return Watch(name + ".", own.get, restore, [(key, own.get(key, MISSING)) for key in keys | set(extra)])


def _contents_watch(name, containers):
    # Lists and dicts whose contents matter (code transformers, handlers, hooks): identity and contents.
    def contents(container):
        return tuple(container.items()) if isinstance(container, dict) else tuple(container)

    def same(a, b):
        return a[0] is b[0] and len(a[1]) == len(b[1]) and all(
            (x[0] == y[0] and x[1] is y[1]) if isinstance(a[0], dict) else x is y for x, y in zip(a[1], b[1]))

    def current(key, missing):
        container = containers[key]()
        return (container, contents(container)) if container is not None else missing

    def restore(key, original):
        container, items = original
        container.clear()
        container.update(items) if isinstance(container, dict) else container.extend(items)
        containers[key](container)

    return Watch(name, current, restore, [(key, current(key, MISSING)) for key in containers], same=same)


def _function_code_watch(modules, setattr_):
    # The code of the course's functions and methods: the finished answers' gates live in it.
    functions = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__:
                functions.update({f"{value.__module__}.{k}": v for k, v in vars(value).items()
                                  if isinstance(v, types.FunctionType)})
            elif isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                functions[f"{value.__module__}.{value.__name__}"] = value
    return Watch("", lambda key, missing: functions[key].__code__,
                 lambda key, original: setattr_(functions[key], "__code__", original),
                 [(key, f.__code__) for key, f in functions.items()], suffix=".__code__")


def _attribute(obj, name, setattr_):
    # Read obj.<name> with no argument, set it with one.
    return lambda *value: setattr_(obj, name, value[0]) if value else getattr(obj, name, None)


def _shell_watches(shell, kernel, setattr_, delattr_):
    parts = {"shell": (shell, ("custom_exceptions", "InteractiveTB", "SyntaxTB", "displayhook", "display_pub",
                                "display_formatter", "compile", "events", "input_transformer_manager")),
             "shell.events": (shell.events, ()), "shell.displayhook": (shell.displayhook, ()),
             "shell.display_pub": (shell.display_pub, ()), "shell.InteractiveTB": (shell.InteractiveTB, ()),
             "shell.SyntaxTB": (shell.SyntaxTB, ()), "shell.compile": (shell.compile, ()),
             "shell.input_transformer_manager": (shell.input_transformer_manager, ())}
    if kernel is not None:
        parts["kernel"] = (kernel, ("session", "shell", "iopub_socket", "iopub_thread", "shell_handlers",
                                    "control_handlers"))
        parts["kernel.session"] = (kernel.session, ())
    watches = [_instance_watch(name, obj, extra) for name, (obj, extra) in parts.items()]
    from IPython.core import interactiveshell
    classes = {c for obj, _ in parts.values() for c in type(obj).__mro__ if c.__module__ != "builtins"}
    classes |= {interactiveshell.ExecutionResult, interactiveshell.ExecutionInfo}
    watches += [_class_watch(f"{c.__module__}.{c.__qualname__}", c, setattr_, delattr_) for c in classes]
    manager = shell.input_transformer_manager
    lists = {f"shell.{name}": _attribute(shell, name, setattr_) for name in TRANSFORMER_LISTS}
    lists.update({f"shell.input_transformer_manager.{name}": _attribute(manager, name, setattr_)
                  for name in ("cleanup_transforms", "line_transforms", "token_transformers")})
    if kernel is not None:
        lists.update({f"kernel.{name}": _attribute(kernel, name, setattr_)
                      for name in ("shell_handlers", "control_handlers")})
    watches.append(_contents_watch("", lists))
    watches.append(Watch("sys.", vars(sys).get, lambda key, value: setattr_(sys, key, value),
                         [("excepthook", sys.excepthook)]))
    return watches


def _torch_watches(torch, setattr_):
    # Global module hooks change every module's output, the oracles' included.
    hooks = importlib.import_module("torch.nn.modules.module")
    return [_contents_watch("torch.nn.modules.module.", {
        name: _attribute(hooks, name, setattr_) for name, value in vars(hooks).items()
        if name.startswith("_global_") and isinstance(value, dict)})]


def _hook_checks(shell, setattr_, isinstance_, torch):
    # Hooks set by a call rather than an attribute: trace, profile, monitoring, event callbacks, torch modes.
    gettrace, settrace, getprofile, setprofile = sys.gettrace, sys.settrace, sys.getprofile, sys.setprofile
    monitoring = getattr(sys, "monitoring", None)
    tools = {t for t in range(6) if monitoring is not None and monitoring.get_tool(t) is not None}
    callbacks = {name: list(found) for name, found in shell.events.callbacks.items()}
    modes = ()
    if torch is not None:
        from torch.utils._device import DeviceContext
        modes = (("a torch function mode", torch._C._len_torch_function_stack, torch._C._get_function_stack_at,
                  torch._C._pop_torch_function_stack, DeviceContext),
                 ("a torch dispatch mode", torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at,
                  torch._C._pop_torch_dispatch_stack, ()))

    def same_callable(a, b):
        return a is b or (isinstance_(a, types.MethodType) and isinstance_(b, types.MethodType)
                          and a.__func__ is b.__func__ and a.__self__ is b.__self__)

    def allowed_callbacks(event):
        found = list(callbacks.get(event, ()))
        for name in LIBRARY_CALLBACKS:
            module = sys.modules.get(name)
            found += list(vars(module).values()) if module is not None else []
        return found

    def check_hooks(restored):
        if gettrace() is not None or getprofile() is not None:
            settrace(None), setprofile(None)
            restored.append("sys.settrace")
        for hook in ("_trace_hook", "_profile_hook"):
            if vars(threading).get(hook) is not None:
                setattr_(threading, hook, None)
                restored.append("threading.settrace")
        for tool in range(6 if monitoring is not None else 0):
            if tool not in tools and monitoring.get_tool(tool) is not None:
                monitoring.set_events(tool, 0)
                for event in vars(monitoring.events).values():
                    if isinstance_(event, int) and event and not event & (event - 1):
                        monitoring.register_callback(tool, event, None)
                monitoring.free_tool_id(tool)
                restored.append("sys.monitoring")
        for event, found in shell.events.callbacks.items():
            allowed = allowed_callbacks(event)
            for callback in list(found):
                if not any(same_callable(callback, a) for a in allowed):
                    found.remove(callback)
                    restored.append(f"a callback of the shell's {event} event")
        for what, length, mode_at, pop, benign in modes:
            while length() and not isinstance_(mode_at(length() - 1), benign or ()):
                pop()
                restored.append(what)

    return check_hooks


def _compiled_names(source, compile_, isinstance_):
    # Every global or attribute name the code of ``source`` uses (empty if it is not plain Python).
    try:
        stack = [compile_(source, "<test>", "exec", dont_inherit=True)]
    except (SyntaxError, ValueError):
        return set()
    names = set()
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack += [c for c in code.co_consts if isinstance_(c, types.CodeType)]
    return names


def install(modules):
    setattr_, delattr_, isinstance_, compile_ = builtins.setattr, builtins.delattr, builtins.isinstance, builtins.compile
    shell = IPython.get_ipython()
    user_ns, torch = shell.user_ns, sys.modules.get("torch")
    restored = []  # names put back since the last report
    protected = {"__builtins__": user_ns.get("__builtins__")}  # names the locked set-up cells defined
    seen = [dict(user_ns)]   # the namespace at the last check
    hidden = {}              # the student's names that shadow a builtin a test cell uses, while it runs
    watched = []
    names = Watch("", user_ns.get, user_ns.__setitem__, protected.items())

    def restore_all(skipped=()):
        for watch in watched:
            for key, original in watch.originals:
                if not (watch.prefix == "builtins." and key in skipped) and \
                        not watch.same(watch.current(key, MISSING), original):
                    watch.restore(key, original)
                    restored.append(watch.prefix + key + watch.suffix)

    def check(protect=False, test_source=None):
        for name, value in hidden.items():
            user_ns.setdefault(name, value)
        hidden.clear()
        if protect:  # the cell just run is a locked set-up cell: what it defined is the notebook's
            protected.update({k: v for k, v in user_ns.items()
                              if not k.startswith("_") and seen[0].get(k, MISSING) is not v})
            names.originals = list(protected.items())
        restore_all()
        check_hooks(restored)
        seen[0] = dict(user_ns)
        for name in _compiled_names(test_source, compile_, isinstance_) if test_source else ():
            if name in builtin_originals and user_ns.get(name, builtin_originals[name]) is not builtin_originals[name]:
                hidden[name] = user_ns.pop(name)
        report = NONCE + " " + " ".join(restored)
        restored.clear()
        return report

    setattr_(builtins, NAME, check)  # before the capture: the check is one of the originals
    shell.events.register("post_execute", lambda: restore_all(SWAPPED_BY_KERNEL))
    watched += [Watch(m.__name__ + ".", vars(m).get, vars(m).__setitem__, list(vars(m).items())) for m in modules]
    watched.append(Watch("sys.modules['", sys.modules.get, sys.modules.__setitem__,
                         [(m.__name__, m) for m in modules], suffix="']"))
    if torch is not None:
        watched.append(_class_watch("torch.Tensor", torch.Tensor, setattr_, delattr_))
        watched += _torch_watches(torch, setattr_)
    watched += _shell_watches(shell, getattr(shell, "kernel", None), setattr_, delattr_)
    watched.append(_function_code_watch([m for m in modules if m.__name__.startswith("transformer_course")], setattr_))
    watched.append(names)
    check_hooks = _hook_checks(shell, setattr_, isinstance_, torch)
    builtin_originals = dict(vars(builtins))

    return check()


# Imported now, captured by the first call (made like every check, outside IPython's run_cell, which
# adds and removes a few builtins of its own).
_modules = _import_originals()
setattr(builtins, NAME, lambda *args, **kwargs: install(_modules))
"""


class KernelStartError(RuntimeError):
    pass


class _Kernel:
    """One IPython kernel process (sandboxed unless told otherwise) and a client on its Unix sockets."""

    def __init__(self, workdir, limits, env, sandbox, until):
        self.folder = tempfile.mkdtemp(prefix="kernel-")
        connection_file = os.path.join(self.folder, "kernel.json")
        # ipc: Unix sockets in self.folder, the only way in and out of a sandbox without a network.
        write_connection_file(connection_file, transport="ipc", ip=os.path.join(self.folder, "ipc"),
                              key=secrets.token_hex(16).encode())
        # -I: ipykernel itself from the installation, never from a file in the submission.
        command = [sys.executable, "-I", "-m", "ipykernel_launcher", "-f", connection_file]
        if sandbox:
            hand_over(self.folder)
            argv, scratch = sandbox_command(command, workdir, self.folder, limits), "/tmp"
        else:
            argv, scratch = limited_command(command, limits), self.folder
        self.log = open(os.path.join(self.folder, "kernel.log"), "w+b")
        # Its own session: close() kills the whole process group (bwrap takes its sandbox along).
        self.process = subprocess.Popen(argv, cwd=workdir, env=kernel_environment(workdir, env, scratch),
                                        stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
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
                raise KernelStartError(f"the kernel did not start: {tail or 'no message'}")

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
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


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


def _error(ename, evalue):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _is_test(cell):
    grading = cell.metadata.get("nbgrader", {})
    return bool(grading.get("grade")) and not grading.get("solution")


def _is_locked_setup(cell):
    """A read-only cell of the release that is neither an answer nor a test (nbgrader restores its source)."""
    grading = cell.metadata.get("nbgrader", {})
    return bool(grading.get("locked") and grading.get("grade_id")) and not (grading.get("grade") or grading.get("solution"))


class _Runner:
    """Runs a notebook's code cells one by one, replacing the kernel whenever a cell breaks it."""

    def __init__(self, workdir, limits, env, sandbox):
        self.workdir, self.limits, self.env, self.sandbox = workdir, limits, env, sandbox
        self.deadline = time.monotonic() + limits.total_timeout
        self.kernel = None
        self.completed = []   # sources of the cells that ran without error: re-run after a restart
        self.count = 0        # execution counts go on across restarts
        self.problems = []

    def time_left(self):
        return self.deadline - time.monotonic()

    def run(self, index, cell):
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
        if _is_test(cell):
            # Puts away the answer's names that hide a builtin the test uses, while it runs.
            self._check_tampering(test_source=cell.source)
        outcome = self._execute(cell)
        breakage = self._breakage(outcome)
        if breakage:
            kind, ename, evalue = breakage
            cell.outputs.append(_error(ename, evalue))
            self.problems.append(Problem(index, kind, f"{ename}: {evalue}"))
        elif outcome == "error" and not any(o.output_type == "error" for o in cell.outputs):
            # The kernel said the cell failed, but no error was shown: the display was tampered with.
            reply = self.kernel.reply if self.kernel else {}
            cell.outputs.append(_error(reply.get("ename") or "Error", f"{reply.get('evalue', '')} (the cell raised "
                                       "this error, but the kernel was made not to show it)"))
        tampered = self._check_tampering(protect=_is_locked_setup(cell)) if self.kernel else []
        if self.kernel and not self.kernel.usable:
            self.stop_kernel()
        if tampered and _is_test(cell):
            evalue = f"the code replaced {', '.join(tampered)} while the tests ran"
            cell.outputs.append(_error("Tampering", evalue))
            self.problems.append(Problem(index, "tampering", f"Tampering: {evalue}"))
        elif tampered:
            self.problems.append(Problem(index, "tampering", f"the code replaced {', '.join(tampered)}; the "
                                         f"grader put the originals back before the next cell"))
        if outcome == "ok" and not (tampered and _is_test(cell)):
            self.completed.append(cell.source)

    def _execute(self, cell):
        """Run the cell, recording its outputs; stop it if it breaks a limit, and drop a kernel that broke."""
        self.count += 1
        cell.execution_count = self.count
        outputs = _Outputs(self.limits.output_bytes)
        cell.outputs = outputs.kept
        outcome = self.kernel.run(cell.source, min(self.limits.cell_timeout, self.time_left()), outputs.add)
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = self.count
        if outcome in ("timeout", "output-limit") and self.time_left() > 0:
            self.kernel.interrupt(INTERRUPT_GRACE)
        if not self.kernel.usable:
            self.stop_kernel()
        return outcome

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
        self.kernel = _Kernel(self.workdir, self.limits, self.env, self.sandbox, self.deadline)
        self._install_guard()
        if self.completed and not self._replay(index):
            # The re-run broke this kernel too: a fresh one then, without the earlier cells.
            self.stop_kernel()
            self.completed = []
            self.kernel = _Kernel(self.workdir, self.limits, self.env, self.sandbox, self.deadline)
            self._install_guard()

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
        call = f"{self.guard_name}({protect!r}, {test_source!r})"
        outcome = self.kernel.run("", CHECK_TIMEOUT, silent=True, user_expressions={"guard": call})
        answer = self.kernel.reply["user_expressions"].get("guard", {}) if outcome == "ok" else {}
        try:
            nonce, *names = ast.literal_eval(answer["data"]["text/plain"]).split()
        except (KeyError, TypeError, ValueError, SyntaxError, AttributeError):
            return [GUARD_BROKEN]
        return list(dict.fromkeys(names)) if nonce == self.nonce else [GUARD_BROKEN]

    def stop_kernel(self):
        if self.kernel is not None:
            self.kernel.close()
            self.kernel = None


def execute_notebook(nb, workdir, limits, env=None, sandbox=True):
    """Run every code cell of ``nb`` (nbformat v4, in memory) in a fresh kernel with ``workdir`` as its
    folder and home, sandboxed unless ``sandbox`` is false, within ``limits`` (sandbox.Limits), with
    ``env`` added to the kernel's environment. Returns (a copy of nb with outputs and execution counts,
    the list of Problem records of the cells that broke)."""
    executed = copy.deepcopy(nb)
    runner = _Runner(os.path.abspath(workdir), limits, env, sandbox)
    if sandbox:
        hand_over(workdir)
    try:
        for index, cell in enumerate(executed.cells):
            if cell.cell_type == "code":
                runner.run(index, cell)
    finally:
        runner.stop_kernel()
    return executed, runner.problems
