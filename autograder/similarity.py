"""``python -m autograder similarity ASSIGNMENT``: a copy report for instructors, for a person to judge.

For every exercise (answer cell) of the assignment, it compares each pair of submissions, and each
submission with the course package's finished source of that exercise (``<course package>``), and
writes the pairs whose answers are near-identical (a score of 0.9 or more by default), most similar
first, to ``similarity-ASSIGNMENT.csv`` and ``similarity-ASSIGNMENT.html`` (the two answers side by side,
the first 50 pairs of each exercise) in the course directory.

It is not a verdict and gives no marks: a short exercise has few sensible answers, and two honest
students can write the same line. A high score says where to look; the person reading the answers
decides.

How answers are compared
------------------------
* **Finding the answers.** Each submission is matched back to the release with repair.py, so that a
  notebook whose nbgrader metadata Colab dropped still gives its answer cells. A notebook that cannot be
  matched (another assignment's, broken JSON) is listed in the report, not compared.
* **Normalising.** Comments, docstrings and formatting go, and every name a student chose becomes a
  placeholder, while the names every student shares stay (source/normalise.py says how).
* **The scaffold does not count.** The release's own lines (signatures, ``super().__init__()``), which
  every student was given, are normalised the same way and removed from both sides. An answer with
  nothing left (the untouched stub, or the stub with a comment) is unanswered and pairs with nothing.
* **Score.** ``difflib.SequenceMatcher(...).ratio()`` over the two normalised token sequences:
  2 × (tokens in matching runs) / (tokens on both sides), 1.0 for the same code.

Red flags
---------
Every answer cell that uses what no exercise needs (source/red_flags.py: frames, hooks, the kernel, threads,
code built at run time), and every code cell a student added, is listed with a short label and the line,
whether or not it is in a similar pair, in ``redflags-ASSIGNMENT.csv`` and on the page, and beside each
answer of a pair: for a person to look at, not a verdict.
"""
import ast
import csv
import functools
import html
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .registry import KIT, package_folder, registry
from .repair import RepairError, repair_notebook
from .source.answers import (
    COPY_THRESHOLD,
    ORACLES,
    PACKAGE,
    SOLUTIONS,
    Answer,
    add_package_answers,
    answer_sources,
    compare,
    is_reference,
    release_exercises,
    same_text,
)
from .source.normalise import normalise
from .source.red_flags import RedFlag, red_flags

DEFAULT_THRESHOLD = 0.9
DEFAULT_TOP = 50                       # pairs shown per exercise on the page; the CSV has them all


class SimilarityError(Exception):
    """The course directory has no release of the assignment to compare against."""


@dataclass
class Flagged:
    """A cell with red flags: a student's answer to an exercise, or a code cell the student added."""
    owner: str
    where: str             # the exercise, or "added cell N"
    source: str
    flags: list
    notebook: str = ""


# ----------------------------------------------------------------------------- the answers


def submitted_notebook(path, release):
    """One submission matched back to the release by repair.py (Colab drops the metadata). Raises
    RepairError when it is not this release's notebook."""
    submitted = nbformat.read(str(path), as_version=4)
    return repair_notebook(submitted, release, Path(path).name)[0]


def submitted_answers(path, release):
    """grade_id -> answer of one submission, matched back to the release."""
    return answer_sources(submitted_notebook(path, release))


def added_cells_flagged(owner, submitted, release, prefix="", notebook=""):
    """Flagged code cells that the student added or changed outside the graded cells: they run in the
    kernel like the answers, so a hook placed there works as well."""
    known = {cell.source.strip() for cell in release.cells if cell.cell_type == "code"}
    flagged = []
    for number, cell in enumerate(submitted.cells, 1):
        if cell.cell_type == "code" and not cell.get("metadata", {}).get("nbgrader") \
                and cell.source.strip() not in known:
            flags = red_flags(cell.source)
            if flags:
                flagged.append(Flagged(owner, f"{prefix}added cell {number}", cell.source, flags, notebook))
    return flagged


