"""The course in a real browser: what a student meets in JupyterLab and Notebook 7, and what an instructor does in
nbgrader's formgrader (issue 50).

A student opens the release of notebook 01 (copied into a folder of the test's own), writes one right answer
(TokenEmbedding) and one wrong one (positional_encoding with sin and cos swapped), runs all cells from the Run menu
and, once Run All has stopped at the first failing test, saves and runs the last cell on its own, as the notebook
tells them to. The figures are in the outputs as images, the failing visible test says what is wrong, and the last
cell's check finds the notebook by itself and reports the right answer's tests as passed.

An instructor opens an autograded submission of a small assignment in the formgrader (`jupyter server` with
nbgrader's server extension, run from a scratch course), scores the written answer and comments on it: the
gradebook then holds that score and comment.

Each test starts its own server (127.0.0.1, a free port, a token) and Chromium (Debian's, through Playwright), and
ends them. Skipped, with the reason, without Playwright or Chromium (tests/support/browser.py). A failed step keeps a
screenshot under the test's tmp path and names it in the failure.
"""
import json
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from support.browser import chromium, jupyter_server, needs_browser, open_page
from support.courses import ScratchCourse
from support.notebooks import ROOT, nbgrader_cell, with_answers

pytestmark = [needs_browser, pytest.mark.slow]

RELEASE = ROOT / "notebooks" / "01_positional_encoding" / "01_positional_encoding.ipynb"
RUN_TIMEOUT = 120_000      # ms for the notebook's cells up to the first failing test
CHECK_TIMEOUT = 180_000    # ms for the last cell's check, which runs the whole notebook again in a fresh kernel

RIGHT_EMBEDDING = '''class TokenEmbedding(nn.Module):
    """Token ids -> vectors of size d_model, scaled by sqrt(d_model)."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.d_model = d_model

    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(self.d_model)'''

# sin and cos swapped: the visible test names that mistake
WRONG_ENCODING = '''def positional_encoding(max_len, d_model):
    """The sinusoidal table [max_len, d_model]: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)."""
    if d_model % 2 or d_model <= 0 or max_len <= 0:
        raise ValueError("d_model must be even and both sizes positive")
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    omega = 1 / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(position * omega)
    pe[:, 1::2] = torch.sin(position * omega)
    return pe'''
SWAPPED = "sin and cos are swapped"

# How each front end opens a notebook.
FRONT_ENDS = {"lab": "/lab/tree/{}", "notebook": "/notebooks/{}"}


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


def kernels(server):
    with urllib.request.urlopen(server.link("/api/kernels"), timeout=10) as response:
        return json.load(response)


