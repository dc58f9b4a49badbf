"""Kernels that start ready: a fork server (the zygote, kernel_zygote.py) in the grader's sandbox imports
ipykernel, torch, matplotlib and the course package once, then forks each kernel from itself, in namespaces of
its own (see kernel_zygote.py for what each kernel sees). A kernel is ready about 0.4 s after it is asked for,
against 2-3 s for a new Python that imports all that (benchmarks/kernel_fork_server.py).

Each kernel is used for one notebook and never reused: what a student's code does to it dies with it. The zygote
itself never runs a student's code. There is one zygote per package the kernels see (the assignment's stripped
copy), environment and memory limit, in each process that runs notebooks, and it dies with that process
(bubblewrap's --die-with-parent).

Each kernel gets a memory cgroup of its own where the host has them (sandbox.MemoryCgroups): the grader makes it and
hands the zygote a descriptor of its cgroup.procs, with which the kernel moves itself there before it does anything
else. The kernel hands back the descriptor of the folder of its sockets (a tmpfs in its own mount namespace): the
grader's client reaches them through /proc/self/fd/N.

Whatever goes wrong with the kernel server costs speed, never isolation: a zygote that does not start, or a kernel
of it that does not answer, and the executor starts a kernel as before, in a sandbox of its own.
"""
import array
import atexit
import dataclasses
import itertools
import json
import multiprocessing.util
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .sandbox import (
    FILES_DO_NOT_FIT,
    LOG_BYTES,
    RUNTIME,
    RUNTIME_MB,
    folder_sizes,
    hand_over,
    kernel_environment,
    memory_cgroups,
    sandbox_command,
)

ZYGOTE_SOURCE = Path(__file__).with_name("kernel_zygote.py").read_text(encoding="utf-8")


# What the zygote imports, so that every kernel starts with it: the kernel itself, what the notebooks' set-up cells
# import (torch, matplotlib, the course package and its test kit) and the oracles the test cells still judged in the
# kernel import (a package without them skips that import).
KERNEL_IMPORTS = ("ipykernel.kernelapp", "matplotlib.pyplot", "matplotlib_inline.backend_inline", "math", "numpy", "torch",
             "torch.nn", "torch.nn.functional", "transformer_course", "transformer_course.plotting",
             "course_testkit.testing", "course_testkit.probing", "course_testkit.oracles")
ZYGOTE_TASKS = 4096        # the zygote's own limit counts its kernels' tasks too; each kernel has its own below it
MAX_SERVERS = 2           # zygotes kept per process (one per assignment being graded: a few hundred MB each)


class ForkServerError(RuntimeError):
    pass


