"""nbgrader, driven from Python: a course directory's configuration, its NbGraderAPI and its gradebook.

nbgrader is imported inside the functions: the course's other commands do not pay for it.
"""
import re
import warnings
from contextlib import contextmanager
from pathlib import Path


def quiet_nbgrader():
    """Silence the SQLAlchemy warnings nbgrader's gradebook code raises on every run ("Object of type
    <SubmittedAssignment> not in session ..."): they are about nbgrader's own session handling, and say nothing
    an instructor can act on."""
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning)


def nbgrader_config(course, **overrides):
    """The course's nbgrader_config.py as a traitlets Config, plus `overrides` ({"Class.trait": value})."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    quiet_nbgrader()
    config = Config()
    if (course / "nbgrader_config.py").exists():
        config.merge(PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config())
    for name, value in overrides.items():
        section, trait = name.split(".")
        config[section][trait] = value
    config.CourseDirectory.root = str(course)
    return config


def nbgrader_api(course, **overrides):
    """An NbGraderAPI for `course` with its nbgrader_config.py, plus `overrides` ({"Class.trait": value})."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = nbgrader_config(course, **overrides)
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def open_gradebook(course):
    """The course's gradebook where nbgrader keeps it: CourseDirectory.db_url of the course's configuration
    (by default sqlite:///COURSE/gradebook.db). Use it as a context manager."""
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=nbgrader_config(Path(course).resolve()))
    return Gradebook(coursedir.db_url, coursedir.course_id)


@contextmanager
def one_engine_per_database():
    """While it lasts, every gradebook nbgrader opens in this process shares one SQLAlchemy engine per database.

    nbgrader's Gradebook makes a new engine each time it is opened, about seven times in each `autograde` call,
    and SQLAlchemy keeps its compiled statements per engine, so every call compiled its queries again.
    SQLAlchemy's own advice ("Engine Configuration"): create_engine once per database URL, held for the
    lifetime of the process. A gradebook that is closed still disposes of its connections; the next one opens
    new ones on the same engine. nbgrader looks `create_engine` up in its module when it opens a gradebook; if
    a later nbgrader stops doing so, this changes nothing and grading is only slower."""
    import nbgrader.api

    make_engine, engines = nbgrader.api.create_engine, {}

    def shared_engine(url, **options):
        key = (str(url), tuple(sorted(options.items())))
        if key not in engines:
            engines[key] = make_engine(url, **options)
        return engines[key]

    nbgrader.api.create_engine = shared_engine
    try:
        yield
    finally:
        nbgrader.api.create_engine = make_engine
        for engine in engines.values():
            engine.dispose()


def nbgrader_output(result):
    """All an NbGraderAPI call's result says: its log, then its error (a traceback)."""
    return f"{result.get('log') or ''}\n{result.get('error') or ''}".strip()


def nbgrader_reason(output):
    """Why an nbgrader call failed, in one line: the first error its output names, other than nbgrader's summary
    ("NbGraderException: Please see the above traceback"); else its last line."""
    lines = output.splitlines()
    errors = [line.strip() for line in lines
              if re.match(r"\s*[\w.]*(Error|Exception): ", line) and "NbGraderException" not in line]
    return errors[0] if errors else next((line.strip() for line in reversed(lines) if line.strip()), "no output")
