"""The sandbox a submission's Jupyter kernel runs in: bubblewrap (``bwrap``) plus resource limits.

Inside, the kernel sees an almost empty file system: the system (/usr, /etc, /bin, /lib*), the Python
installation and the course package ``transformer_course`` read-only, its own work directory (a copy of the
submission's files in memory, capped: nothing the kernel writes there reaches the disk), the folder of its
connection file, a private /tmp, and nothing else: not the course directory, other
students' folders, the repository (its ``solutions/`` hold the hidden tests) or /root. It has no network
(it talks to the grader over Unix sockets), its own process tree, and limits on memory and on tasks.

RLIMIT_NPROC does not bind root, not even root mapped into a user namespace, so when the grader runs as root
the sandbox is built in two steps: bwrap, as root, sets up the mounts and every namespace but the user
namespace; inside, ``setpriv`` drops to an unprivileged user and ``unshare --user`` gives that user a user
namespace of its own, in which the task count starts from zero (parallel sandboxes do not share it).
"""
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SANDBOX_USER = 65534  # "nobody": the user the kernel runs as when the grader is root
_ROOT = Path(__file__).resolve().parents[1]
# The checkout this package runs from (editable install), with solutions/: hidden. A regular install has none.
REPOSITORY = _ROOT if (_ROOT / "pyproject.toml").is_file() else None


@dataclass
class Limits:
    cell_timeout: float = 120      # seconds per cell
    total_timeout: float = 1200    # seconds per notebook, all cells together
    memory_mb: int = 4096          # address space of the kernel
    processes: int = 64            # processes and threads of the kernel's user
    output_bytes: int = 200_000    # stdout, stderr and displays kept per cell
    workdir_mb: int = 512          # the kernel's work folder: the submission's files and what it writes there


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


def package_folder():
    """The folder the course package ``transformer_course`` is imported from (None if it is not installed)."""
    spec = importlib.util.find_spec("transformer_course")
    return Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None


def _readonly_paths():
    """System folders, the Python installation and the course package: what the kernel needs to run."""
    hidden = [p for p in (Path.cwd().resolve(), REPOSITORY) if p]  # the course directory, the repository
    # sys.path[0] is the grader's script folder or the current directory, not a library: never bound.
    libraries = {Path(p).resolve() for p in sys.path[1:] if p}
    paths = [Path("/usr"), Path("/etc"), Path(sys.base_prefix), Path(sys.prefix)]
    paths += [p for p in libraries if not any(_inside(p, h) for h in hidden)]
    if package_folder():
        # An editable install points into the repository: the package folder only, never the repository.
        paths.append(package_folder())
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


def sandbox_command(command, workdir, connection_dir, limits, package=None):
    """The argv that runs ``command`` (the kernel) in the sandbox, under ``limits``, in ``workdir``.

    ``workdir`` is, inside, a tmpfs of ``limits.workdir_mb`` filled with a copy of the host's ``workdir``
    (read-only to the sandbox): a write past the cap fails in the kernel (ENOSPC), never fills the host's
    disk, and a restarted kernel starts again from the submission's files. ``connection_dir`` is bound
    read-write at its own path. Call ``hand_over`` on both first, so that the sandbox's user may use them.
    ``package``: a folder the kernel sees, read-only, in place of the course package's (stripped.py).
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
                  "--perms", "1777", "--size", str(limits.memory_mb * 2**20 // 4), "--tmpfs", "/tmp"]
    arguments += _root_links()
    readonly = _readonly_paths()
    arguments += _folders_leading_to(readonly + [workdir, connection_dir])
    for path in readonly:
        arguments += ["--ro-bind", str(path), str(path)]
    if package and package_folder():   # mounted over the package's own folder: the original is out of sight
        arguments += ["--ro-bind", str(package), str(package_folder().resolve())]
    if workdir != connection_dir:    # the same folder only in sandbox_available's check: bound as it is
        # The tmpfs belongs to root when bwrap runs as root: 0777 lets the sandbox's user fill it.
        arguments += ["--ro-bind", str(workdir), SUBMISSION_MOUNT,
                      "--perms", "0777", "--size", str(limits.workdir_mb * 2**20), "--tmpfs", str(workdir)]
        command = ["sh", "-c", _POPULATE, "sh", SUBMISSION_MOUNT, str(workdir), *command]
    arguments += ["--bind", str(connection_dir), str(connection_dir)]
    return arguments + ["--"] + drop + limited_command(command, limits)


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