def wait_for(condition, timeout, what):
    """Poll `condition` until it is true, `timeout` s at most."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.25)


def cell_with(page, text):
    """The notebook cell whose source contains `text`."""
    return page.locator(".jp-Notebook .jp-Cell").filter(has=page.locator(".jp-InputArea", has_text=text)).first


def write_answer(page, stub, source):
    """Replace the source of the answer cell whose stub contains `stub` with `source`, as a student types it."""
    editor = cell_with(page, stub).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    assert editor.text_content().strip().startswith(source.splitlines()[0])


def menu(page, menu_name, item):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu_name}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def running(page):
    return page.locator(".jp-InputPrompt", has_text="[*]").count() > 0


@pytest.mark.parametrize("front_end", sorted(FRONT_ENDS))
def test_a_student_runs_the_release(front_end, browser, tmp_path):
    folder = tmp_path / "student"
    folder.mkdir()
    notebook = folder / RELEASE.name
    shutil.copy(RELEASE, notebook)
    with jupyter_server(front_end, folder, tmp_path) as server, open_page(browser, tmp_path / "screenshots") as tab:
        page = tab.page
        with tab.step("open the notebook"):
            page.goto(server.link(FRONT_ENDS[front_end].format(notebook.name)), timeout=60_000)
            cell_with(page, "def positional_encoding(max_len, d_model)").wait_for(timeout=60_000)
        with tab.step("write the answers"):     # while the kernel starts
            write_answer(page, "class TokenEmbedding(nn.Module)", RIGHT_EMBEDDING)
            write_answer(page, "def positional_encoding(max_len, d_model)", WRONG_ENCODING)
        with tab.step("run all cells"):
            wait_for(lambda: any(k["execution_state"] == "idle" for k in kernels(server)), 60, "the kernel is ready")
            menu(page, "Run", "Run All Cells")
            failure = page.locator(".jp-OutputArea-output", has_text=SWAPPED).first
            failure.wait_for(timeout=RUN_TIMEOUT)
            wait_for(lambda: not running(page), 30, "Run All stops at the failing test")
        with tab.step("the outputs"):
            for passed in ("Visible structure tests passed.", "Visible value tests passed."):
                printed = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]')
                assert printed.filter(has_text=passed).count() == 1, passed
            figures = page.locator(".jp-OutputArea-output img")
            assert figures.count() >= 2, f"{figures.count()} figures in the outputs"
            assert all(figures.nth(i).evaluate("img => img.complete && img.naturalWidth > 100")
                       for i in range(figures.count())), "a figure did not render"
            assert "row 0 (position 0) should be sin 0 = 0" in failure.text_content()
            tab.screenshot(f"{front_end}-after-run-all")
            # Not asserted (what a notebook shows is its authors' choice), printed for whoever reads the log.
            results = page.locator(".jp-OutputArea-executeResult .jp-OutputArea-output").all_text_contents()
            print("results shown (Out[n]):", [text.strip()[:80] for text in results])
        with tab.step("save, then run the last cell"):
            last = cell_with(page, "check_this_notebook()")    # Shift+Enter adds a cell after it
            last.locator(".cm-content").click()
            page.keyboard.press("ControlOrMeta+s")
            wait_for(lambda: "torch.cos(position * omega)" in notebook.read_text(), 30, "the notebook is saved")
            page.keyboard.press("Shift+Enter")
            report = last.locator(".jp-OutputArea-output")
            report.filter(has_text="cost points").first.wait_for(timeout=CHECK_TIMEOUT)
            tab.screenshot(f"{front_end}-check")
        with tab.step("the check's report"):
            text = report.first.text_content()
            found = re.search(r"Checking (\S+) as last saved", text)    # the notebook, found by itself
            assert found and Path(found.group(1)).resolve() == notebook.resolve(), text
            assert re.search(r"TokenEmbedding\s+2 of 2\b", text), text
            assert re.search(r"positional_encoding\s+1 of 2\b", text) and SWAPPED in text, text
        print("requests refused (off this machine):", tab.refused)


# A small assignment for the formgrader: one exercise, and a written answer graded by hand.
QUESTION = "Why is $\\sin^2 x + \\cos^2 x = 1$ for every $x$?"
WRITTEN = "Because $(\\cos x, \\sin x)$ lies on the unit circle: $\\cos^2 x + \\sin^2 x = 1$."
SCORE, COMMENT = 1.5, "Right, but say why the point is on the circle."


def small_assignment():
    return new_notebook(cells=[
        new_markdown_cell("# Problem set 1"),
        nbgrader_cell(new_code_cell("import math"), "setup"),
        nbgrader_cell(new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
                      "double", solution=True),
        nbgrader_cell(new_code_cell('assert double(2) == 4, "double(2) should be 4"'), "test_double", grade=True,
                      points=1),
        nbgrader_cell(new_markdown_cell(QUESTION), "question"),
        nbgrader_cell(new_markdown_cell("### BEGIN SOLUTION\nThe point is on the unit circle.\n### END SOLUTION"),
                      "why", solution=True, grade=True, points=2),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def api(method, path):
    """A matcher for the response to a request of the formgrader's API."""
    return lambda response: response.request.method == method and path in response.url


def test_an_instructor_grades_a_written_answer(browser, tmp_path):
    from nbgrader.api import Gradebook

    (tmp_path / "course").mkdir()
    course = ScratchCourse(tmp_path / "course", "ps1", source=small_assignment())
    course.submit("ada", with_answers(course.release, {"double": "def double(x):\n    return x + x", "why": WRITTEN}))
    course.autograde()
    with jupyter_server("server", course.root, tmp_path) as server, open_page(browser, tmp_path / "screenshots") as tab:
        page = tab.page
        with tab.step("open the submission"):
            # The formgrader's own requests carry no token: log in first, with the token as the password.
            page.goto(f"{server.url}/login?next=/formgrader/gradebook/ps1/ps1", timeout=60_000)
            page.locator("#password_input").fill(server.token)
            page.locator("#password_input").press("Enter")
            with page.expect_response(api("GET", "/formgrader/api/comments")):   # the page's grades and comments
                page.get_by_role("link", name="Submission #1").first.click()
            page.locator(".cell", has_text="unit circle").last.wait_for()
        with tab.step("score and comment"):
            with page.expect_response(api("PUT", "/formgrader/api/grade/")) as saved:
                page.locator("input.score#why").fill(str(SCORE))
                page.locator("input.score#why").press("Tab")
            assert saved.value.ok, saved.value.status
            with page.expect_response(api("PUT", "/formgrader/api/comment/")) as saved:
                page.locator("textarea.comment#why-comment").fill(COMMENT)
                page.locator("textarea.comment#why-comment").press("Tab")
            assert saved.value.ok, saved.value.status
            tab.screenshot("formgrader-graded")
        with tab.step("the maths typeset offline"):
            # MathJax comes from the Jupyter server (jupyter-server-mathjax), not a CDN: the written answer's $...$
            # are typeset on a machine that reaches nothing outside it
            page.locator(".cell", has_text="unit circle").last.locator(".MathJax").first.wait_for(timeout=30_000)
            assert not [url for url in tab.refused if "mathjax" in url.lower()], tab.refused
        with tab.step("the gradebook"):
            def recorded():
                with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
                    grade = gradebook.find_grade("why", "ps1", "ps1", "ada")
                    note = gradebook.find_comment("why", "ps1", "ps1", "ada")
                    return grade.manual_score, note.manual_comment

            wait_for(lambda: recorded() == (SCORE, COMMENT), 20, f"the gradebook holds the grade: {recorded()}")
