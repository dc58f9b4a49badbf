"""Instructor commands, run in the course directory (the one with nbgrader_config.py; the gradebook is where
its CourseDirectory.db_url says, by default gradebook.db there):

    python -m autograder release [ASSIGNMENT ...]     regenerate notebooks/ from solutions/ (course maintainers)
    python -m autograder grade ASSIGNMENT             grade every submission, sandboxed and in parallel
    python -m autograder feedback ASSIGNMENT          one HTML page per student and notebook, no test code
"""
import argparse
import os
import sys
from pathlib import Path

from .release import generate_releases


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("release", help="regenerate the student releases from the solutions "
                                                  "with nbgrader generate_assignment")
    release.add_argument("assignments", nargs="*", help="assignment ids (default: every folder of solutions/)")
    release.add_argument("--solutions", type=Path, default=Path("solutions"), help="instructor sources (default: %(default)s)")
    release.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="where the releases go (default: %(default)s)")

    grade = commands.add_parser("grade", help="grade submitted/*/ASSIGNMENT into the gradebook, grades-ASSIGNMENT.csv "
                                              "(per notebook) and grades-ASSIGNMENT-cells.csv (per cell)")
    grade.add_argument("assignment")
    grade.add_argument("--course", type=Path, default=Path("."), help="course directory (default: here)")
    grade.add_argument("--student", action="append", dest="students", help="grade only this student (repeatable)")
    grade.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                       help="submissions executed at once (default: one per core, %(default)s)")
    grade.add_argument("--cell-timeout", type=float, default=120, help="seconds per cell (default: %(default)s)")
    grade.add_argument("--notebook-timeout", type=float, default=1200,
                       help="seconds per notebook, all cells together (default: %(default)s)")
    grade.add_argument("--memory", type=int, default=4096, help="MB of memory per submission (default: %(default)s)")
    grade.add_argument("--processes", type=int, default=64,
                       help="processes and threads per submission (default: %(default)s)")
    grade.add_argument("--output", type=int, default=200_000,
                       help="bytes of output kept per cell; more stops the cell (default: %(default)s)")
    grade.add_argument("--full-training", action="store_true",
                       help="run the training demos at full length (default: COURSE_SMOKE=1, a few steps)")
    grade.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run student code without bubblewrap, with your rights (only where it cannot be installed)")

    feedback = commands.add_parser("feedback", help="write feedback/STUDENT/ASSIGNMENT/NOTEBOOK.html")
    feedback.add_argument("assignment")
    feedback.add_argument("--course", type=Path, default=Path("."), help="course directory (default: here)")
    feedback.add_argument("--student", action="append", dest="students", help="only this student (repeatable)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "release":
        for name in generate_releases(args.solutions, args.notebooks, args.assignments):
            print(f"released {args.notebooks / name}")
    elif args.command == "grade":
        from .grade import GradingError, grade_assignment
        from .sandbox import Limits

        limits = Limits(cell_timeout=args.cell_timeout, total_timeout=args.notebook_timeout, memory_mb=args.memory,
                        processes=args.processes, output_bytes=args.output)
        env = {"COURSE_SMOKE": "0"} if args.full_training else {}
        try:
            grade_assignment(args.course, args.assignment, workers=args.workers, limits=limits,
                             students=args.students, sandbox=not args.unsafe_no_sandbox, env=env)
        except GradingError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    elif args.command == "feedback":
        from .feedback import generate_feedback

        generate_feedback(args.course, args.assignment, students=args.students)
    return 0


if __name__ == "__main__":
    sys.exit(main())
