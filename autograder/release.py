"""Regenerate the student releases (notebooks/) from the instructor sources (solutions/).

Runs plain ``nbgrader generate_assignment`` in a scratch course directory, so that no gradebook or
log is left in the repository, then copies each release over ``notebooks/<assignment>/``.
"""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import CONFIG


def assignments(solutions: Path):
    """The assignment ids: the folders of ``solutions/`` that hold a notebook of the same name."""
    return sorted(p.name for p in solutions.iterdir() if (p / f"{p.name}.ipynb").exists())


def generate_releases(solutions: Path, destination: Path, names=None) -> list:
    """Write the student release of each assignment in ``names`` (all by default) under ``destination``."""
    names = names or assignments(solutions)
    unknown = sorted(set(names) - set(assignments(solutions)))
    if unknown:
        raise ValueError(f"no such assignment in {solutions}: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="nbgrader-release-") as scratch:
        course = Path(scratch)
        shutil.copy(CONFIG, course / "nbgrader_config.py")
        for name in names:
            shutil.copytree(solutions / name, course / "source" / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
            subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force",
                            "--log-level=WARN"], cwd=course, check=True)
            target = destination / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(course / "release" / name, target)
    return names
