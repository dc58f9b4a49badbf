"""Seconds per student to grade the whole course: sequential nbgrader, the parallel grader, and the grader
on a Dask cluster; throughput, and a projection for 1,000 students.

    python benchmarks/grade_course.py --students 20                   # all eight notebooks, all three ways
    python benchmarks/grade_course.py --students 2 --modes local dask --assignments 01_positional_encoding

Builds a scratch course from solutions/ and hands in the reference solutions for every student, then grades
each assignment on fresh copies of the course, in each mode:

* nbgrader: plain sequential `nbgrader autograde ASSIGNMENT`;
* local:    `python -m autograder grade ASSIGNMENT --workers N` (sandboxed, N local processes);
* dask:     `python -m autograder grade ASSIGNMENT --scheduler ...` on a Dask cluster of N workers (one task
            each) started on this machine before the first assignment, as a standing cluster would be.

All run the training demos in smoke mode (COURSE_SMOKE=1), as the grader does by default, and each must give
every student full marks on the autograded tests. The projection: each grader mode's measured cost per
submission splits into worker time (wall time x N workers) and nbgrader's sanitize and record steps, which
stay sequential on the instructor's machine; 1,000 students on W workers take at least
max(worker time x submissions / W, nbgrader's time x submissions).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from autograder import CONFIG  # noqa: E402
from support.clusters import dask_cluster  # noqa: E402  (tests/support/: what the tests use too)
from support.notebooks import solved  # noqa: E402

MODES = ("nbgrader", "local", "dask")
PROJECTED_STUDENTS = 1000
NBGRADER_STEPS = re.compile(r"nbgrader's sanitize and record steps here: ([\d.]+) s")


def build_course(directory, assignments, students):
    shutil.copy(CONFIG, directory / "nbgrader_config.py")
    for assignment in assignments:
        shutil.copytree(ROOT / "solutions" / assignment, directory / "source" / assignment)
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--log-level=ERROR"],
                       cwd=directory, check=True, capture_output=True)
        release = nbformat.read(directory / "release" / assignment / f"{assignment}.ipynb", as_version=4)
        solution = nbformat.read(directory / "source" / assignment / f"{assignment}.ipynb", as_version=4)
        filled = solved(release, solution)
        for student in students:
            folder = directory / "submitted" / student / assignment
            folder.mkdir(parents=True)
            nbformat.write(filled, folder / f"{assignment}.ipynb")


def full_marks(course, assignment, students):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            submission = gradebook.find_submission_notebook(assignment, assignment, student)
            # the autograded test cells only: the written answers wait for a human grader
            if any(g.auto_score != g.max_score for g in submission.grades if g.cell_type == "code"):
                return False
    return True


def cells_that_raised(course, assignment, students):
    """The ids of the cells that raised in the graded notebooks. The solutions raise nowhere; where they do (no
    Multi30k mirror and no network, say), the timings are not those of a real run, even with full marks."""
    raised = set()
    for student in students:
        graded = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)
        raised |= {cell.get("id") for cell in graded.cells if cell.cell_type == "code"
                   and any(output.output_type == "error" for output in cell.outputs)}
    return sorted(raised)


def command(mode, assignment, workers, scheduler):
    if mode == "nbgrader":
        return [sys.executable, "-m", "nbgrader", "autograde", assignment, "--log-level=ERROR"]
    where = ["--scheduler", scheduler] if mode == "dask" else ["--workers", str(workers)]
    return [sys.executable, "-m", "autograder", "grade", assignment, *where]


def timed(argv, cwd, env):
    """(seconds, seconds the grader spent in nbgrader's steps, 0 for plain nbgrader)."""
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    steps = NBGRADER_STEPS.search(result.stdout)
    return seconds, float(steps.group(1)) if steps else 0.0


def grade_everything(args, scratch, students, env, scheduler):
    """mode -> [total seconds, nbgrader's seconds], printing a row per assignment."""
    template = scratch / "template"
    template.mkdir()
    build_course(template, args.assignments, students)
    totals = {mode: [0.0, 0.0] for mode in args.modes}
    print(f"{'assignment':28s}" + "".join(f"{mode:>10s}" for mode in args.modes))
    for assignment in args.assignments:
        row = []
        for mode in args.modes:
            course = scratch / f"{mode}-{assignment}"
            shutil.copytree(template, course)
            seconds, steps = timed(command(mode, assignment, args.workers, scheduler), course, env)
            if not full_marks(course, assignment, students):
                sys.exit(f"{mode} grading of {assignment} did not give the solutions full marks")
            raised = cells_that_raised(course, assignment, students)
            if raised:
                sys.exit(f"{mode} grading of {assignment}: the solutions raised in cells {raised} (is the data "
                         f"reachable? set MULTI30K_MIRROR without a network), so these timings mean nothing")
            shutil.rmtree(course)
            totals[mode][0] += seconds
            totals[mode][1] += steps
            row.append(seconds)
        print(f"{assignment:28s}" + "".join(f"{s:9.1f}s" for s in row), flush=True)
    return totals


def summary(totals, students, notebooks, workers):
    submissions = students * notebooks
    print(f"\n{'mode':10s} {'s/student':>10s} {'submissions/h':>14s} {'speed-up':>9s}")
    for mode, (seconds, _) in totals.items():
        speedup = f"{totals['nbgrader'][0] / seconds:8.2f}x" if "nbgrader" in totals else ""
        print(f"{mode:10s} {seconds / students:9.1f}s {3600 * submissions / seconds:14.0f} {speedup:>9s}")
    print(f"\nprojection for {PROJECTED_STUDENTS} students x {notebooks} notebooks, from the measured cost per "
          f"submission (worker time = wall time x {workers} workers; nbgrader's steps stay on one machine):")
    for mode, (seconds, steps) in totals.items():
        if mode == "nbgrader":
            print(f"  nbgrader: {PROJECTED_STUDENTS * notebooks * seconds / submissions / 3600:.1f} h, one at a time")
            continue
        worker = seconds * workers / submissions
        here = steps / submissions
        hours = {w: PROJECTED_STUDENTS * notebooks * max(worker / w, here) / 3600 for w in (workers, 16, 64)}
        print(f"  {mode}: {worker:.1f} worker-s and {here:.2f} s of nbgrader per submission: "
              + ", ".join(f"{h:.1f} h on {w} workers" for w, h in hours.items()))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="local grader processes, and Dask workers (default: one per core, %(default)s)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--assignments", nargs="*",
                        default=sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()))
    args = parser.parse_args()
    students = [f"student{i + 1}" for i in range(args.students)]
    env = dict(os.environ, COURSE_SMOKE="1", MPLBACKEND="Agg")
    print(f"{len(students)} students x {len(args.assignments)} notebooks, {os.cpu_count()} cores, "
          f"{args.workers} workers; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="grade-benchmark-") as folder, ExitStack() as stack:
        scratch = Path(folder)
        scheduler = None
        if "dask" in args.modes:
            (scratch / "cluster").mkdir()
            scheduler = stack.enter_context(dask_cluster(scratch / "cluster", args.workers)).address
        totals = grade_everything(args, scratch, students, env, scheduler)
    summary(totals, len(students), len(args.assignments), args.workers)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
