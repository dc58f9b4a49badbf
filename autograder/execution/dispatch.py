"""Where the sandboxed executions run: local worker processes, or the workers of a Dask cluster.

A task is one student's submission: its sanitized notebooks and its other files go to the worker as bytes,
and the executed notebooks come back as bytes, so a worker shares no file system with the instructor's
machine and never sees the course directory, the gradebook or another student's work. Repair, sanitizing
and recording stay with the caller (grade.py).

Both pools hand back results in the order they finish. On a Dask cluster a task whose worker dies is run
again on another worker (the scheduler's own retry, up to ``distributed.scheduler.allowed-failures``
deaths); its result still comes back once, so each submission is recorded once.
"""
import collections
import concurrent.futures
import os
import shutil
import stat
import tempfile
import time
import uuid
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from pathlib import Path, PurePosixPath

import nbformat

from ..registry import registry
from ..source.library_answers import refuse_flagged
from .execute import execute_notebook
from .judging import all_judged
from .local_workers import fork_server
from .sandbox import sandbox_available
from .stripped import stripped_package

# Not sent to the worker: editors' checkpoints, and the notebooks' own copies (they go as notebooks).
SKIPPED = ("*.ipynb", ".ipynb_checkpoints")
# A submission's files are left out past these (never read): one student's 8 GB file must not exhaust the
# grader's memory or disk. Notebooks count too.
MAX_FILE_BYTES = 50 * 2**20
MAX_SUBMISSION_BYTES = 200 * 2**20
CHUNK_BYTES = 2**20


class ClusterError(RuntimeError):
    """The Dask cluster cannot run the grader's tasks."""


class SubmissionError(OSError):
    """A submission folder the grader will not read."""


def submission_files(folder):
    """(files, skipped) of a submission folder, never following a link: ``files`` {relative posix path: Path}
    of its regular files, in name order, within MAX_FILE_BYTES each and MAX_SUBMISSION_BYTES together;
    ``skipped`` {relative path: why it was left out}: links (to a file, a folder, nowhere), devices and
    pipes, files over a cap. A missing folder has neither."""
    folder = Path(folder)
    if folder.is_symlink():
        raise SubmissionError(f"the submission folder {folder.name} is a symbolic link: links are not followed")
    files, skipped, total = {}, {}, 0
    for relative, entry in _entries(folder) if folder.is_dir() else ():
        if entry.is_symlink():
            skipped[relative] = f"a symbolic link to {os.readlink(entry.path)}: links are not followed"
            continue
        if not entry.is_file(follow_symlinks=False):
            skipped[relative] = "not a regular file"
            continue
        size = entry.stat(follow_symlinks=False).st_size
        if size > MAX_FILE_BYTES:
            skipped[relative] = f"{size / 2**20:.0f} MB, over the {MAX_FILE_BYTES // 2**20} MB a file may have"
        elif total + size > MAX_SUBMISSION_BYTES:
            skipped[relative] = f"past the {MAX_SUBMISSION_BYTES // 2**20} MB a submission may have in all"
        else:
            files[relative], total = Path(entry.path), total + size
    return files, skipped


def _entries(folder, prefix=""):
    """(relative posix path, os.DirEntry) of everything under ``folder`` but folders, descending into real
    folders only (a link to a folder is an entry, not a folder)."""
    with os.scandir(folder) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _entries(entry.path, f"{prefix}{entry.name}/")
        else:
            yield f"{prefix}{entry.name}", entry


def read_chunks(path, limit=MAX_FILE_BYTES):
    """The bytes of the regular file ``path``, CHUNK_BYTES at a time, never through a link; an OSError if
    it is not a regular file (any more) or grows past ``limit``."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)   # a pipe must not block
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise SubmissionError(f"{Path(path).name} is not a regular file")
        size = 0
        while chunk := file.read(CHUNK_BYTES):
            size += len(chunk)
            if size > limit:
                raise SubmissionError(f"{Path(path).name} grew past {limit // 2**20} MB while it was read")
            yield chunk


def copy_file(source, target):
    """Copy a submission's file (see read_chunks) to ``target``, making its folders."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        for chunk in read_chunks(source):
            out.write(chunk)


def without_notebooks(files):
    """The entries of ``files`` (submission_files') that go to the kernel's folder: SKIPPED left out."""
    return {relative: path for relative, path in files.items()
            if not any(PurePosixPath(relative).match(p) or p in PurePosixPath(relative).parts for p in SKIPPED)}


def submission_payload(folder):
    """(notebooks, files) of one sanitized submission folder: {name: bytes} each, files by relative path.
    Links and oversized files are left out (submission_files); the repair step reported them."""
    files, _ = submission_files(folder)
    notebooks = {PurePosixPath(relative).stem: b"".join(read_chunks(path)) for relative, path in files.items()
                 if "/" not in relative and relative.endswith(".ipynb")}
    return notebooks, {relative: b"".join(read_chunks(path)) for relative, path in without_notebooks(files).items()}


