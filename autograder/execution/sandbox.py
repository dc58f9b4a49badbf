"""The sandbox a submission's Jupyter kernel runs in: bubblewrap (``bwrap``) plus resource limits.

Inside, the kernel sees an almost empty file system: the system (/usr, /etc, /bin, /lib*), the Python
installation and the course package ``transformer_course`` read-only, its own work directory (a copy of the
submission's files in memory, capped: nothing the kernel writes there reaches the disk), the folder of its
connection file read-only, with its sockets in a small folder in memory, a private /tmp in memory, and nothing
else: not the course directory, other students' folders, the repository (its ``solutions/`` hold the hidden tests)
or /root. Nothing it can write is on the host's disk: what it prints to its own stdout and stderr reaches the
kernel's log there, LOG_BYTES at most. It has no network (it talks to the grader over Unix sockets, which the
grader reaches through ``/proc``: the sandbox's root, or a folder a forked kernel hands over), its own process
tree, and limits on memory (its address space; and where the host allows it, a memory cgroup of its own that
counts all it holds, in-memory folders, memfd and shared memory included: ``MemoryCgroups``) and on tasks.

RLIMIT_NPROC does not bind root, not even root mapped into a user namespace, so when the grader runs as root
the sandbox is built in two steps: bwrap, as root, sets up the mounts and every namespace but the user
namespace; inside, ``setpriv`` drops to an unprivileged user and ``unshare --user`` gives that user a user
namespace of its own, in which the task count starts from zero (parallel sandboxes do not share it).
"""
import ast
import atexit
import functools
import json
import multiprocessing.util
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..registry import PACKAGES, package_folder

SANDBOX_USER = 65534  # "nobody": the user the kernel runs as when the grader is root
_ROOT = Path(__file__).resolve().parents[2]   # autograder/execution/sandbox.py: the folder above autograder/
# The checkout this package runs from (editable install), with solutions/: hidden. A regular install has none.
REPOSITORY = _ROOT if (_ROOT / "pyproject.toml").is_file() else None


COURSE_CONFIG = Path(__file__).parents[1] / "nbgrader_config.py"   # the course's nbgrader configuration


def configured_cell_timeout(config=COURSE_CONFIG):
    """The number the course's configuration gives ``c.Execute.timeout``: the seconds a cell may run, in plain
    nbgrader and in the course's grader alike (stated there once). Read without running the file: a number."""
    for node in ast.walk(ast.parse(Path(config).read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["c.Execute.timeout"]
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float))):
            return float(node.value.value)
    raise ValueError(f"{config} does not set c.Execute.timeout to a number of seconds")


CELL_TIMEOUT = configured_cell_timeout()   # grade's default is the course directory's own configuration's


@dataclass
class Limits:
    cell_timeout: float = CELL_TIMEOUT   # seconds per cell
    total_timeout: float = 1200    # seconds per notebook, all cells together
    memory_mb: int = 4096          # address space of the kernel
    processes: int = 64            # processes and threads of the kernel's user
    output_bytes: int = 200_000    # stdout, stderr and displays kept per cell, as the notebook's file stores them
    workdir_mb: int = 512          # the kernel's work folder: the submission's files and what it writes there


# The folder, in the kernel's connection folder, that holds its sockets: in the sandbox, a tmpfs of RUNTIME_MB.
RUNTIME = "run"
RUNTIME_MB = 1
LOG_BYTES = 64 * 2**10   # of what a kernel writes to its own stdout and stderr, kept in its log on the host's disk


