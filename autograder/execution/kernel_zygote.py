"""The fork server's zygote: one process in the grader's sandbox that imports what kernels import, then forks a
kernel per request, each kept from the others (autograder/execution/kernel_server.py starts it and talks to it).

Never imported: the grader runs this file's text as ``python -I -c <text> <base folder> <module>...``. The
kernels' folders are under the base folder, the only folder of the host the zygote can write to. It talks with the
grader over a Unix socket (SOCK_SEQPACKET, its stdin): one JSON object a message, with file descriptors along:

    {"start": id, "env": {...}, "memory_mb": n, "processes": n, "workdir_mb": n, "tmp_mb": n, "shm_mb": n,
     "runtime": name, "runtime_mb": n, "log_bytes": n, "files_do_not_fit": status}
        with the kernel's cgroup.procs, open for writing, if it has a memory cgroup
                                                            ->  {"started": id}, with its sockets' folder (O_PATH)
    {"kill": id}                                                (no answer)
    and whenever a kernel has ended:                            {"exited": id, "status": n}

Each kernel is forked from the zygote, and forks twice more. The first child moves itself into the kernel's memory
cgroup (the grader's descriptor lets it; before anything else, so that all the kernel holds counts there), makes
the kernel's user, mount, PID, network, IPC and UTS namespaces, sets its task limit there (counted in that
namespace: a kernel that spends its tasks leaves the others theirs) and waits for the second, PID 1 of the new PID
namespace, so that everything the kernel starts dies with it. The second mounts a private /tmp and /dev/shm,
hides the other kernels' folders, mounts a small tmpfs on the folder for the kernel's sockets and makes the rest
of its folder (its connection file) read-only: nothing the kernel can write is on the host's disk. It covers /proc
but for the files about the machine (a procfs of its own cannot be mounted in the sandbox: EPERM), hands the
sockets' folder to the zygote, which hands it to the grader (the grader reaches the sockets through
/proc/self/fd/N), brings the loopback interface up, puts a capped tmpfs on its work folder and copies the
submission's files into it, drops every capability and forks the kernel, PID 2, which starts ipykernel. All of them
write their stdout and stderr into a pipe that the zygote copies to the kernel's log, ``log_bytes`` at most. A step
that fails ends the kernel: the grader sees a kernel that did not start.
"""
import array
import ctypes
import fcntl
import importlib
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import struct
import sys
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 1, 32, 4096, 8192, 16384, 1 << 18
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 2, 4, 8, 1024, 2048, 1 << 21
CHANNEL = 0   # the socket to the grader
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, LINUX_CAPABILITY_VERSION_3 = 1, 24, 38, 0x20080522
MACHINE_FILES = ("cpuinfo", "meminfo", "stat")   # about the machine, none about a process; torch reads cpuinfo
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP, IFREQ = 0x8913, 0x8914, 1, "16sh22x"   # struct ifreq: a name and flags


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _call(result, what):
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(libc, source, target, fstype=None, flags=0, options=None):
    _call(libc.mount(source.encode(), target.encode(), fstype and fstype.encode(), flags,
                     options and options.encode()), f"mount {target}")


def _tmpfs(libc, target, megabytes, mode="1777"):
    _mount(libc, "tmpfs", target, "tmpfs", options=f"size={megabytes}m,mode={mode}")


def _die_with_parent(libc, alive):
    """SIGKILL when the parent dies; ``alive``: a pipe only the parent writes to, at EOF if it died already."""
    _call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl PDEATHSIG")
    if select.select([alive], [], [], 0)[0]:
        os._exit(1)


def _own_namespaces(libc, request, report):
    """Namespaces of the kernel's own; returns in the kernel, PID 1 of its PID namespace, while this process
    waits for it and ends with it (``report``: a descriptor only PID 1 keeps)."""
    uid, gid = os.getuid(), os.getgid()
    _call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
          "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        Path("/proc/self", name).write_text(text)
    resource.setrlimit(resource.RLIMIT_NPROC, (request["processes"], request["processes"]))
    alive, holding = os.pipe()
    child = os.fork()
    if child:
        os.close(alive)
        os.close(report)
        _, status = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    os.close(holding)
    _die_with_parent(libc, alive)
    os.close(alive)