class KernelServer:
    """A zygote in the sandbox, and the kernels forked from it."""

    def __init__(self, limits, env, package, timeout, preload=()):
        """``preload``: modules the zygote imports besides KERNEL_IMPORTS (what one assignment's cells import on first use)."""
        self.base = tempfile.mkdtemp(prefix="kernels-")
        self.ids, self.lock = itertools.count(), threading.Lock()
        # What the zygote said, kept for every thread: whether it is ready, the kernels it started (each with the
        # descriptor of its sockets' folder, until a ForkedKernel takes it) and their exits.
        self.ready, self.started, self.exited = False, {}, {}
        hand_over(self.base)
        command = [sys.executable, "-I", "-c", ZYGOTE_SOURCE, self.base, *KERNEL_IMPORTS, *preload]
        zygote_limits = dataclasses.replace(limits, processes=ZYGOTE_TASKS)
        self.log = open(os.path.join(self.base, "zygote.log"), "w+b")
        # A Unix socket, not pipes: descriptors go along (a kernel's cgroup there, its sockets' folder back).
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(sandbox_command(command, self.base, self.base, zygote_limits, package),
                                            cwd=self.base, env=kernel_environment(self.base, env), stdin=theirs,
                                            stdout=theirs, stderr=self.log, start_new_session=True)
        if not self._wait_for(lambda: self.ready, time.monotonic() + timeout):
            self.close()
            raise ForkServerError("the kernel server did not start")

    @property
    def alive(self):
        return self.process.poll() is None

    def folder(self):
        """A new kernel's folder, for its connection file, its sockets and its log."""
        kernel_id = f"k{next(self.ids)}"
        os.mkdir(os.path.join(self.base, kernel_id))
        return os.path.join(self.base, kernel_id)

    def start(self, folder, workdir, limits, env, timeout):
        """Fork a kernel that runs in ``folder`` (from folder()) on a copy of ``workdir``'s files, in a memory cgroup
        of its own where the host has them; its handle."""
        try:
            _copy_files(workdir, os.path.join(folder, "files"))
            os.mkdir(os.path.join(folder, "work"))
            hand_over(folder)
            cgroup = memory_cgroups().kernel(limits.memory_mb)
        except (OSError, shutil.Error) as error:
            raise ForkServerError(f"the kernel's folder or cgroup could not be made: {error}") from error
        kernel_id = os.path.basename(folder)
        work = os.path.join(folder, "work")
        procs, sizes = [cgroup.open_procs()] if cgroup else [], folder_sizes(limits)
        try:
            self._send({"start": kernel_id, "env": kernel_environment(work, env), "memory_mb": limits.memory_mb,
                        "processes": limits.processes, "workdir_mb": sizes["work"], "tmp_mb": sizes["tmp"],
                        "shm_mb": sizes["shm"], "runtime": RUNTIME, "runtime_mb": RUNTIME_MB,
                        "log_bytes": LOG_BYTES, "files_do_not_fit": FILES_DO_NOT_FIT}, procs)
        finally:
            for fd in procs:
                os.close(fd)
        kernel = ForkedKernel(self, kernel_id, cgroup)
        if not self._wait_for(lambda: kernel_id in self.started or kernel_id in self.exited,
                              time.monotonic() + timeout):
            kernel.kill()
            raise ForkServerError("the kernel server did not answer")
        kernel.sockets_folder = self.started.pop(kernel_id, None)
        if kernel.sockets_folder is None:   # it ended before its sockets' folder was made
            kernel.kill()
            with open(os.path.join(folder, "kernel.log"), "rb") as log:
                said = log.read()[-2000:].decode(errors="replace").strip()
            raise ForkServerError(f"the kernel ended as it started: {said or 'no message'}")
        return kernel

    def exit_status(self, kernel_id):
        """The kernel's exit status, or None while it runs (a zygote that died took its kernels along)."""
        with self.lock:
            self._read()
        if kernel_id in self.exited:
            return self.exited[kernel_id]
        return None if self.alive else -9

    def kill(self, kernel_id, timeout=5):
        """Kill the kernel and wait until it has ended (the zygote with it, if it does not answer)."""
        if self.exit_status(kernel_id) is None:
            try:
                self._send({"kill": kernel_id})
            except ForkServerError:
                pass   # the zygote is gone, and its kernels with it
            if not self._wait_for(lambda: kernel_id in self.exited, time.monotonic() + timeout):
                self.close()

    def close(self):
        if self.log.closed:
            return
        if self.process.poll() is None:   # not yet reaped: its pid is still its own
            os.killpg(self.process.pid, signal.SIGKILL)   # bubblewrap's session: the sandbox and all in it
        self.process.wait()
        self.log.close()
        self.channel.close()
        for fd in self.started.values():
            os.close(fd)
        shutil.rmtree(self.base, ignore_errors=True)

    def _send(self, message, fds=()):
        try:
            with self.lock:
                socket.send_fds(self.channel, [json.dumps(message).encode()], list(fds))
        except OSError as error:
            raise ForkServerError(f"the kernel server is gone: {error}") from error

    def _wait_for(self, said, until):
        """Whether the zygote ``said`` it (a test on what it said) by ``until``."""
        while not said() and time.monotonic() < until and self.alive:
            select.select([self.channel], [], [], 0.05)
            with self.lock:
                self._read()
        return said()

    def _read(self):
        """Record the zygote's messages that have come."""
        while self.channel.fileno() != -1:
            try:
                data, fds = _receive(self.channel, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return   # the zygote is gone: alive says so
            if not data:
                return
            message = json.loads(data)
            self.ready = self.ready or message.get("ready", False)
            if "started" in message and fds:
                self.started[message["started"]] = fds.pop(0)
            self.exited.update([(message["exited"], message["status"])] if "exited" in message else [])
            for fd in fds:
                os.close(fd)


def _copy_files(workdir, target):
    """The submission's files, for the kernel to copy into its capped work folder: hard links where the two
    folders share a file system (no copy on disk), copies elsewhere. Links are kept as links; what is neither a
    file, a folder nor a link (a pipe would block the copy) is left out."""
    def link_or_copy(source, destination):
        try:
            os.link(source, destination, follow_symlinks=False)
        except OSError:
            shutil.copy2(source, destination, follow_symlinks=False)

    def special(folder, names):
        paths = (os.path.join(folder, name) for name in names)
        return [os.path.basename(p) for p in paths if not (os.path.islink(p) or os.path.isfile(p) or os.path.isdir(p))]
    shutil.copytree(workdir, target, symlinks=True, copy_function=link_or_copy, ignore=special)


def _receive(channel, flags=0):
    """One message and the descriptors that came with it (socket.recv_fds, but with ``flags``: it drops them)."""
    data, ancillary, _, _ = channel.recvmsg(1 << 20, socket.CMSG_SPACE(4 * array.array("i").itemsize),
                                            flags | socket.MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


class ForkedKernel:
    """The process handle of a forked kernel, as the executor uses a Popen's. ``sockets``: the prefix of its sockets'
    paths, through the descriptor of their folder (in the kernel's own mount namespace) that it handed over."""

    def __init__(self, server, kernel_id, cgroup):
        self.server, self.kernel_id, self.cgroup, self.sockets_folder = server, kernel_id, cgroup, None

    @property
    def sockets(self):
        return f"/proc/self/fd/{self.sockets_folder}/ipc"

    def poll(self):
        return self.server.exit_status(self.kernel_id)

    def kill(self):
        self.server.kill(self.kernel_id)
        if self.sockets_folder is not None:
            os.close(self.sockets_folder)
            self.sockets_folder = None
        if self.cgroup:
            self.cgroup.remove()

    @property
    def files_did_not_fit(self):
        return self.poll() == FILES_DO_NOT_FIT


_servers = {}    # (package, environment, memory) -> KernelServer, most recently used last
_lock = threading.Lock()


def _forget_in_child():
    """A process forked from this one starts servers of its own: this one's pipes to its zygotes are not its to use."""
    global _lock
    _servers.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def server_for(limits, env, package, timeout, preload=()):
    """This process's zygote for kernels that see ``package`` with ``env``, under ``limits``' memory, with ``preload``
    imported too; started on first use (raises ForkServerError when it cannot be)."""
    # What the sandbox shows (sandbox_command) also depends on the data mirror, if there is one.
    key = (str(package), tuple(sorted((env or {}).items())), limits.memory_mb, os.environ.get("MULTI30K_MIRROR"),
           tuple(preload))
    with _lock:
        server = _servers.pop(key, None)
        if server is None or not server.alive:
            server = KernelServer(limits, env, package, timeout, preload)
            # At this process's exit its folder goes too (the zygote dies with the process anyway). atexit's
            # handlers do not run in multiprocessing's worker processes; its finalizers registered there do.
            multiprocessing.util.Finalize(server, server.close, exitpriority=0)
        _servers[key] = server
        while len(_servers) > MAX_SERVERS:
            _servers.pop(next(iter(_servers))).close()
        return server


def forget(server):
    """Close ``server`` and start a new one on next use (after it failed a kernel)."""
    with _lock:
        for key, kept in list(_servers.items()):
            if kept is server:
                del _servers[key]
    server.close()


def close_all():
    with _lock:
        while _servers:
            _servers.popitem()[1].close()


atexit.register(close_all)
