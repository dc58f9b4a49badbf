"""How long a notebook of one empty cell takes in the grader's sandbox: with its kernel forked from the kernel
server (autograder/execution/kernel_server.py, the grader's default) and with a kernel that starts as a process of
its own (the grader's fallback, and its only way before).

    python benchmarks/kernel_fork_server.py               # about a minute; needs bubblewrap, as the grader does
    python benchmarks/kernel_fork_server.py --runs 10

Both ways include what the grader does for every kernel: the tamper guard's set-up, which imports torch, numpy and
the course package unless the kernel has them already. The first forked run, which also starts the kernel
server (once per process, package and environment), is timed on its own; then the runs alternate.
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nbformat.v4 import new_code_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autograder.execution.execute import execute_notebook  # noqa: E402
from autograder.execution.sandbox import Limits, sandbox_available  # noqa: E402


def seconds(fork):
    """Seconds for a notebook of one empty cell, sandboxed."""
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
        started = time.perf_counter()
        _, problems = execute_notebook(new_notebook(cells=[new_code_cell("")]), workdir, Limits(), fork=fork)
        assert problems == [], problems
        return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="notebooks run each way (default 5)")
    args = parser.parse_args()
    if not sandbox_available():
        sys.exit("bubblewrap (bwrap) is not installed or does not work here: the sandbox cannot be measured")
    print(f"first forked run, the kernel server's start included: {seconds(True):.2f} s")
    times = {True: [], False: []}
    for _ in range(args.runs):
        for fork in (True, False):
            times[fork].append(seconds(fork))
    for fork, label in ((True, "forked from the kernel server"), (False, "a process of its own")):
        values = ", ".join(f"{s:.2f}" for s in times[fork])
        print(f"{label:30s} median {statistics.median(times[fork]):.2f} s  ({values})")


if __name__ == "__main__":
    main()