def _loopback_up():
    """The network namespace's loopback up, as in the sandbox's (bubblewrap's): 127.0.0.1 refuses, it is not
    unreachable."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        flags = struct.unpack(IFREQ, fcntl.ioctl(probe, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _mounts_under(folder, leaving_out):
    """The outermost mount points under ``folder``, but ``leaving_out`` and what is in it: what the sandbox bound
    there (the Python installation, the course package or its stripped copy, when they live under /tmp)."""
    points = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])  # \040: a space
        if _inside(point, folder) and point != folder and not _inside(point, leaving_out):
            points.add(point)
    return [p for p in points if not any(_inside(p, q) and p != q for q in points)]


def _private_mounts(libc, base, own, request):
    """A private /tmp and /dev/shm, of the kernels' folders only its own, read-only but for a tmpfs for its sockets,
    and /proc covered. What the sandbox bound under /tmp is held aside while /tmp is covered, and bound back
    (read-only as it was)."""
    kept = [own] + _mounts_under("/tmp", base)
    _mount(libc, "none", "/", flags=MS_REC | MS_PRIVATE)
    _tmpfs(libc, "/dev/shm", request["shm_mb"])   # in memory, outside the address-space limit: capped (sandbox.py)
    held = [f"/dev/shm/.held{number}" for number in range(len(kept))]
    for path, place in zip(kept, held):
        os.mkdir(place)
        _mount(libc, path, place, flags=MS_BIND | MS_REC)
    _tmpfs(libc, "/tmp", request["tmp_mb"])
    if os.path.isdir(base):                               # still in sight when it is not under /tmp
        _tmpfs(libc, base, 1, mode="755")
    for path, place in zip(kept, held):
        os.makedirs(path, exist_ok=True)
        _mount(libc, place, path, flags=MS_MOVE)
        os.rmdir(place)
    _tmpfs(libc, os.path.join(own, request["runtime"]), request["runtime_mb"], mode="700")
    _read_only(libc, own)   # its connection file and its log: the host's disk, which the kernel never writes
    _cover_proc(libc)


def _read_only(libc, path):
    """The mount at ``path`` made read-only, with the flags the sandbox locked on it kept (or the kernel refuses)."""
    flags = os.statvfs(path).f_flag
    kept = flags & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)   # ST_* and MS_* agree on these
    _mount(libc, "none", path, flags=MS_REMOUNT | MS_BIND | MS_RDONLY | kept | (MS_RELATIME if flags & 4096 else 0))


def _hand_over_sockets(own, request, report):
    """The folder for the kernel's sockets, to the zygote (and on to the grader), over ``report`` (closed here)."""
    folder = os.open(os.path.join(own, request["runtime"]), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    with socket.socket(fileno=report) as channel:
        socket.send_fds(channel, [b"sockets"], [folder])
    os.close(folder)


def _cover_proc(libc):
    """/proc covered by an empty folder, but for the files about the machine (no process's), bound back."""
    for name in MACHINE_FILES:
        Path("/dev/shm", name).touch()
        _mount(libc, f"/proc/{name}", f"/dev/shm/{name}", flags=MS_BIND)
    _tmpfs(libc, "/proc", 1, mode="755")
    for name in MACHINE_FILES:
        Path("/proc", name).touch()
        _mount(libc, f"/dev/shm/{name}", f"/proc/{name}", flags=MS_MOVE)
        os.remove(f"/dev/shm/{name}")
    _mount(libc, "none", "/proc", flags=MS_REMOUNT | MS_RDONLY)


def _fill_work_folder(libc, own, megabytes, files_do_not_fit):
    """The work folder: a tmpfs of ``megabytes`` with a copy of the submission's files, whose own folder is then
    covered (its files are the host's: the kernel writes to its copy only)."""
    work, files = os.path.join(own, "work"), os.path.join(own, "files")
    _tmpfs(libc, work, megabytes, mode="755")
    try:
        shutil.copytree(files, work, symlinks=True, dirs_exist_ok=True)
    except (OSError, shutil.Error) as error:
        print(f"the submission's files do not fit in the kernel's work folder ({megabytes} MB): {error}",
              file=sys.stderr, flush=True)
        os._exit(files_do_not_fit)
    _tmpfs(libc, files, 1, mode="555")
    _mount(libc, "none", files, flags=MS_REMOUNT | MS_RDONLY)
    return work


def _drop_capabilities(libc):
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    for capability in range(64):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)
    _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _call(libc.capset(ctypes.byref(Header(LINUX_CAPABILITY_VERSION_3, 0)), (Data * 2)()), "capset")


