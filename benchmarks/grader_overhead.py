"""Seconds per student for `python -m autograder grade`, this checkout against an earlier commit.

    python benchmarks/grader_overhead.py --before 327ebbc --students 2
    python benchmarks/grader_overhead.py --before 327ebbc --students 2 --assignments 03_masking --repeats 3

Checks the earlier commit out into a scratch worktree with a virtual environment of its own (this one's
packages, the course installed from that worktree), builds a course of the reference solutions from each
side's own solutions/, and grades every assignment with each side's grader in turn, interleaved, so that
a busy machine slows both alike (a row is the seconds of one grading run of all the students, the mean of
--repeats runs of a side; the last line divides the totals by the number of students). Smoke mode, two workers,
as the grader runs by default on two cores.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = """
import sys
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[1]) / "benchmarks"))
import grade_course
course, tree = Path(sys.argv[2]), Path(sys.argv[1])
course.mkdir(parents=True)
grade_course.build_course(course, sys.argv[4].split(","), [f"student{i + 1}" for i in range(int(sys.argv[3]))])
"""


def earlier_side(commit, scratch):
    """(tree, python) of ``commit``: a detached worktree and a copy of this venv with that tree installed."""
    tree, venv = scratch / "before-tree", scratch / "before-venv"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True,
                   capture_output=True)
    shutil.copytree(sys.prefix, venv, symlinks=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(tree)], check=True,
                   capture_output=True)
    return tree, python


def common_assignments(trees):
    """The assignments every side has (a notebook added since is left out, and said so)."""
    names = [{p.name for p in (tree / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists()} for tree in trees]
    shared = set.intersection(*names)
    if set.union(*names) - shared:
        print(f"left out (not on both sides): {', '.join(sorted(set.union(*names) - shared))}")
    return sorted(shared)


def grade(python, course, assignment, env):
    started = time.perf_counter()
    subprocess.run([str(python), "-m", "autograder", "grade", assignment, "--workers", "2"], cwd=course, env=env,
                   check=True, capture_output=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the earlier commit")
    parser.add_argument("--students", type=int, default=2)
    parser.add_argument("--assignments", nargs="*", help="only these (default: every assignment both sides have)")
    parser.add_argument("--repeats", type=int, default=1, help="grade each assignment this often on each side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grader-overhead-") as folder:
        scratch = Path(folder)
        sides = {"before": earlier_side(args.before, scratch), "after": (ROOT, Path(sys.executable))}
        envs = {name: dict(os.environ, COURSE_SMOKE="1", MPLBACKEND="Agg",
                           PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}")
                for name, (_, python) in sides.items()}
        shared = common_assignments([tree for tree, _ in sides.values()])
        shared = [a for a in shared if not args.assignments or a in args.assignments]
        for name, (tree, python) in sides.items():
            subprocess.run([str(python), "-c", BUILD, str(tree), str(scratch / name), str(args.students),
                            ",".join(shared)], env=envs[name], check=True)
        totals = dict.fromkeys(sides, 0.0)
        for assignment in shared:
            row = dict.fromkeys(sides, 0.0)
            for _ in range(args.repeats):
                for name, (_, python) in sides.items():
                    course = scratch / f"{name}-{assignment}"
                    shutil.copytree(scratch / name, course)
                    row[name] += grade(python, course, assignment, envs[name]) / args.repeats
                    shutil.rmtree(course)
            for name in sides:
                totals[name] += row[name]
            print(f"{assignment:28s} before {row['before']:6.1f} s   after {row['after']:6.1f} s   "
                  f"(one run for {args.students} students)", flush=True)
        print(f"per student: before {totals['before'] / args.students:.1f} s, after "
              f"{totals['after'] / args.students:.1f} s ({100 * (totals['after'] / totals['before'] - 1):+.1f} %)")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "before-tree")],
                       check=False, capture_output=True)


if __name__ == "__main__":
    main()
