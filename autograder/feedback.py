"""``python -m autograder feedback ASSIGNMENT``: one HTML page per student and notebook, in
``feedback/STUDENT/ASSIGNMENT/NOTEBOOK.html`` (where ``nbgrader release_feedback`` looks for it).

nbgrader's own feedback is the autograded notebook, hidden tests and their tracebacks included. This page
shows only what a student may see: the score of every graded cell, for a failed test its error message
(the course's messages say what is wrong in words), never a traceback or any hidden test's code, and for a
written answer the grader's score and comment, or that it awaits manual grading. A notebook that could not be graded
gets a page too, which says why and gives no score (it has none yet: not a zero). Repairs are told apart: the
metadata Colab dropped, and the cells of a copy made from an earlier release of the assignment (repair.py).

Student code can put whatever it likes into an exception message, the hidden tests' source included (it
can read its caller's code with ``inspect``). So any line of a message that quotes hidden-test code is
removed. Hidden-test code here is the text between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``
(comments and docstrings included) outside the string literals the tests raise as messages, and only
where it is in neither the release notebook (visible tests and set-up are public) nor the student's own
cells. A message the hidden test itself raises is shown in full, even where its words are code
("call scheduler.step() after optimizer.step()").

Removing quotations is not enough: an answer can raise the tests' source encoded (base64, hex, ...). So the
page shows of an error its type and, for an ``AssertionError`` (how the course's tests fail), the message
cut at MAX_ASSERTION characters; for any other error only the first line of the message, cut at MAX_OTHER.
A student can raise an ``AssertionError`` too, so these caps, not the type, bound what a page can carry.
Any run of more than LONG_RUN characters without a space is removed from what is shown: no course message
has one, and an encoding does.
"""
import ast
import html
import io
import re
import tokenize
from dataclasses import dataclass

import nbformat

from .grade import GradingError, cell_grades, check_assignment, check_course, read_report
from .nbgrader_course import open_gradebook
from .repair import RELEASE_CHANGED

HIDDEN_NOTE = "[a line quoting the hidden tests' code was removed]"
MIN_QUOTED = 12   # shorter text ("assert x", "pass") is too common to mean a quotation
BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"   # nbgrader's delimiters
MAX_ASSERTION = 1000   # the course's longest assertion message is under 500 characters
MAX_OTHER = 400        # the grader's and the course's other messages (execution/stripped.py's refusals...) fit
LONG_RUN = 80          # the course's messages' longest run without a space is 67 characters (a URL)
_LONG_RUN = re.compile(r"[^ \t]{%d,}" % (LONG_RUN + 1))   # newlines inside: base64 wrapped at 76 is one run
_ERROR_NAME = re.compile(r"[A-Za-z_][\w.]{0,79}")   # a class name as Python prints it; others carry text
# Python 3.12 splits an f-string into several tokens; before, it is one STRING token.
FSTRING_START, FSTRING_END = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)


# ----------------------------------------------------------------------------- what a message may not quote

@dataclass(frozen=True)
class HiddenText:
    """`code`: the hidden tests' lines, and the pieces of them between message literals (stripped, at
    least MIN_QUOTED long); `literals`: the lines of the string literals that the hidden tests raise."""
    code: frozenset = frozenset()
    literals: frozenset = frozenset()

    def secret(self, public):
        """The same without the code that `public` (the release's and the student's own text) holds too."""
        return HiddenText(frozenset(c for c in self.code if c not in public), self.literals)

    def quoted_in(self, line):
        """Whether `line` holds hidden code that is not inside the text of one of the hidden literals."""
        inside = [(i, i + len(text)) for text in self.literals for i in _occurrences(line, text)]
        return any(not any(start <= i and i + len(code) <= end for start, end in inside)
                   for code in self.code for i in _occurrences(line, code))


def _occurrences(line, text):
    i = line.find(text)
    while i >= 0:
        yield i
        i = line.find(text, i + 1)


