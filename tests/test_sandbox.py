"""The sandboxed executor (autograder/execution/execute.py, autograder/execution/sandbox.py) against hostile notebooks.

Each notebook is small, and so are the limits: the whole file runs in about two minutes on two busy cores.
"""
import concurrent.futures
import copy
import dataclasses
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.execution import kernel_server
from autograder.execution.execute import KernelStartError, execute_notebook
from autograder.execution.sandbox import LOG_BYTES, Limits, memory_accounting, memory_cgroups, sandbox_available

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or does not "
                                 "work on this machine (user namespaces disabled?): the sandbox cannot be tested"),
              pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[1]
LIMITS = Limits(cell_timeout=5, total_timeout=90, memory_mb=3072, processes=64, output_bytes=20_000)


def run(tmp_path, *cells, limits=LIMITS, fork=True, env=None, preload=()):
    """Execute code cells (str) or ready-made cells in a fresh workdir: (executed notebook, problems)."""
    workdir = tmp_path / "workdir"
    workdir.mkdir(exist_ok=True)
    nb = new_notebook(cells=[new_code_cell(c) if isinstance(c, str) else c for c in cells])
    return execute_notebook(nb, workdir, limits, env={"COURSE_SMOKE": "1", **(env or {})}, fork=fork, preload=preload)


def text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def errors(cell):
    return [(o.ename, o.evalue) for o in cell.outputs if o.output_type == "error"]


@pytest.mark.parametrize("fork", [True, False], ids=["forked kernel", "kernel of its own"])
def test_normal_notebook(tmp_path, fork):
    (tmp_path / "workdir").mkdir()
    (tmp_path / "workdir" / "data.txt").write_text("the student's own file")
    workdir_before = sorted(os.listdir(tmp_path / "workdir"))
    nb = new_notebook(cells=[
        new_markdown_cell("# Title"),
        new_code_cell("x = 6 * 7\nimport sys\nprint('out')\nprint('err', file=sys.stderr)"),
        new_code_cell("x"),
        new_code_cell("from IPython.display import display, Markdown\ndisplay(Markdown('**shown**'))"),
        new_code_cell("1 / 0"),
        new_code_cell("import os, torch\nprint(open('data.txt').read(), sorted(os.listdir('.')), "
                      "torch.ones(2).sum().item(), os.environ['COURSE_SMOKE'], os.environ['OMP_NUM_THREADS'])"),
        new_code_cell("print('/kernels-' in os.getcwd())"),   # a forked kernel's folder is the kernel server's
    ])
    # (a kernel of its own imports torch in the cell that first needs it: more than the 5 s of LIMITS on a busy machine)
    limits = dataclasses.replace(LIMITS, cell_timeout=30)
    executed, problems = execute_notebook(nb, tmp_path / "workdir", limits, env={"COURSE_SMOKE": "1"}, fork=fork)
    cells = executed.cells
    assert problems == []
    assert cells[0].source == "# Title" and "outputs" not in cells[0]
    assert [c.execution_count for c in cells[1:]] == [1, 2, 3, 4, 5, 6]
    # stdout and stderr are two streams, each flushed by the kernel on its own: either may arrive first
    assert sorted((o.name, o.text) for o in cells[1].outputs) == [("stderr", "err\n"), ("stdout", "out\n")]
    assert cells[2].outputs[0].output_type == "execute_result"
    assert cells[2].outputs[0].data["text/plain"] == "42" and cells[2].outputs[0].execution_count == 2
    shown = cells[3].outputs[0]
    assert shown.output_type == "display_data" and "**shown**" in shown.data["text/markdown"]
    assert errors(cells[4])[0][0] == "ZeroDivisionError"
    assert text(cells[5]) == "the student's own file ['data.txt'] 2.0 1 1\n"
    assert text(cells[6]) == f"{fork}\n", "the kernel did not run the way asked (a forked kernel fell back?)"
    assert sorted(os.listdir(tmp_path / "workdir")) == workdir_before, "the notebook must never enter the workdir"
    assert all(not c.get("outputs") for c in nb.cells), "the caller's notebook must not change"


def test_cell_that_ignores_interrupts_is_stopped_and_the_kernel_replaced(tmp_path):
    started = time.monotonic()
    executed, problems = run(
        tmp_path,
        "before = 'defined before'",
        "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except KeyboardInterrupt:\n        pass",
        "print(before)",
    )
    cells = executed.cells
    assert errors(cells[1])[0][0] == "CellTimeoutError" and "5 seconds" in errors(cells[1])[0][1]
    assert text(cells[2]) == "defined before\n" and errors(cells[2]) == []
    assert [c.execution_count for c in cells] == [1, 2, 3]
    assert [(p.index, p.kind) for p in problems] == [(1, "timeout")]
    assert time.monotonic() - started < 60


