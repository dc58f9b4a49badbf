"""Regenerate the student releases (notebooks/) from the instructor sources (solutions/).

The course's setting (pyproject.toml: the ``[project]`` version and ``[tool.transformer-course]``) says where
students install the course from. ``release_course`` writes it into the install cell of every solution and into the
README's install line and Colab badges, then runs plain ``nbgrader generate_assignment`` in a scratch course
directory, so that no gradebook or log is left in the repository, and copies each release over
``notebooks/<assignment>/``.

A notebook's install cell installs the course with the extras that notebook needs (the exercise registry's
``EXTRAS``, course_testkit/exercises.py): spaCy, sacreBLEU and SentencePiece come only with the notebooks
that tokenise, train subwords or score BLEU, so the first notebooks are ready in seconds.

The setting is written only into a repository's own ``solutions/`` (the folder next to a pyproject.toml with a
``[tool.transformer-course]`` table), and only into that repository's README: given the sources of a course
directory, the command generates the releases and leaves every file outside them as it is.
"""
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import CONFIG
from .nbgrader_course import nbgrader_api, nbgrader_output, nbgrader_reason

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
INSTALL_ID = "install"  # the nbgrader grade_id of every notebook's first code cell
COLAB_BADGE = re.compile(r"https://colab\.research\.google\.com/github/[^/\s)]+/[^/\s)]+/blob/[^/\s)]+/notebooks/")
README_INSTALL = re.compile(r"(?<=`pip install )(?:git\+[^`\s]+|[\w.-]+==[^`\s]+)(?=`)")
INSTALL_TEMPLATE = '''\
# On Colab or a fresh machine: install the course package (with what this notebook needs) if it is missing;
# say so if it is another version.
import importlib.util, subprocess, sys

COURSE_VERSION = "{version}"
COURSE_PACKAGE = "{package}"
NEEDED = {modules}

if any(importlib.util.find_spec(module) is None for module in NEEDED):
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", COURSE_PACKAGE], check=True)
    importlib.invalidate_caches()
import transformer_course

if transformer_course.__version__ != COURSE_VERSION:
    print(f"This notebook is for course version {{COURSE_VERSION}}; the installed transformer_course is "
          f"{{transformer_course.__version__}}: reinstall with `%pip install '{{COURSE_PACKAGE}}'`, then restart the kernel")
'''


class ReleaseError(Exception):
    """The command cannot run as asked (no solutions folder, an unknown assignment): one line for the user."""


@dataclass(frozen=True)
class Course:
    """Which version of the course students install, and from where."""
    name: str          # the distribution: transformer-course
    version: str
    repository: str    # https://github.com/<owner>/<repo>
    install_from: str  # "git": the repository's tag v<version>; "index": name==version from PyPI
    extras: dict = field(default_factory=dict)           # extra -> the modules it brings ([project.optional-dependencies])
    notebook_extras: dict = field(default_factory=dict)  # assignment -> the extras its install cell installs

    @property
    def tag(self):
        return f"v{self.version}"

    @property
    def package(self):
        """What pip installs: the course alone."""
        return self.requirement()

    def requirement(self, extras=()):
        """What pip installs for the course with ``extras``."""
        with_extras = f"{self.name}[{','.join(extras)}]" if extras else self.name
        if self.install_from == "git":
            url = f"git+{self.repository}@{self.tag}"
            return f"{with_extras} @ {url}" if extras else url
        if self.install_from == "index":
            return f"{with_extras}=={self.version}"
        raise ValueError(f"install-from must be 'git' or 'index', not {self.install_from!r}")

    def needs(self, assignment):
        """(extras, modules): what the install cell of ``assignment`` installs besides the course, and the
        modules whose absence makes it install."""
        extras = tuple(self.notebook_extras.get(assignment, ()))
        return extras, ("transformer_course", *(m for extra in extras for m in self.extras[extra]))

    @property
    def colab(self):
        """Where the Colab links to the release notebooks of this version begin."""
        github = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?", self.repository)
        if not github:
            raise ValueError(f"repository must be https://github.com/<owner>/<repo>, not {self.repository!r}")
        return f"https://colab.research.google.com/github/{github[1]}/blob/{self.tag}/notebooks/"


def _module_of(requirement):
    """The module a requirement of the course's extras installs (each is named like its distribution)."""
    return re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower().replace("-", "_")


def read_course(pyproject=ROOT / "pyproject.toml") -> Course:
    """The course's setting: the [project] name, version and extras, the [tool.transformer-course] repository and
    source, and the extras of each notebook (the exercise registry's)."""
    from .registry import registry

    with open(pyproject, "rb") as file:
        toml = tomllib.load(file)
    setting = toml["tool"]["transformer-course"]
    extras = {name: tuple(_module_of(r) for r in requirements)
              for name, requirements in toml["project"].get("optional-dependencies", {}).items()}
    notebook_extras = registry().extras
    unknown = sorted({e for wanted in notebook_extras.values() for e in wanted} - set(extras))
    if unknown:
        raise ValueError(f"the exercise registry's EXTRAS names extras that {pyproject}'s "
                         f"[project.optional-dependencies] lacks: {', '.join(unknown)}")
    return Course(toml["project"]["name"], toml["project"]["version"], setting["repository"].rstrip("/"),
                  setting["install-from"], extras, notebook_extras)


