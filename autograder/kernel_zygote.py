"""The fork server's zygote: one process in the grader's sandbox that imports what kernels import, then forks a
kernel per request, each kept from the others (autograder/kernel_server.py starts it and talks to it).

Never imported: the grader runs this file's text as ``python -I -c <text> <base folder> <module>...``. The
kernels' folders are under the base folder, the only folder of the host the zygote can write to. It reads
requests, one JSON object a line, on stdin and answers on stdout:

    {"start": id, "env": {...}, "memory_mb": n, "processes": n, "workdir_mb": n, "files_do_not_fit": status}
                                                                                    ->  {"started": id}
    {"kill": id}                                                                    (no answer)
    and whenever a kernel has ended:                                                {"exited": id, "status": n}

Each kernel is forked from the zygote, and forks twice more. The first child makes the kernel's user, mount, PID,
network, IPC and UTS namespaces, sets its task limit there (counted in that namespace: a kernel that spends its
tasks leaves the others theirs) and waits for the second, PID 1 of the new PID namespace, so that everything the
kernel starts dies with it. The second mounts a private /tmp and /dev/shm, brings the loopback interface up, puts
a capped tmpfs on its work folder and copies the submission's files into it, hides the other kernels' folders,
covers /proc but for the files about the machine (a procfs of its own cannot be mounted in the sandbox: EPERM),
drops every capability and forks the kernel, PID 2, which starts ipykernel. A step that fails ends the kernel
before it answers: the grader sees a kernel that did not start.
"""
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


def _own_namespaces(libc, request):
    """Namespaces of the kernel's own; returns in the kernel, PID 1 of its PID namespace, while this process
    waits for it and ends with it."""
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
    """A private /tmp and /dev/shm, of the kernels' folders only its own, and /proc covered. What the sandbox
    bound under /tmp is held aside while /tmp is covered, and bound back (read-only as it was)."""
    scratch = max(request["memory_mb"] // 4, 1)   # as the sandbox's /tmp: in memory, outside the address-space limit
    kept = [own] + _mounts_under("/tmp", base)
    _mount(libc, "none", "/", flags=MS_REC | MS_PRIVATE)
    _tmpfs(libc, "/dev/shm", scratch)
    held = [f"/dev/shm/.held{number}" for number in range(len(kept))]
    for path, place in zip(kept, held):
        os.mkdir(place)
        _mount(libc, path, place, flags=MS_BIND | MS_REC)
    _tmpfs(libc, "/tmp", scratch)
    if os.path.isdir(base):                               # still in sight when it is not under /tmp
        _tmpfs(libc, base, 1, mode="755")
    for path, place in zip(kept, held):
        os.makedirs(path, exist_ok=True)
        _mount(libc, place, path, flags=MS_MOVE)
        os.rmdir(place)
    _cover_proc(libc)


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


def _kernel(base, request, zygote_alive):
    """In the first child: set up the kernel's isolation, then run ipykernel (never returns)."""
    libc = _libc()
    own = os.path.join(base, request["start"])
    log = os.open(os.path.join(own, "kernel.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (log, 1), (log, 2)):    # never the zygote's pipes to the grader
        os.dup2(fd, target)
    _die_with_parent(libc, zygote_alive)
    for fd in (null, log, zygote_alive):
        os.close(fd)
    _own_namespaces(libc, request)
    _private_mounts(libc, base, own, request)
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


class Zygote:
    def __init__(self, base):
        self.base, self.kernels, self.pending = base, {}, b""   # kernels: first child's pid -> id
        # Held open here only: a kernel forked before the zygote died sees EOF on it, and stops.
        self.alive, self.holding = os.pipe()

    def serve(self):
        while True:
            if select.select([0], [], [], 0.05)[0]:
                chunk = os.read(0, 65536)
                if not chunk:
                    return   # the grader is gone
                *lines, self.pending = (self.pending + chunk).split(b"\n")
                for line in lines:
                    self.handle(json.loads(line))
            self.reap()

    def handle(self, request):
        if "kill" in request:
            for pid, kernel_id in self.kernels.items():
                if kernel_id == request["kill"]:
                    os.kill(pid, signal.SIGKILL)
            return
        pid = os.fork()
        if pid == 0:
            os.close(self.holding)
            try:
                _kernel(self.base, request, self.alive)
            except BaseException as error:   # noqa: BLE001 -- anything: the kernel must not start, and says why
                print(f"the kernel's isolation could not be set up: {error!r}", file=sys.stderr, flush=True)
            os._exit(1)
        self.kernels[pid] = request["start"]
        _say({"started": request["start"]})

    def reap(self):
        while self.kernels:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            _say({"exited": self.kernels.pop(pid), "status": os.waitstatus_to_exitcode(status)})


def _say(message):
    os.write(1, (json.dumps(message) + "\n").encode())


def main(base, modules):
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:   # e.g. the oracles, in a package that has none
            pass
    _say({"ready": True})
    Zygote(base).serve()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