def test_killed_kernel_and_memory_bomb(tmp_path):
    executed, problems = run(
        tmp_path,
        "a = 1",
        "import os\nos.kill(os.getpid(), 9)",
        "print(a)",
        # Untouched memory (bytes(n) is calloc'ed: zero pages, where bytearray(n) writes every byte): the
        # address-space limit stops it without using the machine's RAM, within the 5-s cell limit on a busy machine.
        "def bomb():\n    chunks = []\n    while True:\n        chunks.append(bytes(256 * 2**20))\nbomb()",
        "print(a + 1)",
        "huge = bytes(50 * 2**30)",
        "print(a + 2)",
    )
    cells = executed.cells
    assert errors(cells[1])[0][0] == "KernelDied"
    assert "died" in errors(cells[1])[0][1]
    assert text(cells[2]) == "1\n"
    for bomb, after, printed in [(cells[3], cells[4], "2\n"), (cells[5], cells[6], "3\n")]:
        assert errors(bomb) and errors(bomb)[-1][0] in ("MemoryError", "KernelDied"), errors(bomb)
        assert text(after) == printed and not errors(after)
    assert (1, "kernel-died") in [(p.index, p.kind) for p in problems]


def test_endless_print_is_cut_and_stopped(tmp_path):
    executed, problems = run(tmp_path, "a = 'alive'", "while True:\n    print('spam ' * 20)", "print(a)")
    cells = executed.cells
    assert errors(cells[1])[-1][0] == "OutputLimitExceeded"
    assert 0 < len(text(cells[1])) <= LIMITS.output_bytes
    assert text(cells[2]) == "alive\n"
    assert [(p.index, p.kind) for p in problems] == [(1, "output-limit")]


