"""Regenerate the student releases (notebooks/) from the instructor sources (solutions/).

The course's setting (pyproject.toml: the ``[project]`` version and ``[tool.transformer-course]``) says where
students install the course from. ``release_course`` writes it into the install cell of every solution and into the
README's install line and Colab badges, then runs plain ``nbgrader generate_assignment`` in a scratch course
directory, so that no gradebook or log is left in the repository, and copies each release over
``notebooks/<assignment>/``.
"""
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import CONFIG

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
INSTALL_ID = "install"  # the nbgrader grade_id of every notebook's first code cell
COLAB_BADGE = re.compile(r"https://colab\.research\.google\.com/github/[^/\s)]+/[^/\s)]+/blob/[^/\s)]+/notebooks/")
README_INSTALL = re.compile(r"(?<=`pip install )(?:git\+[^`\s]+|[\w.-]+==[^`\s]+)(?=`)")
INSTALL_TEMPLATE = '''\
# On Colab or a fresh machine: install the course package if it is missing; say so if it is another version.
import importlib.util, subprocess, sys

COURSE_VERSION = "{version}"
COURSE_PACKAGE = "{package}"

if importlib.util.find_spec("transformer_course") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", COURSE_PACKAGE], check=True)
    importlib.invalidate_caches()
import transformer_course

if transformer_course.__version__ != COURSE_VERSION:
    print(f"This notebook is for course version {{COURSE_VERSION}}; the installed transformer_course is "
          f"{{transformer_course.__version__}}: reinstall with `%pip install {{COURSE_PACKAGE}}`, then restart the kernel")
'''


@dataclass(frozen=True)
class Course:
    """Which version of the course students install, and from where."""
    name: str          # the distribution: transformer-course
    version: str
    repository: str    # https://github.com/<owner>/<repo>
    install_from: str  # "git": the repository's tag v<version>; "index": name==version from PyPI

    @property
    def tag(self):
        return f"v{self.version}"

    @property
    def package(self):
        """What pip installs."""
        if self.install_from == "git":
            return f"git+{self.repository}@{self.tag}"
        if self.install_from == "index":
            return f"{self.name}=={self.version}"
        raise ValueError(f"install-from must be 'git' or 'index', not {self.install_from!r}")

    @property
    def colab(self):
        """Where the Colab links to the release notebooks of this version begin."""
        github = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?", self.repository)
        if not github:
            raise ValueError(f"repository must be https://github.com/<owner>/<repo>, not {self.repository!r}")
        return f"https://colab.research.google.com/github/{github[1]}/blob/{self.tag}/notebooks/"


def read_course(pyproject=ROOT / "pyproject.toml") -> Course:
    """The course's setting: the [project] name and version, the [tool.transformer-course] repository and source."""
    with open(pyproject, "rb") as file:
        toml = tomllib.load(file)
    setting = toml["tool"]["transformer-course"]
    return Course(toml["project"]["name"], toml["project"]["version"], setting["repository"].rstrip("/"),
                  setting["install-from"])


def install_cell_source(version: str, package: str) -> str:
    """The install cell: pip installs ``package`` when the course package is missing, and the cell prints a
    line when the installed one is not ``version``."""
    return INSTALL_TEMPLATE.format(version=version, package=package).rstrip("\n")


def install_cell(notebook):
    """The notebook's install cell."""
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == INSTALL_ID:
            return cell
    raise ValueError(f"the notebook has no cell with grade_id '{INSTALL_ID}'")


def write_install_cell(path: Path, course: Course):
    """Write the course's install cell, and its version into the metadata, of the notebook at ``path``."""
    notebook = nbformat.read(path, as_version=4)
    install_cell(notebook).source = install_cell_source(course.version, course.package)
    notebook.metadata["transformer_course"] = {"version": course.version}
    nbformat.write(notebook, path)


def update_readme(text: str, course: Course) -> str:
    """The README's text with the course's install line and Colab badges."""
    return COLAB_BADGE.sub(course.colab, README_INSTALL.sub(course.package, text))


def assignments(solutions: Path):
    """The assignment ids: the folders of ``solutions/`` that hold a notebook of the same name."""
    return sorted(p.name for p in solutions.iterdir() if (p / f"{p.name}.ipynb").exists())


def checked_names(solutions: Path, names=None) -> list:
    """``names`` (all assignments by default), once each is known to be an assignment of ``solutions``."""
    names = names or assignments(solutions)
    unknown = sorted(set(names) - set(assignments(solutions)))
    if unknown:
        raise ValueError(f"no such assignment in {solutions}: {', '.join(unknown)}")
    return names


def release_course(solutions: Path, destination: Path, names=None, readme: Path = ROOT / "README.md") -> list:
    """``python -m autograder release``: the course's setting into the solutions and the README, then the
    student release of each assignment in ``names`` (all by default) under ``destination``."""
    names, course = checked_names(solutions, names), read_course()
    for name in names:
        write_install_cell(solutions / name / f"{name}.ipynb", course)
    readme.write_text(update_readme(readme.read_text(encoding="utf-8"), course), encoding="utf-8")
    return generate_releases(solutions, destination, names)


def generate_releases(solutions: Path, destination: Path, names=None) -> list:
    """Write the student release of each assignment in ``names`` (all by default) under ``destination``."""
    names = checked_names(solutions, names)
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
