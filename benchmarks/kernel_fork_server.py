"""What a fork server would give the grader: kernels forked, ready, from one sandboxed process with the imports
done, each kept apart from the others. A prototype measured here, not the grader's code.

    python benchmarks/kernel_fork_server.py                 # about 30 s; needs bubblewrap, as the grader does
    python benchmarks/kernel_fork_server.py --kernels 8

Today every sandboxed kernel starts Python and ipykernel and imports torch and the course: about 2.5 s before
a notebook's first cell on a 2-core machine. Here one process (the zygote) starts in the grader's sandbox
(autograder/sandbox.py, with the course package), imports ipykernel, torch, matplotlib and the course, then
forks a kernel per request. Each fork makes its own user, mount, PID, network, IPC and UTS namespaces, mounts
a private /tmp and /dev/shm, hides the other kernels' folders and covers /proc but for cpuinfo, meminfo and
stat, which describe the machine, not its processes (mounting a procfs of its own fails with EPERM inside
bwrap's sandbox, likely because bwrap's /proc has read-only mounts over /proc/sys and others), takes its own
task limit, drops every capability and starts ipykernel. The script prints the seconds from the fork request
to the kernel's first reply, and what one kernel can see of another. The course reads nothing else of /proc
(devices.py reads cpuinfo; so does torch); code that reads /proc/self would fail here, where today's sandbox
has it. The zygote's own task limit counts every kernel's tasks: it is set for all of them, and each kernel
gets its own below it.
"""
import argparse
import ctypes
import os
import resource
import sys
import time
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 1, 32, 4096, 8192, 16384, 1 << 18
MACHINE_FILES = ("cpuinfo", "meminfo", "stat")   # about the machine, none about a process; torch reads cpuinfo
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, LINUX_CAPABILITY_VERSION_3 = 24, 38, 0x20080522
KERNEL_TASKS = 64          # autograder.sandbox.Limits.processes: each kernel's own, in its own user namespace


# ----------------------------------------------------------------------------- the zygote, in the sandbox

def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _call(result, what):
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(libc, source, target, fstype=None, flags=0, options=None):
    _call(libc.mount(source.encode(), target.encode(), fstype and fstype.encode(), flags,
                     options and options.encode()), f"mount {target}")


def _drop_capabilities(libc):
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    for capability in range(64):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)
    _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _call(libc.capset(ctypes.byref(Header(LINUX_CAPABILITY_VERSION_3, 0)), (Data * 2)()), "capset")