def _sleepers(seconds):
    """Host processes running `sleep SECONDS`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == f"sleep\0{seconds}\0".encode():
                found.append(pid)
        except OSError:
            pass
    return found


def test_fork_bomb_is_bounded_and_cleaned_up(tmp_path):
    seconds = 600 + os.getpid() % 300  # a duration of our own, to find exactly these processes
    executed, problems = run(
        tmp_path,
        f"import subprocess\nstarted, error = [], None\nfor _ in range(500):\n    try:\n"
        f"        started.append(subprocess.Popen(['sleep', '{seconds}']))\n    except OSError as e:\n"
        f"        error = e\n        break\nprint(len(started), type(error).__name__)",
        "print('still here')",
    )
    count, error = text(executed.cells[0]).split()
    assert 10 < int(count) < LIMITS.processes and error == "BlockingIOError", text(executed.cells[0])
    assert text(executed.cells[1]) == "still here\n"
    for _ in range(50):
        if not _sleepers(seconds):
            break
        time.sleep(0.1)
    assert _sleepers(seconds) == [], "the sandbox's processes outlived it"


@pytest.mark.parametrize("fork", [True, False], ids=["forked kernel", "kernel of its own"])
def test_files_outside_the_workdir_are_invisible_and_read_only(tmp_path, fork):
    secrets = {
        "other student": tmp_path / "other_student" / "ps1" / "answers.py",
        "gradebook": tmp_path / "gradebook.db",
        "solutions": REPOSITORY / "solutions" / "02_attention" / "02_attention.ipynb",
    }
    for name, path in list(secrets.items())[:2]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"secret {name}")
    assert secrets["solutions"].is_file()
    home = Path("/root")
    if os.access(home, os.R_OK):
        secrets.update({f"/root/{p.name}": p for p in home.iterdir() if p.is_file()})
    marker = f"escape-{uuid.uuid4().hex}"
    writes = [tmp_path / marker, Path("/tmp") / marker, REPOSITORY / "transformer_course" / marker,
              Path(os.__file__).parent / marker]
    executed, problems = run(
        tmp_path,
        f"read = []\nfor name, path in {[(n, str(p)) for n, p in secrets.items()]!r}:\n    try:\n"
        f"        open(path).read(1)\n        read.append(name)\n    except OSError:\n        pass\n"
        f"print('READ', read)",
        f"written = []\nfor path in {[str(p) for p in writes]!r}:\n    try:\n        open(path, 'w').write('x')\n"
        f"        written.append(path)\n    except OSError:\n        pass\nprint('WROTE', written)",
        fork=fork,
    )
    assert text(executed.cells[0]) == "READ []\n"
    # /tmp is the sandbox's own: writing there works, and nothing shows on the host
    assert text(executed.cells[1]) == f"WROTE ['/tmp/{marker}']\n"
    assert not any(p.exists() for p in writes), "a file written in the sandbox appeared on the host"
    assert problems == []


def test_no_network(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    port = server.getsockname()[1]
    try:
        executed, _ = run(tmp_path, f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), "
                                    f"timeout=3)\n    print('CONNECTED')\nexcept OSError as e:\n"
                                    f"    print(type(e).__name__)")
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert text(executed.cells[0]) == "ConnectionRefusedError\n"


PATCHES = """
import builtins, torch
torch.allclose = lambda *a, **k: True
builtins.abs = lambda value: 0
torch.Tensor.sum = lambda self, *a, **k: torch.tensor(0.0)
"""
LOOKS = "import builtins, torch\nprint(torch.allclose(torch.zeros(1), torch.ones(1)), builtins.abs(-3), " \
        "torch.ones(2).sum().item())"


def test_what_a_notebook_changes_in_its_kernel_dies_with_the_kernel(tmp_path):
    """Nothing in the kernel puts back what a cell replaced (judged test cells do not depend on the kernel's word):
    the change stays for the notebook's later cells, and the next notebook's kernel, forked from the same server,
    has the originals."""
    for name in ("patched", "next"):
        (tmp_path / name).mkdir()
    patched, problems = run(tmp_path / "patched", PATCHES, LOOKS)
    assert text(patched.cells[1]) == "True 0 0.0\n" and problems == []
    following, _ = run(tmp_path / "next", LOOKS)
    assert text(following.cells[0]) == "False 3 2.0\n", errors(following.cells[0])


def test_notebook_time_limit(tmp_path):
    limits = Limits(cell_timeout=60, total_timeout=15, memory_mb=3072, processes=64, output_bytes=20_000)
    started = time.monotonic()
    executed, problems = run(tmp_path, "import time", "time.sleep(60)", "print('never')", limits=limits)
    assert time.monotonic() - started < limits.total_timeout + 5
    cells = executed.cells
    assert errors(cells[1])[0][0] == "CellTimeoutError" and "notebook ran out of time" in errors(cells[1])[0][1]
    assert errors(cells[2])[0][0] == "NotebookTimeoutError" and cells[2].execution_count is None
    assert [(p.index, p.kind) for p in problems] == [(1, "timeout"), (2, "not-run")]


# ----------------------------------------------------------------------------- kernels forked from the kernel server

HOLDER = """
import os, threading, time
open('/tmp/first', 'w').write('x'); open('/dev/shm/first', 'w').write('x'); open('mine', 'w').write('x')
started = 0
try:
    for _ in range(500):
        threading.Thread(target=time.sleep, args=(12,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
print(started, time.time())
time.sleep(8)
"""
LOOKER = """
import ctypes, os, threading, time
time.sleep(4)
started = 0
for _ in range(20):
    threading.Thread(target=time.sleep, args=(1,), daemon=True).start()
    started += 1
kernels = os.path.dirname(os.path.dirname(os.getcwd()))
libc = ctypes.CDLL(None, use_errno=True)
# What would uncover the others: taking off the covering mounts, or namespaces of its own to do it in.
uncovered = [path for path in (kernels, '/tmp', '/proc') if libc.umount2(path.encode(), 2) == 0]
unshared = libc.unshare(0x10000000 | 0x00020000) == 0
print(os.path.exists('/tmp/first'), os.listdir('/dev/shm'), len(os.listdir(kernels)), sorted(os.listdir('/proc')),
      os.listdir('.'), started, uncovered, unshared)
print(time.time())
"""


def test_kernels_forked_at_the_same_time_do_not_see_each_other(tmp_path):
    """Two notebooks at once, from one kernel server: the first fills /tmp, /dev/shm, its folder and its task limit;
    the second sees none of it, nor the first's folder, nor a process in /proc, starts threads of its own, and can
    neither take off the mounts that cover the others nor make namespaces in which to do it."""
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(run, tmp_path / "first", HOLDER)
        time.sleep(1)
        second = pool.submit(run, tmp_path / "second", LOOKER)
        (holder, _), (looker, problems) = first.result(), second.result()
    threads, filled = text(holder.cells[0]).split()
    seen, looked = text(looker.cells[0]).rsplit("\n", 2)[:2]
    assert 10 < int(threads) < LIMITS.processes, text(holder.cells[0])
    assert float(filled) < float(looked) < float(filled) + 8, "the second kernel did not look while the first held all"
    assert seen == "False [] 1 ['cpuinfo', 'meminfo', 'stat'] [] 20 [] False", \
        f"the second kernel saw: {text(looker.cells[0])} {errors(looker.cells[0])}"
    assert problems == []


def test_a_kernel_server_that_fails_costs_time_not_isolation(tmp_path, monkeypatch, capfd):
    """A zygote that dies at its start: the notebook runs in a sandboxed kernel of its own, and the grader says so."""
    monkeypatch.setattr(kernel_server, "ZYGOTE_SOURCE", "raise SystemExit(3)")
    secret = tmp_path / "other_student.txt"
    secret.write_text("secret")
    executed, problems = run(tmp_path, "import os\nprint('/kernels-' in os.getcwd(), os.listdir('.'))",
                             f"print(open({str(secret)!r}).read())", env={"TEST_ZYGOTE": "dies"})
    assert text(executed.cells[0]) == "False []\n" and problems == []
    assert errors(executed.cells[1])[0][0] == "FileNotFoundError"
    assert "autograder: the kernel server failed (the kernel server did not start)" in capfd.readouterr().err


@pytest.mark.parametrize("fork", [True, False], ids=["forked kernel", "kernel of its own"])
def test_files_that_do_not_fit_in_the_work_folder_stop_the_notebook(tmp_path, fork, capfd):
    """The submission's fault: no second try in a kernel of its own."""
    (tmp_path / "workdir").mkdir()
    (tmp_path / "workdir" / "big.bin").write_bytes(b"x" * 3 * 2**20)
    limits = Limits(cell_timeout=5, total_timeout=30, memory_mb=3072, processes=64, workdir_mb=1)
    with pytest.raises(KernelStartError, match="No space left on device") as stopped:
        run(tmp_path, "print('never')", limits=limits, fork=fork)
    assert stopped.value.submission_at_fault
    assert "the kernel server failed" not in capfd.readouterr().err


def test_a_kernel_server_that_died_between_notebooks_is_replaced(tmp_path):
    env = {"TEST_ZYGOTE": "killed"}   # a server of this test's own
    run(tmp_path, "print('first')", env=env)
    [server] = [s for key, s in kernel_server._servers.items() if ("TEST_ZYGOTE", "killed") in key[1]]
    os.killpg(server.process.pid, 9)
    server.process.wait()
    executed, problems = run(tmp_path, "import os\nprint('/kernels-' in os.getcwd())", env=env)
    assert text(executed.cells[0]) == "True\n" and problems == []
    [replacement] = [s for key, s in kernel_server._servers.items() if ("TEST_ZYGOTE", "killed") in key[1]]
    assert replacement is not server and replacement.alive


def test_a_kernel_server_imports_ahead_what_it_is_asked_to(tmp_path):
    """A notebook's slow first imports (the registry's KERNEL_FIRST_USE_IMPORTS) are made in its kernel server, before the
    fork: its kernels start with them imported; the kernels of another server do not."""
    looks = "import sys\nprint('wave' in sys.modules)"
    (tmp_path / "ahead").mkdir()
    ahead, problems = run(tmp_path / "ahead", looks, preload=("wave",))
    assert text(ahead.cells[0]) == "True\n" and problems == [], errors(ahead.cells[0])
    plain, _ = run(tmp_path, looks)
    assert text(plain.cells[0]) == "False\n", "a kernel of another server had the module imported"


def test_a_forked_kernel_sees_what_the_sandbox_bound_under_tmp(tmp_path, monkeypatch):
    """A forked kernel's /tmp is its own, but what the sandbox bound under /tmp it still sees, read-only: a data
    mirror here; in CI, whose clone and virtual environment live under /tmp, the course package and the
    installation, from which it imports what its zygote had not imported."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "train.de").write_text("ein Satz")
    monkeypatch.setenv("MULTI30K_MIRROR", str(mirror))
    executed, problems = run(tmp_path, "import os, IPython.core.debugger, transformer_course.plotting\n"
                                       "mirror = os.environ['MULTI30K_MIRROR']\n"
                                       "print('/kernels-' in os.getcwd(), open(mirror + '/train.de').read())\n"
                                       "open(mirror + '/mine', 'w')")
    assert text(executed.cells[0]) == "True ein Satz\n", errors(executed.cells[0])
    assert errors(executed.cells[0])[0][0] == "OSError", "the kernel could write into a read-only folder"


# ----------------------------------------------------------------------------- every limit holds

# Each tries a way past the output cap: one big output of each kind, many small ones, outputs cleared and sent again
# (errors stay through a clear), errors sent past ipykernel, and text the notebook's file stores larger than it is
# (a line break: a line of its own; a control character: six bytes; a euro sign: three).
OUTPUT_ROUTES = {
    "a huge traceback": "raise ValueError('x' * 4_000_000)",
    "display metadata": "display({'text/plain': 'x'}, raw=True, metadata={'m': 'y' * 4_000_000})",
    "many displays": "for _ in range(3000):\n    display({'text/plain': 'x' * 100}, raw=True, metadata={'m': 'y' * 1000})",
    "clear_output(wait=True)": "from IPython.display import clear_output\nfor _ in range(50):\n    print('x' * 15_000)\n"
                               "    clear_output(wait=True)\nprint('end')",
    "errors through clears": "from IPython.display import clear_output\npub = get_ipython().display_pub\n"
                             "for _ in range(40):\n    pub.session.send(pub.pub_socket, 'error', {'ename': 'E', 'evalue': "
                             "'v' * 1000, 'traceback': ['t' * 5000]}, parent=pub.parent_header, ident=pub.topic)\n"
                             "    clear_output()",
    "execute_result": "'x' * 4_000_000",
    "line breaks": "print('\\n' * 19_000)",
    "control characters": "print('\\x01' * 19_000)",
    "non-ASCII": "print('\\u20ac' * 19_000)",
    "an error the reply carries": "get_ipython().showtraceback = lambda *a, **k: None\nraise ValueError('x' * 4_000_000)",
}
# A judged test cell whose probe prints near the cap and whose judge prints 19,000 line breaks and fails: the
# grader's verdict comes on top of the kernel's outputs.
JUDGED = new_code_cell(
    "from course_testkit.probing import run_test\n\ndef probe():\n    print('p' * 15_000)\n    return 1\n\n"
    "def judge(data):\n    print('\\n' * 19_000)\n    assert False, 'the judge says no. ' * 20\n\nrun_test(probe, judge)",
    metadata={"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": "test_cap", "points": 1,
                           "schema_version": 3}})


def stored_bytes(cell):
    """What a cell's outputs take in the notebook's file."""
    empty = copy.deepcopy(cell)
    empty.outputs = []
    return len(nbformat.writes(new_notebook(cells=[cell])).encode()) - len(nbformat.writes(
        new_notebook(cells=[empty])).encode())


def test_no_route_takes_a_cells_outputs_past_the_cap(tmp_path):
    """Every output kind counts, as the notebook's file stores it, the grader's own messages included."""
    limits = dataclasses.replace(LIMITS, cell_timeout=20)
    executed, _ = run(tmp_path, "alive = 'alive'", *OUTPUT_ROUTES.values(), JUDGED, "print(alive)", limits=limits)
    cells = executed.cells[1:-1]
    sizes = {name: stored_bytes(cell) for name, cell in zip([*OUTPUT_ROUTES, "a judged cell"], cells)}
    assert all(size <= LIMITS.output_bytes for size in sizes.values()), sizes
    assert stored_bytes(executed.cells[-1]) < 200 and text(executed.cells[-1]) == "alive\n"
    assert errors(cells[-1])[-1] == ("AssertionError", "the judge says no. " * 20), "the judge's verdict was cut"
    for name in ("a huge traceback", "display metadata", "execute_result", "line breaks"):
        assert errors(cells[list(OUTPUT_ROUTES).index(name)])[-1][0] == "OutputLimitExceeded", name
    assert errors(cells[list(OUTPUT_ROUTES).index("an error the reply carries")])[0][0] == "ValueError"


SPILL = """
import os, sys
from ipykernel.kernelapp import IPKernelApp
folder = os.path.dirname(IPKernelApp.instance().connection_file)
log = sys.stdout._original_stdstream_copy   # the kernel's own stdout, before ipykernel took it: its log
chunk = bytes(2**20)
for _ in range(1024):                        # 1 GiB to its log: copied LOG_BYTES at most
    os.write(log, chunk)
spilled = {}
for name, path in (('connection folder', os.path.join(folder, 'spill.bin')), ('log', os.path.join(folder, 'kernel.log')),
                   ('sockets', os.path.join(folder, 'run', 'spill')), ('IPython', os.environ['IPYTHONDIR'] + '/spill')):
    written = 0
    try:
        with open(path, 'ab') as out:
            while written < 2**30:
                out.write(chunk)
                written += 2**20
    except OSError as error:
        spilled[name] = (written >> 20, error.errno)
print(spilled)
os.remove(os.environ['IPYTHONDIR'] + '/spill')   # IPython keeps its history there
open(os.path.join(folder, 'spill.bin'), 'wb')
"""


def _disk_use(folder):
    """Bytes that the files under ``folder`` take on the disk."""
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                pass
    return total


@pytest.mark.parametrize("fork", [True, False], ids=["forked kernel", "kernel of its own"])
def test_the_kernels_folders_never_reach_the_hosts_disk(tmp_path, monkeypatch, fork):
    """A cell writes 1 GiB to its log and tries a GiB in each folder of the kernel's: its connection folder is
    read-only, its sockets' and IPython's folders are small tmpfs, the log on the host takes LOG_BYTES at most.
    The host's disk use does not grow, the cell fails, the next cell runs."""
    # The kernels' folders on the host (a kernel server of this test's own), at a path as short as the grader's own
    # under /tmp: a kernel's Unix sockets are reached through /proc/PID/root/<that path>, within 107 bytes.
    host = Path(tempfile.mkdtemp(prefix="host-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(host))
    most, running = [0], threading.Event()

    def watch():
        while not running.is_set():
            most[0] = max(most[0], _disk_use(host))
            time.sleep(0.02)
    watcher = threading.Thread(target=watch)
    free = os.statvfs(host).f_bavail * os.statvfs(host).f_frsize
    watcher.start()
    try:
        executed, problems = run(tmp_path, "a = 'alive'", SPILL, "print(a)", fork=fork,
                                 limits=dataclasses.replace(LIMITS, cell_timeout=60), env={"TEST_SPILL": "1"})
    finally:
        running.set()
        watcher.join()
        free_after = os.statvfs(host).f_bavail * os.statvfs(host).f_frsize
        shutil.rmtree(host, ignore_errors=True)
    spilled = eval(text(executed.cells[1]))   # where: (MB written, errno)
    assert spilled["connection folder"] == spilled["log"] == (0, 30), spilled     # read-only: EROFS
    assert spilled["sockets"][1] == spilled["IPython"][1] == 28, spilled           # a full tmpfs: ENOSPC
    assert spilled["sockets"][0] <= 1 and spilled["IPython"][0] <= LIMITS.memory_mb // 4, spilled
    assert errors(executed.cells[1])[0][0] == "OSError" and text(executed.cells[2]) == "alive\n"
    assert most[0] < LOG_BYTES + 2**20, f"the kernels' folders took {most[0]} bytes of the host's disk"
    assert free_after > free - 2**29, "the host's disk filled up"
    assert problems == []


MEMFD = ("import os\nfd = os.memfd_create('hold')\nos.ftruncate(fd, 4 * 2**30)\nheld = 0\n"
         "while held < 2 * 2**30:\n    held += os.write(fd, bytes(2**24))\nprint('HELD', held >> 20)")


@pytest.mark.parametrize("fork", [True, False], ids=["forked kernel", "kernel of its own"])
def test_memory_held_outside_the_address_space_counts(tmp_path, fork):
    """2 GiB written to a memfd (none of it in the address space) under a 1.5 GiB limit: the kernel's memory cgroup
    counts it, the kernel dies, the grader starts a new one and runs the rest."""
    cgroups = memory_cgroups()
    if cgroups.group is None:
        pytest.skip(f"no memory cgroup per kernel on this machine ({cgroups.problem}): {memory_accounting()}")
    limits = dataclasses.replace(LIMITS, memory_mb=1536, cell_timeout=60)
    executed, problems = run(tmp_path, "a = 1", MEMFD, "print(a + 1)", limits=limits, fork=fork)
    assert "HELD" not in text(executed.cells[1]) and errors(executed.cells[1])[-1][0] == "KernelDied"
    assert text(executed.cells[2]) == "2\n"
    assert [(p.index, p.kind) for p in problems] == [(1, "kernel-died")]
    assert list(cgroups.group.iterdir()) == [] or not list(cgroups.group.glob("k*")), "a kernel's cgroup was left"


def test_the_grader_says_how_memory_is_counted():
    cgroups = memory_cgroups()
    line = memory_accounting()
    assert "\n" not in line and ("NO memory cgroup" in line) == (cgroups.group is None), line
