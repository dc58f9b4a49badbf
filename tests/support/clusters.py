"""A Dask cluster on localhost, started and killed by a test, as an instructor starts one (docs/instructors.md)."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class DaskCluster:
    address: str
    processes: list   # the scheduler's, then worker w1's, w2's, ...: each leads a process group of its own


@contextlib.contextmanager
def dask_cluster(folder, workers=2):
    """A `dask scheduler` and `workers` `dask worker` processes (w1, w2, ...; one task at a time each) on
    localhost, run from `folder`, as an instructor would start them (README); all killed at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    processes = [_start(cli + ["--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], folder)]
    for name in (f"w{i + 1}" for i in range(workers)):
        (Path(folder) / name).mkdir()
        processes.append(_start([sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", name,
                                 "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"], Path(folder) / name))
    try:
        with dask_client(address) as client:
            client.wait_for_workers(workers, timeout=120)
        yield DaskCluster(address, processes)
    finally:
        for process in processes:
            kill_group(process)


def dask_client(address):
    from distributed import Client
    return Client(address, timeout="60s", set_as_default=False)


def _start(command, folder):
    return subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def kill_group(process):
    """SIGKILL for `process` and its process group (a dask worker's nanny, worker and kernels)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
