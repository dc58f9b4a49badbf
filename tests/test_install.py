"""Students install one pinned version of the course: the one pyproject.toml names.

Every notebook's install cell, its metadata and the README's install line and Colab badges follow the
course's setting (``python -m autograder release`` writes them). The first notebooks install the course alone;
spaCy, sacreBLEU and SentencePiece (the `text` extra) come only with the notebooks that use them, and importing the
package never needs them. The slow test does what a student on Colab does: in a fresh environment with only
torch, it runs a notebook's install cell (against the repository's wheel instead of the pinned package) and the
set-up cells, first of notebook 01 (no extra installed), then of the others.
"""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata

import nbformat
import pytest
from support.notebooks import ROOT, SOLUTIONS

import transformer_course
from autograder.release import (
    Course,
    assignments,
    course_install_cell,
    install_cell,
    install_cell_source,
    read_course,
    tomllib,
    update_readme,
)

NOTEBOOKS = ROOT / "notebooks"
COURSE = read_course()
MISMATCH = "This notebook is for course version"
STALE = "run `python -m autograder release` to write the course's setting (pyproject.toml) into it"


def read(folder, assignment):
    return nbformat.read(folder / assignment / f"{assignment}.ipynb", as_version=4)


@pytest.mark.parametrize("folder", [SOLUTIONS, NOTEBOOKS], ids=["solutions", "notebooks"])
def test_install_cells_install_the_course_version(folder):
    for assignment in assignments(SOLUTIONS):
        notebook = read(folder, assignment)
        assert install_cell(notebook).source == course_install_cell(COURSE, assignment), f"{folder.name}/{assignment}: {STALE}"
        assert notebook.metadata["transformer_course"] == {"version": COURSE.version}, f"{assignment}: {STALE}"


def test_readme_installs_and_opens_the_course_version():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert update_readme(text, COURSE) == text, f"README.md: {STALE}"
    assert f"`pip install {COURSE.package}`" in text
    for assignment in assignments(SOLUTIONS):
        assert f"({COURSE.colab}{assignment}/{assignment}.ipynb)" in text, f"README.md: no badge for {assignment}"


def test_the_package_reports_its_version():
    assert transformer_course.__version__ == COURSE.version, \
        "the installed metadata is stale: reinstall the package (pip install -e .)"


TEXT = ("spacy", "sacrebleu", "sentencepiece")   # the `text` extra: tokenising, BLEU, subwords


def test_only_the_notebooks_that_tokenise_or_score_bleu_install_the_text_extra():
    """Notebooks 01-04 used to install spaCy, sacreBLEU and SentencePiece (about 44 packages, 27 s) they never use."""
    assert COURSE.extras["text"] == TEXT
    with open(ROOT / "pyproject.toml", "rb") as file:
        dependencies = " ".join(tomllib.load(file)["project"]["dependencies"])
    assert not any(name in dependencies for name in TEXT), f"the course's own dependencies hold the text extra: {dependencies}"
    for assignment in ("01_positional_encoding", "02_attention", "03_masking", "04_multi_head_attention",
                       "05_layer_norm_feed_forward", "06_transformer"):
        cell = course_install_cell(COURSE, assignment)
        assert 'NEEDED = ["transformer_course"]' in cell and "[text]" not in cell, cell
    for assignment in ("07_training", "08_decoding_bleu", "09_gpt"):
        cell = course_install_cell(COURSE, assignment)
        assert f'NEEDED = ["transformer_course", {", ".join(map(repr, TEXT))}]'.replace("'", '"') in cell, cell
        assert f'"transformer-course[text] @ git+{COURSE.repository}@{COURSE.tag}"' in cell, cell
    index = Course("transformer-course", "1.2.0", "https://github.com/someone/course", "index", COURSE.extras,
                   COURSE.notebook_extras)
    assert index.requirement(("text",)) == "transformer-course[text]==1.2.0"
    assert "-e .[dev,text]" in (ROOT / "requirements.txt").read_text(), "CI and local set-ups must get every notebook's needs"