def _init_of_namespace():
    """Returns in the kernel, PID 2, while this process stays PID 1 of the namespace: it reaps what the kernel
    leaves behind and ends when the kernel does (PID 1 ignores signals it has no handler for, even SIGKILL sent
    from its own namespace: the kernel must not be it, or os.kill(os.getpid(), 9) would not end it)."""
    kernel = os.fork()
    if kernel == 0:
        os.setsid()   # ipykernel interrupts its own process group
        return
    while True:
        pid, status = os.wait()
        if pid == kernel:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _kernel(base, request, zygote_alive, log, report, cgroup):
    """In the first child: set up the kernel's isolation, then run ipykernel (never returns). ``log``: the pipe to
    its log; ``report``: the socket its sockets' folder goes back on; ``cgroup``: its cgroup.procs, or None."""
    libc = _libc()
    own = os.path.join(base, request["start"])
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (log, 1), (log, 2)):    # never the zygote's socket to the grader
        os.dup2(fd, target)
    for fd in (null, log):
        os.close(fd)
    if cgroup is not None:   # first, so that all the kernel's processes and all they hold count there
        os.write(cgroup, b"0")
        os.close(cgroup)
    _die_with_parent(libc, zygote_alive)
    os.close(zygote_alive)
    _own_namespaces(libc, request, report)
    _private_mounts(libc, base, own, request)
    _hand_over_sockets(own, request, report)
    _loopback_up()
    work = _fill_work_folder(libc, own, request["workdir_mb"], request["files_do_not_fit"])
    memory = request["memory_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    _drop_capabilities(libc)
    _init_of_namespace()
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(work)
    connection_file = os.path.join(own, "kernel.json")
    sys.argv = ["ipykernel_launcher", "-f", connection_file]
    from ipykernel import kernelapp
    kernelapp.launch_new_instance(["-f", connection_file])
    os._exit(0)


class _Running:
    """A kernel the zygote started: its id, its log (a file on the host's disk, of ``limit`` bytes at most) and the
    pipe it writes it through, the socket its sockets' folder comes on, and how much of its log is written."""

    def __init__(self, kernel_id, log, limit, pipe, report):
        self.id, self.log, self.limit, self.pipe, self.report, self.logged = kernel_id, log, limit, pipe, report, 0

    def fds(self):
        return [fd for fd in (self.log, self.pipe, self.report) if fd is not None]


class Zygote:
    def __init__(self, base):
        self.base, self.kernels = base, {}   # kernels: first child's pid -> _Running
        # Held open here only: a kernel forked before the zygote died sees EOF on it, and stops.
        self.alive, self.holding = os.pipe()
        self.channel = socket.socket(fileno=CHANNEL)

    def serve(self):
        while True:
            owners = {fd: kernel for kernel in self.kernels.values() for fd in (kernel.pipe, kernel.report) if fd}
            for fd in select.select([CHANNEL, *owners], [], [], 0.05)[0]:
                if fd == CHANNEL:
                    data, fds = _receive(self.channel)
                    if not data:
                        return   # the grader is gone
                    self.handle(json.loads(data), fds)
                elif fd == owners[fd].pipe:
                    self.copy_log(owners[fd])
                else:
                    self.pass_sockets(owners[fd])
            self.reap()

    def handle(self, request, fds):
        if "kill" in request:
            for pid, kernel in self.kernels.items():
                if kernel.id == request["kill"]:
                    os.kill(pid, signal.SIGKILL)
            return
        own = os.path.join(self.base, request["start"])
        log = os.open(os.path.join(own, "kernel.log"), os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        pipe, writer = os.pipe()
        report, theirs = (s.detach() for s in socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))
        pid = os.fork()
        if pid == 0:
            # Of the zygote's descriptors, only what this kernel needs (the socket to the grader goes in _kernel).
            for fd in [self.holding, log, pipe, report] + [fd for k in self.kernels.values() for fd in k.fds()]:
                os.close(fd)
            try:
                _kernel(self.base, request, self.alive, writer, theirs, fds[0] if fds else None)
            except BaseException as error:   # noqa: BLE001 -- anything: the kernel must not start, and says why
                print(f"the kernel's isolation could not be set up: {error!r}", file=sys.stderr, flush=True)
            os._exit(1)
        for fd in [writer, theirs, *fds]:
            os.close(fd)
        os.set_blocking(pipe, False)
        self.kernels[pid] = _Running(request["start"], log, request["log_bytes"], pipe, report)

    def copy_log(self, kernel):
        """What the kernel wrote since, into its log while it is within its limit, else dropped."""
        while kernel.pipe is not None:
            try:
                chunk = os.read(kernel.pipe, 65536)
            except BlockingIOError:
                return
            if not chunk:
                os.close(kernel.pipe)
                kernel.pipe = None
                return
            if kernel.logged < kernel.limit:
                kernel.logged += os.write(kernel.log, chunk[:kernel.limit - kernel.logged])

    def pass_sockets(self, kernel):
        """The kernel's sockets' folder, on to the grader: the kernel has started."""
        channel = socket.socket(fileno=kernel.report)
        try:
            _, fds = _receive(channel)
        finally:
            channel.close()
            kernel.report = None
        if fds:
            _say({"started": kernel.id}, fds)
            os.close(fds[0])

    def reap(self):
        while self.kernels:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            kernel = self.kernels.pop(pid)
            self.copy_log(kernel)   # its last words: all its processes are gone
            for fd in kernel.fds():
                os.close(fd)
            _say({"exited": kernel.id, "status": os.waitstatus_to_exitcode(status)})


def _receive(channel, flags=0):
    """One message and the descriptors that came with it (socket.recv_fds, but with ``flags``: it drops them)."""
    data, ancillary, _, _ = channel.recvmsg(1 << 20, socket.CMSG_SPACE(4 * array.array("i").itemsize),
                                            flags | socket.MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _say(message, fds=()):
    with socket.socket(fileno=os.dup(CHANNEL)) as channel:
        socket.send_fds(channel, [json.dumps(message).encode()], list(fds))


def main(base, modules):
    os.dup2(2, 1)   # what a module prints goes to the zygote's log, never to the grader
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:   # e.g. the oracles, in a package that has none
            pass
    _say({"ready": True})
    Zygote(base).serve()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
