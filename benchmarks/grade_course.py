"""Seconds per student to grade the whole course, and the parallel grader's speed-up over nbgrader.

    python benchmarks/grade_course.py                  # 4 students, all eight notebooks, 2 workers
    python benchmarks/grade_course.py --students 2 --assignments 01_positional_encoding 02_attention

Builds a scratch course from solutions/, hands in the reference solutions for every student, then grades
each assignment twice on fresh copies of the course: with plain sequential `nbgrader autograde` and with
`python -m autograder grade --workers N` (sandboxed, parallel). Both run the notebooks' training demos in
smoke mode (COURSE_SMOKE=1), as the grader does by default, and both must give every student full marks on the
autograded tests.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from autograder import CONFIG  # noqa: E402
from grading import solved  # noqa: E402  (tests/grading.py: the submissions the tests grade too)


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


def timed(command, cwd, env):
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--assignments", nargs="*",
                        default=sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()))
    args = parser.parse_args()
    students = [f"student{i + 1}" for i in range(args.students)]
    env = dict(os.environ, COURSE_SMOKE="1", MPLBACKEND="Agg")
    print(f"{len(students)} students x {len(args.assignments)} notebooks, {os.cpu_count()} cores, "
          f"{args.workers} workers for the parallel grader")
    totals = {"nbgrader autograde (sequential)": 0.0, f"python -m autograder grade (--workers {args.workers})": 0.0}
    with tempfile.TemporaryDirectory(prefix="grade-benchmark-") as scratch:
        template = Path(scratch) / "template"
        template.mkdir()
        build_course(template, args.assignments, students)
        print(f"{'assignment':28s} {'nbgrader':>10s} {'parallel':>10s} {'speed-up':>9s}")
        for assignment in args.assignments:
            seconds = []
            for name, command in (("sequential", [sys.executable, "-m", "nbgrader", "autograde", assignment,
                                                  "--log-level=ERROR"]),
                                  ("parallel", [sys.executable, "-m", "autograder", "grade", assignment,
                                                "--workers", str(args.workers)])):
                course = Path(scratch) / f"{name}-{assignment}"
                shutil.copytree(template, course)
                seconds.append(timed(command, course, env))
                if not full_marks(course, assignment, students):
                    sys.exit(f"{name} grading of {assignment} did not give the solutions full marks")
                shutil.rmtree(course)
            for key, value in zip(totals, seconds):
                totals[key] += value
            print(f"{assignment:28s} {seconds[0]:9.1f}s {seconds[1]:9.1f}s {seconds[0] / seconds[1]:8.2f}x")
    sequential, parallel = totals.values()
    print(f"\nwhole course, per student: nbgrader autograde {sequential / len(students):.1f} s, "
          f"parallel grader {parallel / len(students):.1f} s; speed-up {sequential / parallel:.2f}x")


if __name__ == "__main__":
    main()