def test_importing_the_package_needs_no_text_extra():
    """Every module of the package imports without spaCy, sacreBLEU and SentencePiece; using one says what to install."""
    script = ("import sys, pkgutil, importlib\n"
              "for name in ('spacy', 'sacrebleu', 'sentencepiece'):\n    sys.modules[name] = None\n"
              "import transformer_course\n"
              "for module in pkgutil.walk_packages(transformer_course.__path__, 'transformer_course.'):\n"
              "    importlib.import_module(module.name)\n"
              "from transformer_course.data import spacy_tokenizer\n"
              "try:\n    spacy_tokenizer('en')\nexcept ModuleNotFoundError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tokenising needs spacy, which comes with the course's `text` extra" in done.stdout, done.stdout


def test_install_sources():
    git = Course("transformer-course", "1.2.0", "https://github.com/someone/course", "git")
    index = Course("transformer-course", "1.2.0", "https://github.com/someone/course", "index")
    assert git.package == "git+https://github.com/someone/course@v1.2.0"
    assert index.package == "transformer-course==1.2.0"
    assert git.colab == "https://colab.research.google.com/github/someone/course/blob/v1.2.0/notebooks/"
    old = ("`pip install git+https://github.com/a/b` [![Open In Colab](badge.svg)]"
           "(https://colab.research.google.com/github/a/b/blob/main/notebooks/01_x/01_x.ipynb)")
    assert update_readme(old, git) == ("`pip install git+https://github.com/someone/course@v1.2.0` [![Open In Colab]"
                                       "(badge.svg)](https://colab.research.google.com/github/someone/course/blob/"
                                       "v1.2.0/notebooks/01_x/01_x.ipynb)")
    with pytest.raises(ValueError, match="install-from"):
        _ = Course("transformer-course", "1.2.0", "https://github.com/someone/course", "conda").package
    with pytest.raises(ValueError, match="github.com"):
        _ = Course("transformer-course", "1.2.0", "https://gitlab.com/someone/course", "git").colab


def build_wheel(tmp_path):
    """The repository's wheel, built from a copy so that no build/ or *.egg-info is left in the repository."""
    source = tmp_path / "source"
    for package in ("transformer_course", "course_testkit", "autograder", "notebooks"):   # notebooks/: the releases
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "wheels"),
                    str(source)], check=True)
    (wheel,) = (tmp_path / "wheels").glob(f"transformer_course-{COURSE.version}-*.whl")
    shipped = zipfile.ZipFile(wheel).namelist()
    for assignment in assignments(SOLUTIONS):   # for a student's check (python -m autograder check)
        assert f"transformer_course/releases/{assignment}/{assignment}.ipynb" in shipped, f"{assignment} not in the wheel"
    # Every module of the package ships, its subpackages' too (pyproject.toml lists each package by name).
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "transformer_course").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert not modules - set(shipped), f"modules missing from the wheel: {sorted(modules - set(shipped))}"
    # The grader's modules ship, its subpackages' too: a student's `python -m autograder check` runs them.
    grader = {path.relative_to(ROOT).as_posix() for path in (ROOT / "autograder").rglob("*.py")
              if "__pycache__" not in path.parts}
    assert not grader - set(shipped), f"the grader's modules missing from the wheel: {sorted(grader - set(shipped))}"
    # The tests' kit ships beside the package, which holds none of it.
    assert {"course_testkit/exercises.py", "course_testkit/probes/gpt.py", "course_testkit/oracles/gpt.py"} <= set(shipped)
    assert not [name for name in shipped if name.startswith("transformer_course/") and
                any(part in name for part in ("probes", "oracles", "probing", "testing", "handin"))], shipped
    return wheel


def environment():
    """This process's environment, less what would let the fresh one see this checkout or this venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    # PIP_COMPILE=0: no byte-compiling of the installed packages, which only costs time here
    return {**env, "PYTHONNOUSERSITE": "1", "PIP_COMPILE": "0", "MPLBACKEND": "Agg"}


def torch_environment(folder):
    """A fresh virtual environment with torch only, as on Colab: its Python."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    torch = "torch==" + metadata.version("torch").partition("+")[0]  # the build this suite runs on
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-compile", torch], env=environment(), check=True)
    return python


def run_cells(python, folder, *sources):
    """Run the cells' sources one after the other in one process, as a kernel would: its output."""
    (folder / "cells.json").write_text(json.dumps(sources))
    (folder / "run_cells.py").write_text(
        "import json\nnamespace = {'__name__': '__main__'}\n"
        "for source in json.load(open('cells.json')):\n    exec(compile(source, '<cell>', 'exec'), namespace)\n"
        "print('transformer_course', namespace['transformer_course'].__version__, 'from', "
        "namespace['transformer_course'].__file__)\n")
    done = subprocess.run([python, "run_cells.py"], cwd=folder, env=environment(), capture_output=True, text=True)
    assert done.returncode == 0, f"the cells failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.long
def test_install_cell_installs_the_course_where_only_torch_is(tmp_path):
    wheel = build_wheel(tmp_path)
    python = torch_environment(tmp_path / "venv")
    setups = {name: [cell for cell in read(NOTEBOOKS, name).cells if cell.cell_type == "code"][1].source
              for name in assignments(SOLUTIONS)}
    first = "01_positional_encoding"

    def install_cell_of(assignment, version=COURSE.version, package=wheel):
        extras, modules = COURSE.needs(assignment)
        return install_cell_source(version, f"{package}[{','.join(extras)}]" if extras else str(package), modules)

    # Notebook 01 alone: the course, without the text extra.
    found = f"import importlib.util\nprint('text extra:', [m for m in {TEXT} if importlib.util.find_spec(m)])"
    output = run_cells(python, tmp_path, install_cell_of(first), setups[first], found)
    assert MISMATCH not in output and "text extra: []" in output, output
    # The others, in the same environment: notebook 07's cell installs the extra the course has now but lacks it.
    output = run_cells(python, tmp_path, *(install_cell_of(name) for name in setups), *setups.values())
    assert MISMATCH not in output
    assert f"transformer_course {COURSE.version} from {tmp_path / 'venv'}" in output

    # In a new process, the extra imports; and, the course installed now, a cell for another version installs nothing
    # (pip would fail on this missing file) and reports the mismatch.
    output = run_cells(python, tmp_path, "import spacy, sacrebleu, sentencepiece",
                       install_cell_source("0.0.1", str(tmp_path / "missing.whl")), setups[first])
    assert f"{MISMATCH} 0.0.1; the installed transformer_course is {COURSE.version}" in output
    assert f"%pip install '{tmp_path / 'missing.whl'}'" in output
