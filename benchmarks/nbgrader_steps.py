"""Seconds per submission of nbgrader's sanitize and record steps, the part of grading that stays on the
instructor's machine, run by nbgrader as it is (`NbGraderAPI.autograde`: two passes over each notebook, an
SQLAlchemy engine per gradebook opened, the metadata schema checked for every cell) and as the grader runs them
(one pass, inside autograder.nbgrader_course.faster_nbgrader).

    python benchmarks/nbgrader_steps.py --students 10 --rounds 3
    python benchmarks/nbgrader_steps.py --students 4 --assignments 01_positional_encoding 06_transformer

Builds a course of the reference solutions (grade_course.py's), grades it once with `python -m autograder
grade`, so that every submission has its repaired, sanitized and executed copies, then runs the two steps
again for every submission of every assignment, exactly as the grader calls them, both ways in turn (the order
alternating from round to round), in this process and on no worker: nothing else runs meanwhile. Prints each
round and the medians.
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from autograder import grade  # noqa: E402
from autograder.nbgrader_course import faster_nbgrader  # noqa: E402
from grade_course import build_course  # noqa: E402

WAYS = {False: "nbgrader as it is", True: "as the grader runs it"}


def seconds_per_submission(course, assignments, students, faster):
    """Both steps for every submission, in nbgrader's time only (as the grader counts it)."""
    spent = 0.0
    with faster_nbgrader() if faster else contextlib.nullcontext():
        for assignment in assignments:
            stage = grade.stages(course / grade.STAGING / assignment)
            sanitize, record = grade.nbgrader_steps(course, stage, single_pass=faster)
            for student in students:
                for step in (sanitize, record):
                    error = step(assignment, student)
                    if error:
                        sys.exit(f"nbgrader failed on {student}'s {assignment}: {error}")
            spent += sanitize.seconds + record.seconds
    return spent / (len(assignments) * len(students))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--assignments", nargs="*",
                        default=sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()))
    args = parser.parse_args()
    students = [f"student{i + 1}" for i in range(args.students)]
    env = dict(os.environ, COURSE_SMOKE="1", MPLBACKEND="Agg")
    with tempfile.TemporaryDirectory(prefix="nbgrader-steps-") as folder:
        course = Path(folder)
        build_course(course, args.assignments, students)
        for assignment in args.assignments:
            subprocess.run([sys.executable, "-m", "autograder", "grade", assignment], cwd=course, env=env,
                           check=True, capture_output=True)
        print(f"{len(students)} students x {len(args.assignments)} notebooks; load average before: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        seconds_per_submission(course, args.assignments, students, faster=False)     # imports, disk caches
        measured = {False: [], True: []}
        for round_ in range(args.rounds):
            for faster in (False, True) if round_ % 2 == 0 else (True, False):
                measured[faster].append(seconds_per_submission(course, args.assignments, students, faster))
                print(f"round {round_ + 1}, {WAYS[faster]}: {measured[faster][-1]:.3f} s per submission", flush=True)
    for faster, values in measured.items():
        print(f"{WAYS[faster]}: median {statistics.median(values):.3f} s per submission "
              f"({min(values):.3f}-{max(values):.3f})")


if __name__ == "__main__":
    main()