def collect_answers(course, assignment):
    """Every exercise of the assignment with every student's answer, the flagged cells students added,
    and the submissions that could not be compared, as sentences."""
    from .nbgrader_course import submitted_students

    releases = {p.stem: nbformat.read(str(p), as_version=4)
                for p in sorted((course / "release" / assignment).glob("*.ipynb"))}
    if not releases:
        raise SimilarityError(f"{course / 'release' / assignment} has no notebook: run "
                              f"`nbgrader generate_assignment {assignment}` first")
    exercises, added, problems = [], [], []
    for notebook, release in releases.items():
        prefix = f"{notebook}: " if len(releases) > 1 else ""
        found = release_exercises(release, prefix, notebook)
        exercises += found
        for student in submitted_students(course, assignment):
            path = course / "submitted" / student / assignment / f"{notebook}.ipynb"
            try:
                submitted = submitted_notebook(path, release)
            except FileNotFoundError:
                problems.append(f"{student}: {notebook}.ipynb is missing from the submission")
                continue
            except RepairError as error:
                problems.append(f"{student}: {error}")
                continue
            except Exception as error:  # not a notebook at all (broken JSON, ...)
                problems.append(f"{student}: {notebook}.ipynb could not be read: {error}")
                continue
            answers = answer_sources(submitted)
            for exercise in found:
                exercise.add(student, answers.get(exercise.grade_id, exercise.stub))
            added += added_cells_flagged(student, submitted, release, prefix, notebook)
    return exercises, added, problems


def flagged_cells(exercises, added):
    """Every flagged cell, by student, answers in the exercises' order, then the cells they added."""
    order = {exercise.name: i for i, exercise in enumerate(exercises)}
    answers = [Flagged(a.owner, exercise.name, a.source, a.flags, exercise.notebook)
               for exercise in exercises for a in exercise.answers if a.flags]
    return sorted(answers + added, key=lambda f: (f.owner, order.get(f.where, len(order)), f.where))


def add_references(exercises, course, assignment):
    """Add every public source of an answer to each exercise: the package's finished version (``PACKAGE``), the
    course's own answer cell in ``source/ASSIGNMENT`` (``SOLUTIONS``) and each function of the notebook's oracles
    (``<course oracles: NAME>``)."""
    add_package_answers(exercises)
    for exercise in exercises:
        solution = _solution_answers(Path(course) / "source" / assignment / f"{exercise.notebook}.ipynb")
        if exercise.grade_id in solution:
            exercise.add(SOLUTIONS, solution[exercise.grade_id])
        for name, source in oracle_sources(assignment).items():
            exercise.add(f"{ORACLES}: {name}>", source)


