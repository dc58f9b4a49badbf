"""Instructor commands, run in the course directory (the one with nbgrader_config.py; the gradebook is where
its CourseDirectory.db_url says, by default gradebook.db there):

    python -m autograder release [ASSIGNMENT ...]     regenerate notebooks/ from solutions/ (course maintainers)
    python -m autograder grade ASSIGNMENT             grade every submission, sandboxed and in parallel
                                   [--scheduler tcp://HOST:8786]  on a Dask cluster's workers
    python -m autograder feedback ASSIGNMENT          one HTML page per student and notebook, no test code
    python -m autograder report ASSIGNMENT            the grade CSVs again, from the gradebook as it is now
    python -m autograder check NOTEBOOK.ipynb         a student's check: what the grader will make of it
    python -m autograder similarity ASSIGNMENT        near-identical answers, ranked, for a person to judge
    python -m autograder export ASSIGNMENT --lms canvas   the grades as Canvas (or Moodle) imports them
"""
import argparse
import os
import sys
from pathlib import Path

from .execution.sandbox import CELL_TIMEOUT, Limits
from .release import ReleaseError, release_course
from .similarity import DEFAULT_THRESHOLD, DEFAULT_TOP, SimilarityError, similarity_report


def _grade_arguments(grade):
    """The options of `grade`: where, who, on which workers, and the limits (their defaults are Limits')."""
    grade.add_argument("assignment")
    grade.add_argument("--course", type=Path, default=Path("."), help="course directory (default: here)")
    grade.add_argument("--student", action="append", dest="students", help="grade only this student (repeatable)")
    grade.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                       help="submissions executed at once on this machine (default: one per core, %(default)s)")
    grade.add_argument("--scheduler", metavar="tcp://HOST:8786",
                       help="execute the submissions on the workers of this Dask scheduler (each with the course's "
                            "environment and bubblewrap); repair, sanitize and record stay here")
    grade.add_argument("--resume", action="store_true",
                       help="keep the submissions an earlier, interrupted run recorded, unless they changed since")
    grade.add_argument("--cell-timeout", type=float,
                       help="seconds per cell (default: c.Execute.timeout of the course's nbgrader_config.py, the limit "
                            "plain nbgrader uses too)")
    grade.add_argument("--notebook-timeout", type=float, default=Limits.total_timeout,
                       help="seconds per notebook, all cells together (default: %(default)s)")
    grade.add_argument("--memory", type=int, default=Limits.memory_mb, help="MB of memory per submission (default: %(default)s)")
    grade.add_argument("--processes", type=int, default=Limits.processes,
                       help="processes and threads per submission (default: %(default)s)")
    grade.add_argument("--output", type=int, default=Limits.output_bytes,
                       help="bytes of output kept per cell; more stops the cell (default: %(default)s)")
    grade.add_argument("--full-training", action="store_true",
                       help="run the training demos at full length (default: COURSE_SMOKE=1, a few steps)")
    grade.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run student code without bubblewrap, with your rights (only where it cannot be installed)")


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("release", help="write the course's install line (pyproject.toml) into the solutions "
                                                  "and the README, and regenerate the student releases from the "
                                                  "solutions with nbgrader generate_assignment")
    release.add_argument("assignments", nargs="*", help="assignment ids (default: every folder of solutions/)")
    release.add_argument("--solutions", type=Path, default=Path("solutions"), help="instructor sources (default: %(default)s)")
    release.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="where the releases go (default: %(default)s)")

    grade = commands.add_parser("grade", help="grade submitted/*/ASSIGNMENT into the gradebook, grades-ASSIGNMENT.csv "
                                              "(per notebook) and grades-ASSIGNMENT-cells.csv (per cell)")
    _grade_arguments(grade)

    feedback = commands.add_parser("feedback", help="write feedback/STUDENT/ASSIGNMENT/NOTEBOOK.html")
    feedback.add_argument("assignment")
    feedback.add_argument("--course", type=Path, default=Path("."), help="course directory (default: here)")
    feedback.add_argument("--student", action="append", dest="students", help="only this student (repeatable)")

    report = commands.add_parser("report", help="write grades-ASSIGNMENT.csv and grades-ASSIGNMENT-cells.csv again "
                                                "from the gradebook: after grading written answers in the formgrader")
    report.add_argument("assignment")
    report.add_argument("--course", type=Path, default=Path("."), help="course directory (default: here)")

    check = commands.add_parser("check", help="run a notebook as the grader would and report what will cost points",
                                description="A student's check before handing in: the notebook runs in a fresh "
                                            "kernel with the grader's limits; per exercise, the visible tests "
                                            "passed and the points their failures cost (the hidden tests can "
                                            "cost more). Exit status 1 when something will "
                                            "cost points.")
    check.add_argument("notebook", type=Path)
    check.add_argument("--release", type=Path, help="the release notebook to compare with (default: the course's)")
    check.add_argument("--cell-timeout", type=float,
                       help=f"seconds per cell (default: the grader's, c.Execute.timeout of the course's "
                            f"configuration: {CELL_TIMEOUT:g})")
    check.add_argument("--verbose", action="store_true", help="list every repair of the notebook's grading metadata")

    similarity = commands.add_parser(
        "similarity", help="write similarity-ASSIGNMENT.csv and .html: near-identical answers, ranked",
        description="For every exercise, rank the pairs of submissions, and each submission against the "
                    "course package's finished source ('<course package>'), whose answers are near-identical "
                    "once names, comments and formatting are normalised. A report for a person to judge, not "
                    "an automatic zero: near-identical answers to a short exercise can be honest.")
    similarity.add_argument("assignment")
    similarity.add_argument("--course", type=Path, default=Path("."), help="course directory (default: here)")
    similarity.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                            help="list pairs scoring at least this, from 0 to 1 (default: %(default)s)")
    similarity.add_argument("--top", type=int, default=DEFAULT_TOP,
                            help="pairs shown per exercise on the HTML page; the CSV has all (default: %(default)s)")
    export = commands.add_parser("export", help="write canvas-ASSIGNMENT.csv or moodle-ASSIGNMENT.csv from the grades "
                                                "CSV and the LMS ids kept at collection")
    export.add_argument("assignment")
    export.add_argument("--lms", choices=["canvas", "moodle"], required=True)
    export.add_argument("--column", help="Canvas: the assignment's name in Canvas's gradebook (default: ASSIGNMENT)")
    export.add_argument("--course", type=Path, default=Path("."), help="course directory (default: here)")
    return parser