def folder_sizes(limits):
    """The sizes in MB of the kernel's folders in memory, {"tmp", "shm", "work"}: /tmp a quarter of its memory limit,
    /dev/shm an eighth, its work folder Limits.workdir_mb, an eighth at most; together half of the limit at most.
    Where the kernel has a memory cgroup they count against the limit as well (with all else it holds); where it
    has none, this is what bounds them."""
    eighth = max(limits.memory_mb // 8, 1)
    return {"tmp": 2 * eighth, "shm": eighth, "work": min(limits.workdir_mb, eighth)}


def kernel_environment(workdir, env=None, scratch="/tmp"):
    """The kernel's whole environment: nothing of the grader's own, plus the caller's ``env``.
    ``scratch`` takes IPython's and matplotlib's files (the sandbox's private /tmp)."""
    environment = {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        # One thread each, so that parallel submissions get a core each and comparable timings.
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        # Caches and IPython's history stay out of the submission's folder.
        "IPYTHONDIR": os.path.join(scratch, "ipython"),
        "MPLCONFIGDIR": os.path.join(scratch, "matplotlib"),
        "XDG_CACHE_HOME": os.path.join(scratch, "cache"),
    }
    if os.environ.get("MULTI30K_MIRROR"):
        environment["MULTI30K_MIRROR"] = os.environ["MULTI30K_MIRROR"]
    environment.update(env or {})
    return environment


def limited_command(command, limits):
    """``command`` under the memory and task limits (prlimit execs it, so its pid is the command's)."""
    memory = limits.memory_mb * 2**20
    return ["prlimit", f"--as={memory}", f"--nproc={limits.processes}", "--", *command]


def _inside(path, folder):
    return path == folder or folder in path.parents


def _readonly_paths():
    """System folders, the Python installation and the course package: what the kernel needs to run."""
    hidden = [p for p in (Path.cwd().resolve(), REPOSITORY) if p]  # the course directory, the repository
    # sys.path[0] is the grader's script folder or the current directory, not a library: never bound.
    libraries = {Path(p).resolve() for p in sys.path[1:] if p}
    paths = [Path("/usr"), Path("/etc"), Path(sys.base_prefix), Path(sys.prefix)]
    paths += [p for p in libraries if not any(_inside(p, h) for h in hidden)]
    # An editable install points into the repository: the packages' folders only, never the repository.
    paths += [package_folder(name) for name in PACKAGES if package_folder(name)]
    if os.environ.get("MULTI30K_MIRROR"):
        paths.append(Path(os.environ["MULTI30K_MIRROR"]))
    kept = []
    for path in sorted({p.resolve() for p in paths if p.exists()}, key=lambda p: len(p.parts)):
        # An ancestor of the current directory or the repository (/, /home) would show them; a folder
        # already bound needs no second bind.
        if not any(_inside(h, path) for h in hidden) and not any(_inside(path, k) for k in kept):
            kept.append(path)
    return kept


def _root_links():
    """/bin, /sbin and /lib*: symlinks into /usr on merged-/usr systems, folders elsewhere."""
    arguments = []
    for path in sorted(Path("/").glob("lib*")) + [Path("/bin"), Path("/sbin")]:
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            arguments += ["--ro-bind", str(path), str(path)]
    return arguments


def _folders_leading_to(mount_points):
    """``--dir`` for each folder on the way to a mount point: bwrap run as root would make them 0700,
    and the kernel could not get through them. Mount points themselves exist already."""
    arguments, made = [], {Path("/"), Path("/tmp")}
    for path in mount_points:
        for folder in reversed(path.parents):
            if folder not in made and not any(_inside(folder, m) for m in mount_points):
                arguments += ["--perms", "0755", "--dir", str(folder)]
                made.add(folder)
    return arguments


# Where the sandbox shows the submission's files, read-only, to copy them into the capped work folder.
SUBMISSION_MOUNT = "/.submission"
# The exit status of a kernel whose submission's files do not fit in its work folder (Limits.workdir_mb).
FILES_DO_NOT_FIT = 111
# Copies them, then execs the kernel (same pid). cp -R copies links as links and never follows them.
_POPULATE = f'cp -R -- "$1/." "$2" || exit {FILES_DO_NOT_FIT}; shift 2; exec "$@"'


def sandbox_command(command, workdir, connection_dir, limits, package=None, info_fd=None, cgroup=None):
    """The argv that runs ``command`` (the kernel) in the sandbox, under ``limits``, in ``workdir``.

    ``workdir`` is, inside, a tmpfs (``folder_sizes``) filled with a copy of the host's ``workdir``
    (read-only to the sandbox): a write past the cap fails in the kernel (ENOSPC), never fills the host's
    disk, and a restarted kernel starts again from the submission's files. ``connection_dir`` is bound
    read-only at its own path, its folder RUNTIME a tmpfs of RUNTIME_MB for the kernel's sockets (the grader
    reaches them through ``/proc/PID/root``, PID the sandbox's, which bubblewrap writes to ``info_fd``).
    The kernel server's zygote and sandbox_available's check give one folder as both: it is bound read-write
    (the zygote writes its kernels' logs there, capped). Call ``hand_over`` on both first, so that the
    sandbox's user may use them. ``package``: a folder the kernel sees, read-only, in place of the course
    package's (stripped.py). ``cgroup``: a KernelCgroup the whole sandbox runs in.
    """
    workdir, connection_dir = Path(workdir).resolve(), Path(connection_dir).resolve()
    arguments = ["bwrap"]
    if os.geteuid() == 0:
        # No user namespace from bwrap (it would map root only): the one below, as the unprivileged user.
        arguments += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                      "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        # unshare changes directory too: as root without CAP_DAC_OVERRIDE, bwrap may not enter the workdir.
        drop = ["setpriv", f"--reuid={SANDBOX_USER}", f"--regid={SANDBOX_USER}", "--clear-groups",
                "unshare", "--user", "--map-current-user", f"--wd={workdir}"]
    else:
        arguments += ["--unshare-all", "--chdir", str(workdir)]
        drop = []
    arguments += ["--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
                  # /tmp lives in memory, outside the address-space limit: capped separately.
                  "--perms", "1777", "--size", str(folder_sizes(limits)["tmp"] * 2**20), "--tmpfs", "/tmp"]
    arguments += ["--info-fd", str(info_fd)] if info_fd is not None else []
    arguments += _root_links()
    readonly = _readonly_paths()
    arguments += _folders_leading_to(readonly + [workdir, connection_dir])
    for path in readonly:
        arguments += ["--ro-bind", str(path), str(path)]
    for name in PACKAGES if package else ():   # each over the package's own folder: the original is out of sight
        if package_folder(name):
            arguments += ["--ro-bind", str(Path(package) / name), str(package_folder(name).resolve())]
    if workdir != connection_dir:    # the same folder only in sandbox_available's check: bound as it is
        # The tmpfs belongs to root when bwrap runs as root: 0777 lets the sandbox's user fill it.
        arguments += ["--ro-bind", str(workdir), SUBMISSION_MOUNT,
                      "--perms", "0777", "--size", str(folder_sizes(limits)["work"] * 2**20), "--tmpfs", str(workdir)]
        command = ["sh", "-c", _POPULATE, "sh", SUBMISSION_MOUNT, str(workdir), *command]
        arguments += ["--ro-bind", str(connection_dir), str(connection_dir), "--perms", "0777",
                      "--size", str(RUNTIME_MB * 2**20), "--tmpfs", str(connection_dir / RUNTIME)]
    else:
        arguments += ["--bind", str(connection_dir), str(connection_dir)]
    arguments += ["--"] + drop + limited_command(command, limits)
    # The grader's own shell puts itself in the cgroup, then becomes bubblewrap: all the sandbox starts there.
    return ["sh", "-c", 'echo 0 > "$0" && exec "$@"', str(cgroup.procs), *arguments] if cgroup else arguments


def sandbox_root(info, until):
    """``/proc/PID/root`` of the sandbox whose bubblewrap writes to the pipe ``info`` (read end; closed here), the
    sandbox's file system as the grader reaches it; None when bubblewrap says nothing by ``until``."""
    text = b""
    try:
        while time.monotonic() < until and select.select([info], [], [], max(until - time.monotonic(), 0))[0]:
            chunk = os.read(info, 4096)
            if not chunk:
                break
            text += chunk
    finally:
        os.close(info)
    try:
        return f"/proc/{int(json.loads(text)['child-pid'])}/root"
    except (ValueError, KeyError, TypeError):
        return None


def drain(source, log_path, limit=LOG_BYTES):
    """Copy what a kernel writes to the pipe ``source`` (a file object: its stdout and stderr) to the file at
    ``log_path``, ``limit`` bytes at most, in a thread of its own until the pipe closes; the rest is read and
    dropped, so that the kernel never blocks on it and the host's disk never gets more."""
    def copy():
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        written = 0
        try:
            with source:
                for chunk in iter(lambda: source.read1(65536), b""):
                    if written < limit:
                        written += os.write(log, chunk[:limit - written])
        finally:
            os.close(log)
    thread = threading.Thread(target=copy, daemon=True, name="kernel-log")
    thread.start()
    return thread


def hand_over(*folders):
    """Give ``folders`` (and what is in them) to the sandbox's user, when it is not the grader's own."""
    if os.geteuid() != 0:
        return
    for folder in folders:
        os.chown(folder, SANDBOX_USER, SANDBOX_USER)
        for parent, dirs, files in os.walk(folder):
            for name in dirs + files:
                os.chown(os.path.join(parent, name), SANDBOX_USER, SANDBOX_USER, follow_symlinks=False)


@functools.lru_cache(maxsize=None)
def sandbox_available():
    """Whether bubblewrap is installed and works here (user namespaces allowed, util-linux present)."""
    if not all(shutil.which(tool) for tool in ("bwrap", "prlimit", "setpriv", "unshare")):
        return False
    with tempfile.TemporaryDirectory(prefix="sandbox-check-") as folder:
        hand_over(folder)
        try:
            result = subprocess.run(sandbox_command(["true"], folder, folder, Limits()), capture_output=True,
                                    timeout=30, env=kernel_environment(folder))
        except (OSError, subprocess.TimeoutExpired):
            return False
    return result.returncode == 0


# ------------------------------------------------------------------------------------------------- memory cgroups

class CgroupUnavailable(OSError):
    pass


def _mount_points():
    """(mount point, file system type, super options) of this process's mounts."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        rest = fields[fields.index("-") + 1:]
        point = fields[4].replace("\\040", " ")
        yield point, rest[0], rest[2].split(",") if len(rest) > 2 else []


def _own_memory_cgroup():
    """This process's cgroup in cgroup v1's memory hierarchy, relative to its root ("" if it has none)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path.lstrip("/")
    return ""


def _write(path, text):
    with open(path, "w") as file:
        file.write(text)


class MemoryCgroups:
    """A cgroup of this process's (``autograder-PID``) with one memory cgroup per kernel below it: the kernel's memory
    limit counts everything its processes hold (pages, tmpfs files, memfd, shared memory, pipes: the kernel
    charges them to the cgroup), and past it the kernel is killed (all of it: memory.oom.group).

    cgroup v2 where its memory controller is enabled, below the root of the hierarchy (v2 lets no cgroup that holds
    processes, as the grader's own does, have children with controllers); else cgroup v1's memory hierarchy, below
    the grader's own cgroup there. Either needs the right to make cgroups there: in practice, a grader run as root."""

    def __init__(self):
        self.group, self.version = None, None
        self.count, self.stale = 0, []
        problems = []
        for version in (2, 1):
            try:
                self.group = self._make_group(version)
                self.version = version
                break
            except (OSError, ValueError, IndexError) as error:   # a mount table or cgroup file it cannot read
                problems.append(f"cgroup v{version}: {getattr(error, 'strerror', None) or error}")
        self.problem = None if self.group else "; ".join(problems)

    @staticmethod
    def _make_group(version):
        name = f"autograder-{os.getpid()}"
        if version == 2:
            mounts = [point for point, kind, _ in _mount_points() if kind == "cgroup2"]
            if not mounts:
                raise CgroupUnavailable("not mounted")
            root = Path(mounts[0])
            if "memory" not in (root / "cgroup.controllers").read_text().split():
                raise CgroupUnavailable("its memory controller is not enabled here (a host on cgroup v1, or a "
                                        "container without it)")
            if "memory" not in (root / "cgroup.subtree_control").read_text().split():
                # Enabling it there would change the whole machine's cgroups: not the grader's to do.
                raise CgroupUnavailable("its memory controller is not enabled for the root's children")
            group = root / name
            group.mkdir()
            try:
                _write(group / "cgroup.subtree_control", "+memory")
            except OSError:
                group.rmdir()
                raise
            return group
        mounts = [point for point, kind, options in _mount_points() if kind == "cgroup" and "memory" in options]
        if not mounts:
            raise CgroupUnavailable("no memory hierarchy mounted")
        own = Path(mounts[0]) / _own_memory_cgroup()
        group = (own if own.is_dir() else Path(mounts[0])) / name
        group.mkdir()
        return group

    def kernel(self, memory_mb):
        """A new kernel's cgroup, with ``memory_mb`` as its limit (None where there are no cgroups)."""
        if self.group is None:
            return None
        self.stale = [cgroup for cgroup in self.stale if not cgroup.remove()]
        self.count += 1
        return KernelCgroup(self.group / f"k{self.count}", self.version, memory_mb * 2**20, self)

    def close(self):
        if self.group is not None:
            for cgroup in self.stale:
                cgroup.remove(wait=1)
            try:
                self.group.rmdir()
            except OSError:
                pass


class KernelCgroup:
    """One kernel's memory cgroup. ``procs``: the file that a process writes 0 to, to move itself there."""

    def __init__(self, path, version, limit, owner):
        self.path, self.owner = path, owner
        path.mkdir()
        try:
            if version == 2:
                _write(path / "memory.max", str(limit))
                _write(path / "memory.oom.group", "1")      # past the limit, every process of the kernel dies
                self._try(path / "memory.swap.max", "0")    # none swapped out either
            else:
                _write(path / "memory.limit_in_bytes", str(limit))
                self._try(path / "memory.memsw.limit_in_bytes", str(limit))   # memory and swap together
        except OSError:
            path.rmdir()
            raise
        self.procs = path / "cgroup.procs"

    @staticmethod
    def _try(path, text):
        try:
            _write(path, text)
        except OSError:
            pass   # no swap accounting here: nothing to limit

    def open_procs(self):
        """``procs`` opened for writing: a process that gets this descriptor (it is the grader's right to move a
        process there) moves itself by writing 0 to it."""
        return os.open(self.procs, os.O_WRONLY | os.O_CLOEXEC)

    def remove(self, wait=0.5):
        """Remove the cgroup once its processes are gone (within ``wait`` seconds); whether it is gone. One that
        is not yet empty is tried again later."""
        until = time.monotonic() + wait
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= until:
                    if self not in self.owner.stale:
                        self.owner.stale.append(self)
                    return False
                time.sleep(0.01)


_cgroups = None
_cgroups_lock = threading.Lock()


def memory_cgroups():
    """This process's MemoryCgroups (made on first use; ``problem`` says why there are none)."""
    global _cgroups
    with _cgroups_lock:
        if _cgroups is None:
            _cgroups = MemoryCgroups()
            # At this process's exit its cgroup goes too; multiprocessing's workers run its finalizers, not atexit's.
            multiprocessing.util.Finalize(_cgroups, _cgroups.close, exitpriority=-1)
            atexit.register(_cgroups.close)
        return _cgroups


def _forget_cgroups_in_child():
    """A process forked from this one makes cgroups of its own."""
    global _cgroups, _cgroups_lock
    _cgroups, _cgroups_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_cgroups_in_child)


def memory_accounting():
    """One line on how a kernel's memory is counted on this machine: for the start of a grading run."""
    cgroups = memory_cgroups()
    if cgroups.group is not None:
        return (f"memory: each kernel in a memory cgroup of its own (cgroup v{cgroups.version}): all it holds counts "
                f"against --memory, memfd, shared memory and its in-memory folders included")
    return (f"memory: NO memory cgroup per kernel here ({cgroups.problem}): a kernel's address space and its in-memory "
            f"folders are capped, but memory it holds outside them (memfd, System V shared memory, pipes) is not "
            f"counted (docs/instructors.md: what holds where it does not)")