def hidden_text(source_notebook):
    """The HiddenText of the instructor's notebook (all of its hidden tests)."""
    code, literals = set(), set()
    for cell in source_notebook.cells:
        if cell.cell_type == "code" and BEGIN_HIDDEN in cell.source:
            cell_code, cell_literals = _hidden_cell_text(cell.source)
            code |= cell_code
            literals |= cell_literals
    return HiddenText(frozenset(code), frozenset(literals))


def _hidden_cell_text(source):
    """(code, literal lines) of the hidden tests of one cell."""
    lines = [line.rstrip("\r\n") for line in io.StringIO(source).readlines()]   # numbered as tokenize does
    hidden = _hidden_line_numbers(lines)
    tokens = _tokens(source)
    literals = list(_literals(source, tokens))
    messages = [(start, end) for start, end, _, message in literals if message]
    # comments and docstrings are hidden text too, and so is the code on either side of them
    asides = [(t.start, t.end, [t.string]) for t in tokens if t.type == tokenize.COMMENT]
    asides += [(start, end, texts) for start, end, texts, message in literals if not message]
    code = set()
    for number in hidden:
        line = lines[number - 1]
        outside = _mask(line, number, messages)
        if outside.strip("\0 \t"):   # not all of it inside a message: the line is code
            pieces = [line, *_mask(outside, number, [(a, b) for a, b, _ in asides]).split("\0"),
                      *(part for a, b, texts in asides if a[0] <= number <= b[0] for part in _text_lines(texts))]
            code |= {piece.strip() for piece in pieces if len(piece.strip()) >= MIN_QUOTED}
    shown = {part.strip() for start, end, texts, message in literals
             if message and hidden & set(range(start[0], end[0] + 1)) for part in _text_lines(texts)}
    return code, {part for part in shown if len(part) >= MIN_QUOTED}


def _text_lines(texts):
    return [part for text in texts for part in text.split("\n")]


def _tokens(source):
    """The tokens of `source`, none when it does not tokenize."""
    try:
        return list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _hidden_line_numbers(lines):
    """The numbers (from 1) of the hidden tests' lines, their delimiters included."""
    hidden, inside = set(), False
    for number, line in enumerate(lines, 1):
        inside = inside or BEGIN_HIDDEN in line
        if inside:
            hidden.add(number)
        inside = inside and END_HIDDEN not in line
    return hidden


def _mask(line, number, spans):
    """`line` (number `number`) with the characters inside `spans` ((row, col) start and end) replaced by NULs."""
    chars = list(line)
    for (start_row, start_col), (end_row, end_col) in spans:
        if start_row <= number <= end_row:
            first = start_col if start_row == number else 0
            last = end_col if end_row == number else len(chars)
            chars[first:last] = "\0" * (min(last, len(chars)) - first)
    return "".join(chars)


def _literals(source, tokens):
    """(start, end, texts, message) of every string literal of `source`: implicitly joined literals count as
    one, `texts` is its constant text (an f-string's text between the replacement fields), `message` says
    whether it is part of an expression (a message) rather than a statement of its own (a docstring)."""
    tokens = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    i = 0
    while i < len(tokens):
        j = _end_of_strings(tokens, i)
        if j == i:
            i += 1
            continue
        statement = (i == 0 or tokens[i - 1].type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)) and \
            (j == len(tokens) or tokens[j].type in (tokenize.NEWLINE, tokenize.ENDMARKER))
        start, end = tokens[i].start, tokens[j - 1].end
        yield start, end, _constant_text(source, start, end), not statement
        i = j


def _end_of_strings(tokens, i):
    """The index after the run of string literals (f-strings whole) that starts at tokens[i] (i: none)."""
    depth = 0
    while i < len(tokens):
        kind = tokens[i].type
        depth += (kind == FSTRING_START) - (kind == FSTRING_END)
        if depth == 0 and kind not in (tokenize.STRING, FSTRING_END):
            return i
        i += 1
    return i


def _constant_text(source, start, end):
    """The constant text of the literals of `source` between the positions `start` and `end`."""
    lines = io.StringIO(source).readlines()
    text = "".join(lines[start[0] - 1:end[0]])
    text = text[start[1]:len(text) - len(lines[end[0] - 1]) + end[1]]
    try:
        node = ast.parse(f"(\n{text}\n)", mode="eval").body
    except SyntaxError:
        return []
    parts = node.values if isinstance(node, ast.JoinedStr) else [node]
    return [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]