def main(argv=None):
    """The command: its exit status. 2 and one line on stderr when it refuses (bad input, nothing written); for
    `grade`, 1 when a submission could not be graded (everyone else is), for `check`, 1 when something will cost
    points."""
    args = build_parser().parse_args(argv)
    if args.command == "grade" and args.scheduler is None:
        # Its local workers' fork server imports what they need (3-5 s) while this command imports and checks.
        from .execution.local_workers import fork_server
        fork_server(args.assignment)
    from .export import ExportError  # reads no nbgrader: a student's check imports it too

    refusals = (ReleaseError, SimilarityError, ExportError)
    if args.command != "check":     # a student's check runs where nbgrader is not installed (Colab)
        from .grade import GradingError

        refusals += (GradingError,)
    try:
        return _run(args)
    except refusals as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _run(args):
    if args.command == "release":
        for name in release_course(args.solutions, args.notebooks, args.assignments):
            print(f"released {args.notebooks / name}")
    elif args.command == "grade":
        return _grade(args)
    elif args.command == "check":
        from .check import main as check_main

        return check_main(args.notebook, args.release, args.cell_timeout, verbose=args.verbose)
    elif args.command == "feedback":
        from .feedback import generate_feedback

        generate_feedback(args.course, args.assignment, students=args.students)
    elif args.command == "report":
        from .grade import report_assignment

        report_assignment(args.course, args.assignment)
    elif args.command == "export":         # reads the grades CSV and the collector's record only
        from .export import export_grades

        export_grades(args.course, args.assignment, args.lms, column=args.column)
    elif args.command == "similarity":     # reads release/ and submitted/ only: no gradebook, no configuration
        similarity_report(args.course, args.assignment, threshold=args.threshold, top=args.top)
    return 0


def _grade(args):
    """`grade`: prints "N graded, M failed" last; exit status 1 when a submission could not be graded."""
    from .grade import course_cell_timeout, failed_students, grade_assignment

    # a course without a limit per cell (c.Execute.timeout None or -1) still has one per notebook
    cell_timeout = args.cell_timeout or course_cell_timeout(args.course) or args.notebook_timeout
    limits = Limits(cell_timeout=cell_timeout, total_timeout=args.notebook_timeout, memory_mb=args.memory,
                    processes=args.processes, output_bytes=args.output)
    env = {"COURSE_SMOKE": "0"} if args.full_training else {}
    reports = grade_assignment(args.course, args.assignment, workers=args.workers, limits=limits,
                               students=args.students, sandbox=not args.unsafe_no_sandbox, env=env,
                               scheduler=args.scheduler, resume=args.resume)
    failed = failed_students(reports)
    why = (f": {', '.join(failed)} (why: the error column of grades-{args.assignment}.csv; the whole story: "
           f".autograder/{args.assignment}/logs/STUDENT.txt)") if failed else ""
    print(f"{len(reports) - len(failed)} graded, {len(failed)} failed{why}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
