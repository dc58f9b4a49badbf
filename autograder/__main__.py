"""Instructor commands. ``python -m autograder release [ASSIGNMENT ...]`` regenerates notebooks/."""
import argparse
from pathlib import Path

from .release import generate_releases


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("release", help="regenerate the student releases from the solutions "
                                                  "with nbgrader generate_assignment")
    release.add_argument("assignments", nargs="*", help="assignment ids (default: every folder of solutions/)")
    release.add_argument("--solutions", type=Path, default=Path("solutions"), help="instructor sources (default: %(default)s)")
    release.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="where the releases go (default: %(default)s)")
    args = parser.parse_args(argv)

    if args.command == "release":
        for name in generate_releases(args.solutions, args.notebooks, args.assignments):
            print(f"released {args.notebooks / name}")


if __name__ == "__main__":
    main()