def scrub(message, hidden):
    """`message` without the lines that quote hidden-test code (`hidden`: a HiddenText, made secret)."""
    return "\n".join(HIDDEN_NOTE if hidden.quoted_in(line) else line for line in message.splitlines())


def own_text(notebook):
    """The text of the student's own cells: answers and cells they added (not tests, not locked cells)."""
    return "\n".join(c.source for c in notebook.cells
                     if not c.metadata.get("nbgrader") or c.metadata["nbgrader"].get("solution"))


def _notebook_text(path):
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells) if path.exists() else ""


# ----------------------------------------------------------------------------- the page

def cell_messages(cell, hidden):
    """The failure messages of one graded cell: 'ErrorName: message' for every error output."""
    return [shown_error(out.get("ename"), out.get("evalue"), hidden)
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def shown_error(ename, evalue, hidden):
    """What a page shows of one error: its type, and of its message (quotations of hidden code scrubbed) all
    of an AssertionError's or the first line of another's, long runs removed and cut to the cap."""
    name = ename if _ERROR_NAME.fullmatch(ename or "") else "Error"
    lines = scrub(str(evalue or ""), hidden).splitlines()
    if name == "AssertionError":
        text = shorten("\n".join(lines), MAX_ASSERTION)
    else:
        text = shorten(lines[0] if lines else "", MAX_OTHER)
    return f"{name}: {text}" if text.strip() else name


def shorten(text, limit):
    """`text` without runs of more than LONG_RUN characters without a space, cut at `limit` characters."""
    text = _LONG_RUN.sub(lambda run: f"[… {len(run.group())} characters removed]", text)
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def graded_cells(autograded, grades):
    """(CellGrade, cell) for every graded cell that the gradebook knows, in notebook order."""
    rows = []
    for cell in autograded.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("grade") and grade_id in grades:
            rows.append((grades[grade_id], cell))
    return rows


STYLE = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.3em .6em;"
         "border-bottom:1px solid #ddd;vertical-align:top}pre{white-space:pre-wrap;margin:0}"
         ".ok{color:#176d2a}.bad{color:#a4161a}.pending{color:#7a5c00}")


def _row(grade, cell, hidden):
    """One row of the table: the cell, its score and what went wrong (or the grader's comment)."""
    esc = html.escape
    if grade.score is None:
        status, shown, verdict = "pending", "–", "awaiting manual grading"
    else:
        status, shown = ("ok" if grade.score == grade.max_score else "bad"), f"{grade.score:g}"
        if grade.kind == "written":
            verdict = f"<pre>{esc(grade.comment)}</pre>" if grade.comment else "graded by hand"
        else:
            verdict = "<br>".join(f"<pre>{esc(m)}</pre>" for m in cell_messages(cell, hidden)) or "passed"
    return (f"<tr><td>{esc(grade.grade_id)}</td><td class='{status}'>{shown} / {grade.max_score:g}</td>"
            f"<td>{verdict}</td></tr>")


def _report_notes(report, hidden):
    """What went wrong with the notebook as a whole: an error, repairs, broken cells."""
    esc, parts = html.escape, []
    if report is not None and report.error:
        # nbgrader's error comes from the sanitized notebook, which holds the hidden tests
        parts.append(f"<p class='bad'>This notebook could not be graded: {esc(scrub(report.error, hidden))}</p>")
    changed = [a for a in report.repairs if RELEASE_CHANGED in a] if report is not None else []
    if changed:
        parts.append("<p>The assignment was released again after your copy of it was made (your instructor changed "
                     "some of its cells): the grader used the current release's version of these cells:</p><ul>"
                     + "".join(f"<li>{esc(a)}</li>" for a in changed) + "</ul>")
    damaged = [a for a in report.repairs if RELEASE_CHANGED not in a] if report is not None else []
    if damaged:
        parts.append("<p>The notebook's grading metadata was damaged (Colab and some editors drop it) and was "
                     "repaired:</p><ul>" + "".join(f"<li>{esc(a)}</li>" for a in damaged) + "</ul>")
    if report is not None and report.problems:
        # the grader's own words, but naming what the student's code replaced: cut as an assertion's
        parts.append("<p>Cells that broke while grading:</p><ul>" + "".join(
            f"<li>cell {p['index'] + 1}: {esc(shorten(scrub(p['message'], hidden), MAX_ASSERTION))}</li>"
            for p in report.problems) + "</ul>")
    return parts