def _new_namespaces(libc):
    """Namespaces of its own; returns in the kernel, PID 1 of its PID namespace (the fork before waits for it)."""
    uid, gid = os.getuid(), os.getgid()
    _call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
          "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        Path("/proc/self", name).write_text(text)
    # Counted in this user namespace: a kernel that spends its tasks leaves the others theirs.
    resource.setrlimit(resource.RLIMIT_NPROC, (KERNEL_TASKS, KERNEL_TASKS))
    child = os.fork()
    if child:
        _, status = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _private_mounts(libc, kernels, own):
    """A private /tmp and /dev/shm, /proc covered, and of the kernels' folders only its own."""
    _mount(libc, "none", "/", flags=MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", "/dev/shm", "tmpfs", options="size=64m,mode=1777")
    os.mkdir("/dev/shm/.own")
    _mount(libc, own, "/dev/shm/.own", flags=MS_BIND)     # held while what was around it is covered
    _mount(libc, "tmpfs", "/tmp", "tmpfs", options="size=64m,mode=1777")
    if os.path.isdir(kernels):                            # still in sight when it is not under /tmp
        _mount(libc, "tmpfs", kernels, "tmpfs", options="size=1m,mode=755")
    os.makedirs(own)
    _mount(libc, "/dev/shm/.own", own, flags=MS_MOVE)
    os.rmdir("/dev/shm/.own")
    _cover_proc(libc)


def _cover_proc(libc):
    """/proc covered by an empty folder, but for the files about the machine (no process's), bound back."""
    for name in MACHINE_FILES:
        Path("/dev/shm", name).touch()
        _mount(libc, f"/proc/{name}", f"/dev/shm/{name}", flags=MS_BIND)
    _mount(libc, "tmpfs", "/proc", "tmpfs", options="size=4k,mode=755")
    for name in MACHINE_FILES:
        Path("/proc", name).touch()
        _mount(libc, f"/dev/shm/{name}", f"/proc/{name}", flags=MS_MOVE)
        os.remove(f"/dev/shm/{name}")
    _mount(libc, "none", "/proc", flags=MS_REMOUNT | MS_RDONLY)


def _kernel(kernels, kernel_id):
    import ipykernel.kernelapp

    libc = _libc()
    os.setsid()
    own = os.path.join(kernels, kernel_id)
    _new_namespaces(libc)
    _private_mounts(libc, kernels, own)
    _drop_capabilities(libc)
    log = os.open(os.path.join(own, "kernel.log"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(own)
    app = ipykernel.kernelapp.IPKernelApp.instance(connection_file=os.path.join(own, "kernel.json"))
    app.initialize([])
    app.start()


def zygote(kernels):
    """Import what every kernel imports, then fork a kernel for each id read on stdin."""
    started = time.perf_counter()
    import ipykernel.kernelapp  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401

    import transformer_course  # noqa: F401
    print(f"imported {time.perf_counter() - started:.2f}", flush=True)
    for line in sys.stdin:
        if os.fork() == 0:
            try:
                _kernel(kernels, line.strip())
            except BaseException:
                import traceback
                traceback.print_exc()
            os._exit(1)
        print("forked", flush=True)


# ----------------------------------------------------------------------------- the grader's side

class Zygote:
    """The zygote in the grader's sandbox, and kernels forked from it."""

    def __init__(self, kernels):
        import subprocess

        from autograder.sandbox import Limits, hand_over, kernel_environment, sandbox_command

        self.kernels, self.hand_over = kernels, hand_over
        hand_over(kernels)
        # The zygote's own task limit must leave room for every kernel's: theirs are counted in its too.
        command = [sys.executable, "-I", "-c", Path(__file__).read_text(), "--zygote", kernels]
        started = time.perf_counter()
        self.process = subprocess.Popen(sandbox_command(command, kernels, kernels, Limits(processes=4096)),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env=kernel_environment(kernels))
        imported = self.process.stdout.readline().split()[-1]
        print(f"zygote: started and imported in {time.perf_counter() - started:.2f} s (imports {imported} s)")

    def start(self, kernel_id):
        """A kernel's client, and the seconds from the fork request to the kernel's first reply."""
        import secrets

        from jupyter_client.blocking import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        folder = os.path.join(self.kernels, kernel_id)
        os.mkdir(folder)
        connection = os.path.join(folder, "kernel.json")
        write_connection_file(connection, transport="ipc", ip=os.path.join(folder, "ipc"),
                              key=secrets.token_hex(16).encode())
        self.hand_over(folder)
        started = time.perf_counter()
        self.process.stdin.write(kernel_id + "\n")
        self.process.stdin.flush()
        self.process.stdout.readline()
        client = BlockingKernelClient(connection_file=connection)
        client.load_connection_file()
        client.start_channels(stdin=False, hb=False)
        client.wait_for_ready(timeout=30)
        return client, time.perf_counter() - started

    def close(self):
        self.process.kill()
        self.process.wait()


def printed(client, code):
    """What `code` printed in the kernel (its error, if it raised)."""
    out = []

    def keep(message):
        if message["msg_type"] == "stream":
            out.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            out.append(f"{message['content']['ename']}: {message['content']['evalue']}")
    client.execute_interactive(code, timeout=60, output_hook=keep)
    return "".join(out).strip()


LOOK = """import os, ctypes, torch
torch.ones(64, 64) @ torch.ones(64, 64)    # torch reads /proc/cpuinfo at its first operation
print('pid', os.getpid(), '| /tmp', sorted(os.listdir('/tmp')), '| /dev/shm', os.listdir('/dev/shm'),
      '| kernels', os.listdir({kernels!r}), '| /proc', os.listdir('/proc'),
      '| unshare', 'refused' if ctypes.CDLL(None).unshare(0x10000000) else 'allowed')"""
THREADS = """import threading, time
started = 0
try:
    for _ in range(500):
        threading.Thread(target=time.sleep, args=({seconds},), daemon=True).start()
        started += 1
except RuntimeError:
    pass
print(started, 'threads')"""


def isolation(zygote, clients):
    """What the second kernel sees of the first, and whether one kernel's spent task limit stops the others."""
    first, second = clients[0], clients[1]
    printed(first, "open('/tmp/mine', 'w').write('x'); open('/dev/shm/mine', 'w').write('x')")
    print("the second kernel sees:", printed(second, LOOK.format(kernels=zygote.kernels)))
    print("the first kernel starts", printed(first, THREADS.format(seconds=30)), "before its task limit stops it")
    print("then the second starts", printed(second, THREADS.format(seconds=1).replace("500", "20")))
    client, seconds = zygote.start("after")
    print(f"and a new kernel is ready in {seconds:.2f} s:", printed(client, "print('ok')"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=5, help="kernels to fork and time (default 5)")
    parser.add_argument("--zygote", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.zygote:
        return zygote(args.zygote)
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from autograder.sandbox import sandbox_available
    if not sandbox_available():
        sys.exit("bubblewrap (bwrap) is not installed or does not work here: the sandbox cannot be measured")
    with tempfile.TemporaryDirectory(prefix="kernels-") as kernels:
        zygote_ = Zygote(kernels)
        try:
            clients, seconds = zip(*(zygote_.start(f"k{i}") for i in range(max(args.kernels, 2))))
            print("fork request to first reply:", ", ".join(f"{s:.2f}" for s in seconds), "s")
            isolation(zygote_, clients)
        finally:
            zygote_.close()


if __name__ == "__main__":
    main()
