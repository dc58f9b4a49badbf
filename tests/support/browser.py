"""The browser tests' tools: a Jupyter server started and ended by the test, the system's Chromium driven by
Playwright, and a screenshot kept when a step fails.

Chromium is Debian's (`apt-get install chromium`), handed to Playwright as `executable_path`: Playwright's own
browser download needs the internet. A server listens on 127.0.0.1 only, on a free port, behind a random token,
with its own Jupyter runtime, settings and workspaces folders, and is shut down at the end, its kernels with it.
The page loads from the server alone: every other request is refused in the browser and listed in
``Page.refused`` (a CDN the page asks for, for example), so that the tests never reach outside this machine.
"""
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = shutil.which(os.environ.get("COURSE_CHROMIUM") or "chromium") or shutil.which("chromium-browser")
try:
    from playwright.sync_api import sync_playwright
except ImportError:
    sync_playwright = None


def missing():
    """Why the browser tests cannot run here, or "" when they can."""
    if sync_playwright is None:
        return "playwright is not installed: pip install playwright (the dev extra)"
    if CHROMIUM is None:
        return "no system Chromium: apt-get install chromium (or set COURSE_CHROMIUM to a Chromium binary)"
    return ""


needs_browser = pytest.mark.skipif(bool(missing()), reason=missing() or "-")

# Any URL but 127.0.0.1's and localhost's (data: and blob: URLs are not requests).
OFF_THIS_MACHINE = re.compile(r"^(?!(https?|wss?)://(127\.0\.0\.1|localhost)([:/]|$))")
START_TIMEOUT = 90      # s for a server to answer
STOP_TIMEOUT = 20       # s for a server to shut down with its kernels before it is killed
# JupyterLab's settings: no question about Jupyter's news (a toast over the notebook), no checks for updates.
LAB_SETTINGS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings":
                '{"fetchNews": "false", "checkForUpdates": false}'}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    url: str       # http://127.0.0.1:PORT
    token: str
    log: Path      # what the server printed

    def link(self, path):
        """The page at `path` ("/lab/tree/x.ipynb"), logged in with the token."""
        return f"{self.url}{path}?token={self.token}"

    def log_tail(self, lines=40):
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def jupyter_server(app, root, scratch):
    """`jupyter <app>` ("lab", "notebook" or "server") run from and serving the folder `root` (nbgrader's formgrader
    reads the course's nbgrader_config.py there), its state and log under `scratch`; shut down, with every process
    it started, when the block ends."""
    scratch = Path(scratch)
    settings = scratch / "lab-settings"
    for name, text in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "JUPYTER_", "PYTEST_"))
           and k not in ("MPLBACKEND", "COURSE_SMOKE")}    # the kernels draw inline, as a student's do
    env.update(JUPYTER_CONFIG_DIR=str(scratch / "config"), JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(scratch / "workspaces"),
               OMP_NUM_THREADS="1")
    port, token = free_port(), secrets.token_hex(16)
    log = scratch / f"jupyter-{app}.log"
    command = [sys.executable, "-m", "jupyter", app, "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--ServerApp.allow_remote_access=False", "--ServerApp.open_browser=False"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    if app == "lab":   # no news feed, no update check, no extension manager asking PyPI
        command += ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                    "--LabApp.extension_manager=readonly"]
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", token, log)
    try:
        _wait_until_up(server, process)
        yield server
    finally:
        _stop(server, process)


def _wait_until_up(server, process):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Jupyter server exited ({process.returncode}):\n{server.log_tail()}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(server.link("/api/status"), timeout=5):
                return
        time.sleep(0.3)
    raise RuntimeError(f"the Jupyter server did not answer in {START_TIMEOUT} s:\n{server.log_tail()}")


def _stop(server, process):
    """Shut the server down (it ends its kernels), then kill whatever it started that is still there: the kernels
    run in sessions of their own, out of reach of the server's process group."""
    import psutil

    with contextlib.suppress(psutil.Error):
        started = psutil.Process(process.pid).children(recursive=True)
    with contextlib.suppress(OSError):
        request = urllib.request.Request(server.link("/api/shutdown"), method="POST")
        urllib.request.urlopen(request, timeout=10).close()
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(STOP_TIMEOUT)
    for child in started:
        with contextlib.suppress(psutil.Error):
            child.kill()


@contextlib.contextmanager
def chromium():
    """The system's Chromium, headless, through Playwright."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, timeout=60_000,
                                             args=["--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                                                   "--disable-background-networking", "--disable-component-update",
                                                   "--disable-sync", "--no-pings", "--disable-domain-reliability"])
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Page:
    page: object                                  # playwright's Page
    shots: Path                                   # where screenshots go
    refused: list = field(default_factory=list)   # the URLs off this machine that the page asked for

    def screenshot(self, name):
        """A screenshot of the whole page; its path."""
        path = self.shots / f"{name}.png"
        with contextlib.suppress(Exception):
            self.page.screenshot(path=str(path), full_page=True, timeout=20_000)
        return path

    @contextlib.contextmanager
    def step(self, name):
        """A step of a test: when it fails, a screenshot is kept and its path added to the failure's message."""
        start = time.monotonic()
        try:
            yield
            print(f"{name}: {time.monotonic() - start:.1f} s")
        except Exception as error:
            path = self.screenshot(f"failed-{name}")
            raise AssertionError(f"{name}: {type(error).__name__}: {error}\nscreenshot: {path}") from error


@contextlib.contextmanager
def open_page(browser, shots, width=1400, height=1000):
    """A fresh browser context and page whose requests go to 127.0.0.1 only."""
    shots = Path(shots)
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(30_000)
    page = Page(context.new_page(), shots)

    def refuse(route):
        page.refused.append(route.request.url)
        route.abort()

    # A pattern, not a function: the browser matches it, so the requests to the server never wait for this process
    # (which answers a route only while it is in a Playwright call).
    context.route(OFF_THIS_MACHINE, refuse)
    try:
        yield page
    finally:
        context.close()
