"""``python -m autograder feedback ASSIGNMENT``: one HTML page per student and notebook, in
``feedback/STUDENT/ASSIGNMENT/NOTEBOOK.html`` (where ``nbgrader release_feedback`` looks for it).

nbgrader's own feedback is the autograded notebook, hidden tests and their tracebacks included. This page
shows only what a student may see: the score of every graded cell, and for a failed test its error
message (the course's messages say what is wrong in words), never a traceback or any test code. As a
last guard, any line of a message that quotes a line of a test cell is removed: student code can put
whatever it likes into an exception message.
"""
import html
from pathlib import Path

import nbformat

from .grade import read_report

HIDDEN_NOTE = "[a line quoting the test code was removed]"
MIN_QUOTED = 12   # shorter lines ("assert x", "pass") are too common to mean a quotation


def test_code_lines(source_notebook):
    """The stripped lines of every test cell of the instructor's notebook (hidden tests included)."""
    lines = set()
    for cell in source_notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            lines.update(line.strip() for line in cell.source.splitlines() if len(line.strip()) >= MIN_QUOTED)
    return lines


def scrub(message, code_lines):
    """`message` without the lines that quote test code."""
    kept = [HIDDEN_NOTE if any(code in line for code in code_lines) else line for line in message.splitlines()]
    return "\n".join(kept)


def cell_messages(cell, code_lines):
    """The failure messages of one graded cell: 'ErrorName: message' for every error output."""
    return [scrub(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}", code_lines)
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def graded_cells(autograded, gradebook_scores):
    """(grade_id, kind, score, max_score, cell) for every graded cell, in notebook order."""
    rows = []
    for cell in autograded.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            continue
        kind = "test" if cell.cell_type == "code" and not meta.get("solution") else "written"
        score, max_score = gradebook_scores.get(meta["grade_id"], (None, meta.get("points", 0)))
        rows.append((meta["grade_id"], kind, score, max_score, cell))
    return rows


def render(student, assignment, notebook, rows, code_lines, report):
    esc = html.escape
    total = sum(score or 0 for _, _, score, _, _ in rows)
    possible = sum(max_score or 0 for _, _, _, max_score, _ in rows)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(notebook)}: feedback</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.3em .6em;"
             "border-bottom:1px solid #ddd;vertical-align:top}pre{white-space:pre-wrap;margin:0}"
             ".ok{color:#176d2a}.bad{color:#a4161a}</style></head><body>",
             f"<h1>{esc(assignment)} / {esc(notebook)}</h1>",
             f"<p>Student: <b>{esc(student)}</b>. Score: <b>{total:g} / {possible:g}</b></p>"]
    if report is not None and report.error:
        parts.append(f"<p class='bad'>This notebook could not be graded: {esc(report.error)}</p>")
    if report is not None and report.repairs:
        parts.append("<p>The notebook's grading metadata was damaged (Colab and some editors drop it) and was "
                     "repaired:</p><ul>" + "".join(f"<li>{esc(a)}</li>" for a in report.repairs) + "</ul>")
    if report is not None and report.problems:
        parts.append("<p>Cells that broke while grading:</p><ul>" + "".join(
            f"<li>cell {p['index'] + 1}: {esc(scrub(p['message'], code_lines))}</li>" for p in report.problems)
            + "</ul>")
    parts.append("<table><tr><th>cell</th><th>score</th><th>what went wrong</th></tr>")
    for grade_id, kind, score, max_score, cell in rows:
        if kind == "written":
            verdict = "graded by hand" if score is None else ""
        else:
            verdict = "<br>".join(f"<pre>{esc(m)}</pre>" for m in cell_messages(cell, code_lines)) or "passed"
        status = "ok" if score is not None and score == max_score else "bad"
        shown = "–" if score is None else f"{score:g}"
        parts.append(f"<tr><td>{esc(grade_id)}</td><td class='{status}'>{shown} / {max_score:g}</td>"
                     f"<td>{verdict}</td></tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)


def cell_scores(course, assignment, notebook, student):
    """grade_id -> (score, max_score) from the gradebook (the score a grader set by hand wins)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gradebook:
        try:
            submission = gradebook.find_submission_notebook(notebook, assignment, student)
        except MissingEntry:
            return {}
        return {g.name: (g.score, g.max_score) for g in submission.grades}


def generate_feedback(course, assignment, students=None, log=print):
    """Write the feedback pages of `assignment`; returns their paths."""
    course = Path(course).resolve()
    reports = read_report(course, assignment)
    sources = {p.stem: nbformat.read(p, as_version=4) for p in (course / "source" / assignment).glob("*.ipynb")}
    code_lines = {name: test_code_lines(nb) for name, nb in sources.items()}
    written = []
    for folder in sorted((course / "autograded").glob(f"*/{assignment}")):
        student = folder.parent.name
        if students and student not in students:
            continue
        for notebook in sorted(sources):
            path = folder / f"{notebook}.ipynb"
            report = reports.get(student, {}).get(notebook)
            if path.exists():
                rows = graded_cells(nbformat.read(path, as_version=4),
                                    cell_scores(course, assignment, notebook, student))
            else:
                rows = []
            page = render(student, assignment, notebook, rows, code_lines[notebook], report)
            target = course / "feedback" / student / assignment / f"{notebook}.html"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(page, encoding="utf-8")
            written.append(target)
    log(f"wrote {len(written)} feedback pages under {course / 'feedback'}")
    return written
