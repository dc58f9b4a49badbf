"""Where the sandboxed executions run: local worker processes, or the workers of a Dask cluster.

A task is one student's submission: its sanitized notebooks and its other files go to the worker as bytes,
and the executed notebooks come back as bytes, so a worker shares no file system with the instructor's
machine and never sees the course directory, the gradebook or another student's work. Repair, sanitizing
and recording stay with the caller (grade.py).

Both pools hand back results in the order they finish. On a Dask cluster a task whose worker dies is run
again on another worker (the scheduler's own retry, up to ``distributed.scheduler.allowed-failures``
deaths); its result still comes back once, so each submission is recorded once.
"""
import concurrent.futures
import multiprocessing
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import nbformat

from .execute import execute_notebook
from .sandbox import sandbox_available

# Not sent to the worker: editors' checkpoints, and the notebooks' own copies (they go as notebooks).
SKIPPED = ("*.ipynb", ".ipynb_checkpoints")


class ClusterError(RuntimeError):
    """The Dask cluster cannot run the grader's tasks."""


def submission_payload(folder):
    """(notebooks, files) of one sanitized submission folder: {name: bytes} each, files by relative path."""
    folder = Path(folder)
    notebooks = {p.stem: p.read_bytes() for p in sorted(folder.glob("*.ipynb"))}
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        # A link is not followed: it could point at anything on the instructor's machine.
        if path.is_file() and not path.is_symlink() and not any(relative.match(pattern) or pattern in relative.parts
                                                                 for pattern in SKIPPED):
            files[relative.as_posix()] = path.read_bytes()
    return notebooks, files


def execute_submission(notebooks, files, limits, env, sandbox):
    """Run one student's notebooks ({name: bytes}), each in a sandbox of its own with a copy of ``files``
    ({relative path: bytes}); returns {name: {"notebook": bytes, "problems": [dict], "seconds": float}}.
    Runs on the worker: in a local process or on a Dask worker."""
    if sandbox and not sandbox_available():
        raise ClusterError("bubblewrap (bwrap) is not available on this worker, so the submission cannot be "
                           "sandboxed")
    results = {}
    with tempfile.TemporaryDirectory(prefix="autograder-") as scratch:
        for name, source in sorted(notebooks.items()):
            workdir = Path(scratch) / name
            # The student's other files, never the notebook itself: it holds the hidden tests.
            _write_files(workdir, files)
            started = time.perf_counter()
            notebook = nbformat.reads(source.decode("utf-8"), as_version=4)
            executed, problems = execute_notebook(notebook, workdir, limits, env=env, sandbox=sandbox)
            results[name] = {"notebook": nbformat.writes(executed).encode("utf-8"),
                             "problems": [asdict(p) for p in problems],
                             "seconds": round(time.perf_counter() - started, 2)}
            shutil.rmtree(workdir, ignore_errors=True)
    return results


def _write_files(workdir, files):
    workdir.mkdir(parents=True)
    for relative, content in files.items():
        path = workdir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


class LocalPool:
    """``workers`` local processes (spawned: fresh interpreters, no inherited event loops or sockets)."""

    description = "local processes"

    def __init__(self, workers):
        self.workers = workers
        self.executor = concurrent.futures.ProcessPoolExecutor(workers,
                                                               mp_context=multiprocessing.get_context("spawn"))
        self.jobs = {}

    def submit(self, student, *arguments):
        self.jobs[self.executor.submit(execute_submission, *arguments)] = student

    def completed(self, wait=True):
        """(student, future) as each finishes; ``future.result()`` raises what the task raised. Without
        ``wait``, only those finished already."""
        futures = concurrent.futures.as_completed(list(self.jobs)) if wait else [f for f in self.jobs if f.done()]
        for future in futures:
            yield self.jobs.pop(future), future

    def close(self):
        self.executor.shutdown(cancel_futures=True)


class DaskPool:
    """The workers of the Dask cluster whose scheduler is at ``address`` (tcp://HOST:8786)."""

    def __init__(self, address, sandbox):
        try:
            from distributed import Client
        except ImportError as error:
            raise ClusterError("grading on a Dask cluster needs the `distributed` package: pip install "
                               "distributed (the course's [dev] extra has it)") from error
        try:
            self.client = Client(address, timeout="30s", set_as_default=False)
        except (OSError, TimeoutError) as error:
            raise ClusterError(f"no Dask scheduler answers at {address}: {error}") from error
        self.jobs = {}
        self._check_workers(sandbox)
        self.description = f"the Dask cluster at {address}"

    def _check_workers(self, sandbox):
        """Every worker must import the grader (the course's environment) and, unless told otherwise, sandbox."""
        try:
            able = self.client.run(sandbox_available) if sandbox else {}
        except Exception as error:
            self.close()
            raise ClusterError(f"the Dask workers cannot run the grader (is the course's environment installed "
                               f"there?): {error!r}") from error
        unable = sorted(worker for worker, ok in able.items() if not ok)
        if unable:
            self.close()
            raise ClusterError(f"bubblewrap does not work on the Dask worker(s) {', '.join(unable)}: install it "
                               "there (apt-get install bubblewrap)")

    def submit(self, student, *arguments):
        # pure=False and a key of its own: two runs never share a result, a rerun always executes.
        future = self.client.submit(execute_submission, *arguments, pure=False,
                                    key=f"autograder-{student}-{uuid.uuid4().hex}")
        self.jobs[future] = student

    def completed(self, wait=True):
        from distributed import as_completed

        futures = as_completed(list(self.jobs), loop=self.client.loop) if wait else [f for f in self.jobs if f.done()]
        for future in futures:
            yield self.jobs.pop(future), future

    def close(self):
        for future in self.jobs:
            future.cancel()
        self.client.close()


def open_pool(scheduler, workers, sandbox):
    """The Dask cluster at ``scheduler``, or ``workers`` local processes when it is None."""
    return DaskPool(scheduler, sandbox) if scheduler else LocalPool(workers)