@functools.lru_cache(maxsize=None)
def _solution_answers(path):
    try:
        return answer_sources(nbformat.read(str(path), as_version=4))
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=None)
def oracle_sources(assignment):
    """name -> source of each top-level function of the oracles of ``assignment`` (course_testkit/oracles,
    the registry's module for it), read from the kit's files without importing them; {} if it has none."""
    module = registry().test_modules.get(assignment)
    folder = package_folder(KIT)
    path = folder / "oracles" / f"{module}.py" if folder and module else None
    if path is None or not path.is_file():
        return {}
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    return {node.name: textwrap.dedent("".join(lines[node.lineno - 1:node.end_lineno]))
            for node in ast.parse(source).body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def flag_copies(exercises, threshold=COPY_THRESHOLD):
    """Add a red flag to every student's answer that is, or holds, a copy of a public source of the answer: the
    same text, or (where an exercise has more than about one way to write it) a score of ``threshold`` or more;
    each function or class the answer defines is compared too, so that an oracle pasted beside a class is seen."""
    for exercise in exercises:
        references = [a for a in exercise.answers if is_reference(a.owner)]
        for answer in exercise.answers:
            if not is_reference(answer.owner):
                copy = _copy_of(exercise, answer, references, threshold)
                if copy:
                    answer.flags.append(RedFlag(0, copy))


def _copy_of(exercise, answer, references, threshold):
    """"a copy of REFERENCE (...)" for the closest public source ``answer`` (or a definition in it) copies."""
    for part in [answer] + _definitions(answer, exercise.shared):
        same = [r for r in references if same_text(part.source, r.source)]
        if same:
            return f"a copy of {same[0].owner} (the same text)"
    if exercise.grade_id in registry().not_compared:
        return None
    pairs = [compare(exercise.name, part, r, threshold) for part in [answer] + _definitions(answer, exercise.shared)
             for r in references]
    best = max(filter(None, pairs), key=lambda p: p.score, default=None)
    return f"a copy of {best.b.owner} (similarity {best.score:.2f})" if best else None


MIN_DEFINITION_TOKENS = 40   # a definition shorter than this says too little to be called a copy on its own


def _definitions(answer, shared):
    """The top-level functions and classes of an answer with two or more of them, as Answers of their own."""
    try:
        tree = ast.parse(answer.source)
    except SyntaxError:
        return []
    lines = answer.source.splitlines(keepends=True)
    nodes = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    parts = []
    for node in nodes if len(nodes) > 1 else []:
        source = textwrap.dedent("".join(lines[node.lineno - 1:node.end_lineno]))
        normalised, parsed = normalise(source, shared)
        part = Answer(answer.owner, source, normalised, parsed)
        if len(part.tokens) >= MIN_DEFINITION_TOKENS:
            parts.append(part)
    return parts


def red_flag_counts(course, assignment, threshold=COPY_THRESHOLD):
    """{(student, notebook): red flags} of every submission of ``assignment`` (0 where it could not be read)."""
    try:
        exercises, added, _ = collect_answers(Path(course), assignment)
    except SimilarityError:
        return Counter()
    add_references(exercises, course, assignment)
    flag_copies(exercises, threshold)
    return flag_counts(exercises, added)


def flag_counts(exercises, added):
    """{(student, notebook): the number of red flags in that notebook's answers and added cells}."""
    counts = Counter()
    for exercise in exercises:
        for answer in exercise.answers:
            if not is_reference(answer.owner):
                counts[answer.owner, exercise.notebook] += len(answer.flags)
    for cell in added:
        counts[cell.owner, cell.notebook] += len(cell.flags)
    return counts


# ----------------------------------------------------------------------------- comparing

def rank_pairs(exercise, threshold=DEFAULT_THRESHOLD):
    """The pairs of answers scoring at least ``threshold``, most similar first; never two references. A reference,
    added after the students' answers, is always the pair's second."""
    pairs = []
    for i, a in enumerate(exercise.answers):
        for b in exercise.answers[i + 1:]:
            if is_reference(a.owner) and is_reference(b.owner):
                continue
            pair = compare(exercise.name, a, b, threshold)
            if pair is not None:
                pairs.append(pair)
    return sorted(pairs, key=lambda p: (-p.score, p.a.owner, p.b.owner))


# ----------------------------------------------------------------------------- the report

def similarity_report(course, assignment, threshold=DEFAULT_THRESHOLD, top=DEFAULT_TOP, log=print):
    """Compare every answer of ``assignment`` and write the CSV and the HTML page into the course
    directory; returns ``{exercise: [Pair, ...]}`` and the submissions that could not be compared."""
    course = Path(course).resolve()
    exercises, added, problems = collect_answers(course, assignment)
    add_references(exercises, course, assignment)
    flag_copies(exercises)
    ranked = {exercise.name: rank_pairs(exercise, threshold) for exercise in exercises}
    flagged = flagged_cells(exercises, added)
    csv_path = course / f"similarity-{assignment}.csv"
    flags_path = course / f"redflags-{assignment}.csv"
    html_path = course / f"similarity-{assignment}.html"
    write_csv(csv_path, ranked)
    write_flags_csv(flags_path, flagged)
    html_path.write_text(render(assignment, threshold, top, exercises, ranked, problems, flagged), encoding="utf-8")
    for problem in problems:
        log(f"not compared: {problem}")
    total = sum(len(pairs) for pairs in ranked.values())
    log(f"{total} pairs scored {threshold:g} or more over {len(exercises)} exercises: wrote {csv_path} and "
        f"{html_path}, for a person to judge")
    log(f"{len(flagged)} cells of {len({f.owner for f in flagged})} students have red flags: wrote {flags_path}")
    return ranked, problems


def _flag_list(flags):
    return "; ".join(str(flag) for flag in flags)


def write_csv(path, ranked):
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["exercise", "student_a", "student_b", "similarity", "reason", "red_flags_a", "red_flags_b"])
        for exercise, pairs in ranked.items():
            for pair in pairs:
                writer.writerow([exercise, pair.a.owner, pair.b.owner, f"{pair.score:.3f}", pair.reason,
                                 _flag_list(pair.a.flags), _flag_list(pair.b.flags)])