def install_cell_source(version: str, package: str, modules=("transformer_course",)) -> str:
    """The install cell: pip installs ``package`` when one of ``modules`` is missing (the course package, and
    those of the extras the notebook needs), and the cell prints a line when the installed course is not
    ``version``."""
    return INSTALL_TEMPLATE.format(version=version, package=package, modules=json.dumps(list(modules))).rstrip("\n")


def course_install_cell(course: Course, assignment: str) -> str:
    """The install cell of ``assignment``: the course, with the extras that notebook needs."""
    extras, modules = course.needs(assignment)
    return install_cell_source(course.version, course.requirement(extras), modules)


def install_cell(notebook):
    """The notebook's install cell."""
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == INSTALL_ID:
            return cell
    raise ValueError(f"the notebook has no cell with grade_id '{INSTALL_ID}'")


def write_install_cell(path: Path, course: Course):
    """Write the course's install cell, and its version into the metadata, of the notebook at ``path``."""
    notebook = nbformat.read(path, as_version=4)
    install_cell(notebook).source = course_install_cell(course, path.stem)
    notebook.metadata["transformer_course"] = {"version": course.version}
    nbformat.write(notebook, path)


def update_readme(text: str, course: Course) -> str:
    """The README's text with the course's install line and Colab badges."""
    return COLAB_BADGE.sub(course.colab, README_INSTALL.sub(course.package, text))


def assignments(solutions: Path):
    """The assignment ids: the folders of ``solutions/`` that hold a notebook of the same name."""
    if not solutions.is_dir():
        raise ReleaseError(f"{solutions} is not a folder: `release` regenerates a course repository's notebooks/ "
                           f"from its solutions/ (run it in the repository, or give --solutions); in an nbgrader "
                           f"course directory, use `nbgrader generate_assignment ASSIGNMENT`")
    return sorted(p.name for p in solutions.iterdir() if (p / f"{p.name}.ipynb").exists())


def checked_names(solutions: Path, names=None) -> list:
    """``names`` (all assignments by default), once each is known to be an assignment of ``solutions``."""
    known = assignments(solutions)
    names = names or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ReleaseError(f"no such assignment in {solutions}: {', '.join(unknown)}")
    if not names:
        raise ReleaseError(f"{solutions} holds no assignment (a folder NAME with a notebook NAME.ipynb)")
    return names


def course_repository(solutions: Path):
    """The course repository whose own ``solutions`` these are (the folder above, with a pyproject.toml that
    has a [tool.transformer-course] table), or None: then the command writes no setting anywhere."""
    repository = solutions.resolve().parent
    try:
        with open(repository / "pyproject.toml", "rb") as file:
            toml = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return repository if solutions.resolve().name == "solutions" and "transformer-course" in toml.get("tool", {}) \
        else None


def release_course(solutions: Path, destination: Path, names=None, log=print) -> list:
    """``python -m autograder release``: in a course repository, the course's setting into its solutions and
    its README; then the student release of each assignment in ``names`` (all by default) under
    ``destination``. Outside a repository's own solutions/, only the releases are written."""
    names, repository = checked_names(solutions, names), course_repository(solutions)
    if repository is None:
        log(f"note: {solutions} is not a course repository's solutions/: its install cells and any README are left "
            f"as they are")
    else:
        course = read_course(repository / "pyproject.toml")
        for name in names:
            write_install_cell(solutions / name / f"{name}.ipynb", course)
        readme = repository / "README.md"
        if readme.exists():
            readme.write_text(update_readme(readme.read_text(encoding="utf-8"), course), encoding="utf-8")
    return generate_releases(solutions, destination, names)


def generate_releases(solutions: Path, destination: Path, names=None) -> list:
    """Write the student release of each assignment in ``names`` (all by default) under ``destination``: nbgrader's
    generate_assignment in a scratch course, every assignment in this one process (a process of its own would
    import nbgrader again for each)."""
    names = checked_names(solutions, names)
    with tempfile.TemporaryDirectory(prefix="nbgrader-release-") as scratch:
        course = Path(scratch)
        shutil.copy(CONFIG, course / "nbgrader_config.py")
        api = nbgrader_api(course)
        for name in names:
            shutil.copytree(solutions / name, course / "source" / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
            result = api.generate_assignment(name, force=True)
            if not result["success"] or not (course / "release" / name).is_dir():
                raise ReleaseError(f"nbgrader generate_assignment {name} failed: {nbgrader_reason(nbgrader_output(result))}")
            target = destination / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(course / "release" / name, target)
    return names