def render(student, assignment, notebook, rows, hidden, report):
    esc = html.escape
    total = sum(grade.score or 0 for grade, _ in rows)
    possible = sum(grade.max_score or 0 for grade, _ in rows)
    pending = sum(grade.max_score for grade, _ in rows if grade.score is None)
    waiting = f", with {pending:g} points of written answers still to be graded by hand" if pending else ""
    score = f"<b>{total:g} / {possible:g}</b>{waiting}"
    if report is not None and report.error:     # no grade yet, which is not a zero
        score = "<b>none</b>: this notebook could not be graded (why: below), so it has no grade yet"
    return "\n".join([
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(notebook)}: feedback</title>",
        f"<style>{STYLE}</style></head><body>", f"<h1>{esc(assignment)} / {esc(notebook)}</h1>",
        f"<p>Student: <b>{esc(student)}</b>. Score: {score}</p>",
        *_report_notes(report, hidden),
        *(["<table><tr><th>cell</th><th>score</th><th>what went wrong</th></tr>",
           *(_row(grade, cell, hidden) for grade, cell in rows), "</table>"] if rows else []),
        "</body></html>"])


def _page(course, assignment, notebook, student, gradebook, hidden, report):
    """The feedback page of one student's notebook."""
    path = course / "autograded" / student / assignment / f"{notebook}.ipynb"
    public = _notebook_text(course / "release" / assignment / f"{notebook}.ipynb")
    rows = []
    if path.exists():
        autograded = nbformat.read(path, as_version=4)
        public += "\n" + own_text(autograded)
        rows = graded_cells(autograded, cell_grades(gradebook, assignment, notebook, student))
    return render(student, assignment, notebook, rows, hidden.secret(public), report)


def generate_feedback(course, assignment, students=None, log=print):
    """Write the feedback pages of `assignment`; returns their paths. GradingError, before anything is written,
    for a folder that is not a course directory, an assignment its gradebook does not know or nobody was
    graded in, and students with nothing graded. A notebook that could not be graded gets a page that says why."""
    course = check_course(course)
    check_assignment(course, assignment, graded=True)
    reports = read_report(course, assignment)
    failed = {s for s, by_notebook in reports.items() if any(r.error for r in by_notebook.values())}
    graded = sorted({p.parent.name for p in (course / "autograded").glob(f"*/{assignment}")} | failed)
    unknown = sorted(set(students or ()) - set(graded))
    if unknown:
        raise GradingError(f"nothing of {', '.join(unknown)} is graded in {assignment} (graded: {len(graded)} students)")
    sources = {p.stem: nbformat.read(p, as_version=4) for p in (course / "source" / assignment).glob("*.ipynb")}
    hidden = {name: hidden_text(nb) for name, nb in sources.items()}
    written, not_graded = [], []      # not_graded: (student, page) of the notebooks that could not be graded
    with open_gradebook(course) as gradebook:
        for student in (s for s in graded if not students or s in students):
            for notebook in sorted(sources):
                report = reports.get(student, {}).get(notebook)
                page = _page(course, assignment, notebook, student, gradebook, hidden[notebook], report)
                target = course / "feedback" / student / assignment / f"{notebook}.html"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(page, encoding="utf-8")
                written.append(target)
                if report is not None and report.error:
                    not_graded.append(student)
    failures = (f"; {len(not_graded)} of them {'says' if len(not_graded) == 1 else 'say'} why the notebook could not "
                f"be graded, so that it has no grade ({', '.join(sorted(set(not_graded)))})" if not_graded else "")
    log(f"wrote {len(written)} feedback page{'' if len(written) == 1 else 's'} under {course / 'feedback'}{failures}")
    return written