def write_flags_csv(path, flagged):
    """One row per red flag, so that a spreadsheet sorts and filters them."""
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["student", "cell", "line", "red_flag"])
        for cell in flagged:
            for flag in cell.flags:
                writer.writerow([cell.owner, cell.where, flag.line, flag.label])


_STYLE = ("body{font-family:sans-serif;margin:2em}td,th{padding:.2em .6em;text-align:left}"
          ".side{display:grid;grid-template-columns:1fr 1fr;gap:1em}"
          "pre{background:#f6f6f6;padding:.5em;overflow-x:auto;margin:0}details{margin:.6em 0}"
          "summary{cursor:pointer}.note{background:#fff6d6;padding:.6em}.flag{color:#a4161a;margin:.2em 0}")


def render(assignment, threshold, top, exercises, ranked, problems, flagged=()):
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(assignment)}: similar answers"
             f"</title><style>{_STYLE}</style></head><body>",
             f"<h1>{esc(assignment)}: similar answers</h1>",
             "<p class='note'>A report for a person to judge, not a verdict: a short exercise has few sensible "
             "answers, and two honest students can write the same code. Names, comments, docstrings and "
             "formatting were normalised and the release's own lines removed before comparing; "
             f"<code>{esc(PACKAGE)}</code> is the course package's finished source, <code>{esc(SOLUTIONS)}</code> the "
             "course's own answer cell (source/), <code>&lt;course oracles: NAME&gt;</code> a function of the hidden "
             "tests' oracles: in an open course all of them are public. Pairs scoring "
             f"{threshold:g} or more (1 = the same code), most similar first; the page shows the first {top} "
             "of each exercise, the CSV all of them.</p>"]
    if problems:
        parts.append("<h2>Not compared</h2><ul>" + "".join(f"<li>{esc(p)}</li>" for p in problems) + "</ul>")
    parts.append(_render_flagged(flagged))
    for exercise in exercises:
        parts.append(_render_exercise(exercise, ranked[exercise.name], top))
    parts.append("</body></html>")
    return "\n".join(parts)


def _render_exercise(exercise, pairs, top):
    esc = html.escape
    students = [a for a in exercise.answers if not is_reference(a.owner)]
    parts = [f"<h2>{esc(exercise.name)}</h2>",
             f"<p>{len(students)} answers compared; {len(pairs)} pairs listed"
             + (f", the first {top} shown here." if len(pairs) > top else ".")
             + (f" Left as the release's stub: {esc(', '.join(exercise.unanswered))}." if exercise.unanswered
                else "") + "</p>"]
    for pair in pairs[:top]:
        parts.append(
            f"<details open><summary><b>{pair.score:.3f}</b> {esc(pair.a.owner)} &harr; {esc(pair.b.owner)}: "
            f"{esc(pair.reason)}</summary>"
            f"<div class='side'>{_column(pair.a.owner, pair.a.source, pair.a.flags)}"
            f"{_column(pair.b.owner, pair.b.source, pair.b.flags)}"
            f"</div><details><summary>what was compared</summary><div class='side'>"
            f"{_column('', pair.a.normalised)}{_column('', pair.b.normalised)}</div></details></details>")
    return "\n".join(parts)


def _column(title, code, flags=()):
    heading = f"<h4>{html.escape(title)}</h4>" if title else ""
    warning = f"<p class='flag'>red flags: {html.escape(_flag_list(flags))}</p>" if flags else ""
    return f"<div>{heading}{warning}<pre>{html.escape(code)}</pre></div>"


def _render_flagged(flagged):
    """The section of red flags: every flagged cell, in a pair or not, with its source."""
    esc = html.escape
    parts = [f"<h2>Red flags</h2><p>{len(flagged)} cells use what no exercise needs: frames, closures, code "
             "objects, <code>sys.modules</code>, import, trace or profile hooks, the kernel or its event "
             "callbacks, <code>os._exit</code>, threads, or code built at run time. That is how an answer can read "
             "the hidden tests or steer the kernel; look at each, it may be harmless. The same list, a row per "
             "flag, is in the <code>redflags-</code> CSV.</p>"]
    for cell in flagged:
        parts.append(f"<details><summary><b>{esc(cell.owner)}</b>, {esc(cell.where)}: "
                     f"<span class='flag'>{esc(_flag_list(cell.flags))}</span></summary>"
                     f"{_column('', cell.source)}</details>")
    return "\n".join(parts)