def execute_submission(notebooks, files, releases, limits, env, sandbox):
    """Run one student's notebooks ({name: bytes}), each in a sandbox of its own with a copy of ``files``
    ({relative path: bytes}); returns {name: {"notebook": bytes, "problems": [dict], "seconds": float}}.
    Runs on the worker: in a local process or on a Dask worker. Each executed notebook also says which of its
    exercises are someone else's code (source.library_answers.refuse_flagged, against its release in ``releases``,
    {name: bytes}): that reading of the sources is the grader's, and here it costs the instructor's machine nothing."""
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
            # The course's notebooks are assignments of their own name: each sees the package without its answers,
            # and without the oracles once every test cell of it is judged in the grader (judging.py).
            package = stripped_package(name, keep_oracles=not all_judged(notebook))
            executed, problems = execute_notebook(notebook, workdir, limits, env=env, sandbox=sandbox, package=package,
                                                  preload=registry().kernel_first_use_imports.get(name, ()))
            refuse_flagged(executed, nbformat.reads(releases[name].decode("utf-8"), as_version=4))
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


WORKER_NICENESS = 5


class LocalPool:
    """``workers`` local processes, forked from a fork server: fresh processes that inherit none of the grader's
    event loops, sockets or threads, with the modules they need imported once for all (local_workers.preloaded)."""

    description = "local processes"
    RETRIES = 2   # times a job is sent again after its worker died

    def __init__(self, workers, assignment=None, task=None):
        self.workers = workers
        self.task = task or execute_submission   # what a job runs: one submission's notebooks
        # Running already when the grading command started it; else started now, not at the first submission: its
        # imports overlap the sanitizing of the first submissions.
        context = fork_server(assignment)
        # A little below the grading command's priority, kernels included: when the workers fill the cores, the
        # command still sanitizes and records submissions as they come, the one part that cannot be parallel.
        self.context = context
        self.executor = self._executor()
        self.jobs, self.arguments, self.retries = {}, {}, collections.Counter()
        self.isolated = []   # the one-worker pools of jobs sent again after a worker died

    def _executor(self):
        return concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=self.context, initializer=os.nice,
                                                      initargs=(WORKER_NICENESS,))

    def submit(self, student, *arguments):
        self.arguments[student] = arguments
        try:
            future = self.executor.submit(self.task, *arguments)
        except BrokenProcessPool:   # a worker died since the last submission: the pool starts again
            self.executor = self._executor()
            future = self.executor.submit(self.task, *arguments)
        self.jobs[future] = student

    def completed(self, wait=True):
        """(student, future) as each finishes; ``future.result()`` raises what the task raised. Without
        ``wait``, only those finished already. A worker that dies (killed for memory, say) breaks the pool and
        every job running in it: those are sent again, each in a worker of its own, up to RETRIES times, so that one
        submission that kills its worker fails alone, with the reason, and the others are graded."""
        while self.jobs:
            done = [f for f in self.jobs if f.done()]
            if not done:
                if not wait:
                    return
                concurrent.futures.wait(list(self.jobs), return_when=concurrent.futures.FIRST_COMPLETED)
                continue
            for future in done:
                student = self.jobs.pop(future)
                if isinstance(future.exception(), BrokenProcessPool) and self.retries[student] < self.RETRIES:
                    self.retries[student] += 1
                    self._isolated(student)
                else:
                    self.arguments.pop(student, None)
                    yield student, _explained(future)

    def _isolated(self, student):
        """Send again a job whose worker died, in a worker of its own: if it was the one that killed it, it dies alone
        this time, and the jobs that died with it the first time are graded."""
        pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=self.context, initializer=os.nice,
                                                      initargs=(WORKER_NICENESS,))
        self.isolated.append(pool)
        self.jobs[pool.submit(self.task, *self.arguments[student])] = student

    def close(self):
        for pool in [self.executor, *self.isolated]:
            pool.shutdown(cancel_futures=True)


def _explained(future):
    """``future``, or one that raises why its worker died when it did (BrokenProcessPool's own message does not)."""
    if not isinstance(future.exception(), BrokenProcessPool):
        return future
    failed = concurrent.futures.Future()
    failed.set_exception(ClusterError(f"the worker grading it died ({LocalPool.RETRIES + 1} times; killed for memory "
                                      "or by a crash), so it was not graded; the other submissions were"))
    return failed


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


def open_pool(scheduler, workers, sandbox, assignment=None):
    """The Dask cluster at ``scheduler``, or, when it is None, ``workers`` local processes ready to grade
    ``assignment``."""
    return DaskPool(scheduler, sandbox) if scheduler else LocalPool(workers, assignment)
