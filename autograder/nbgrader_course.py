"""nbgrader, driven from Python: a course directory's configuration, its NbGraderAPI and its gradebook.

nbgrader is imported inside the functions: the course's other commands do not pay for it.
"""
import functools
import json
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


def autograde(api, assignment, student, single_pass=True):
    """`api.autograde(assignment, student, force=True, create=True)`: one `nbgrader autograde`, with nbgrader's
    second pass over each notebook left out when its preprocessors are none (`single_pass`; see SinglePassAutograde)."""
    if not single_pass:
        return api.autograde(assignment, student, force=True, create=True)
    from nbgrader.utils import capture_log, temp_attrs

    with temp_attrs(api.coursedir, assignment_id=assignment, student_id=student):    # as NbGraderAPI.autograde
        app = _single_pass_autograde()(coursedir=api.coursedir, parent=api)
        app.force, app.create_student = True, True
        return capture_log(app)


@functools.cache
def _single_pass_autograde():
    from nbgrader.converters import Autograde
    from nbgrader.converters.base import BaseConverter

    class SinglePassAutograde(Autograde):
        """nbgrader's Autograde converts each notebook twice, with its sanitize preprocessors and then with its
        autograde preprocessors, each pass reading, copying, validating and writing the whole notebook. With no
        autograde preprocessors the second pass writes back what it read: this converter leaves it out."""

        def convert_single_notebook(self, notebook_filename):
            if self.autograde_preprocessors:
                return super().convert_single_notebook(notebook_filename)
            # Outside Autograde's own two-pass method its `_sanitizing` flag is True: this registers the
            # sanitize preprocessors, which read the submitted notebook and write the autograded one.
            self._init_preprocessors()
            return BaseConverter.convert_single_notebook(self, notebook_filename)

    return SinglePassAutograde


@contextmanager
def faster_nbgrader():
    """While it lasts, nbgrader in this process does the same work without redoing its set-up each time: its
    gradebooks share an engine per database, kept connected, and its metadata schema is checked once."""
    with one_engine_per_database(), metadata_schema_checked_once():
        yield


@contextmanager
def one_engine_per_database():
    """While it lasts, every gradebook nbgrader opens in this process shares one SQLAlchemy engine per database,
    and a gradebook that is closed leaves the engine's connections open for the next one.

    nbgrader's Gradebook makes a new engine each time it is opened, about seven times in each `autograde` call,
    and disposes of it (its connections closed) when it is closed. SQLAlchemy keeps its compiled statements per
    engine, so every call compiled its queries again, and opened new connections. SQLAlchemy's own advice
    ("Engine Configuration"): create_engine once per database URL, held for the lifetime of the process. The
    engines are disposed of when this ends. nbgrader looks `create_engine` up in its module when it opens a
    gradebook; if a later nbgrader stops doing so, this changes nothing and grading is only slower."""
    import nbgrader.api

    make_engine, engines = nbgrader.api.create_engine, {}

    def shared_engine(url, **options):
        key = (str(url), tuple(sorted(options.items())))
        if key not in engines:
            engines[key] = make_engine(url, **options)
            engines[key].dispose = lambda close=True: None     # Gradebook.close: the connections stay pooled
        return engines[key]

    nbgrader.api.create_engine = shared_engine
    try:
        yield
    finally:
        nbgrader.api.create_engine = make_engine
        for engine in engines.values():
            del engine.dispose
            engine.dispose()


@contextmanager
def metadata_schema_checked_once():
    """While it lasts, nbgrader checks its cells' metadata with one validator per schema.

    nbgrader's metadata check calls `jsonschema.validate(metadata, schema)` for every nbgrader cell, and that
    function first checks the schema itself against JSON Schema's metaschema, then builds a validator. Here each
    schema is checked once and its validator kept; a cell's metadata meets the same validator class, and the same
    best error is raised. For notebook 06 (29 nbgrader cells), CheckCellMetadata took 36 ms, and takes 9 ms.
    nbgrader looks `jsonschema` up in its module: if a later nbgrader stops doing so, this changes nothing and
    grading is only slower."""
    import jsonschema
    import nbgrader.nbgraderformat.common as nbgrader_format

    validators = {}

    def validate(instance, schema):
        key = json.dumps(schema, sort_keys=True)
        if key not in validators:
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(schema)
            validators[key] = validator_class(schema)
        error = jsonschema.exceptions.best_match(validators[key].iter_errors(instance))
        if error is not None:
            raise error

    class JsonschemaCheckingSchemasOnce:
        def __getattr__(self, name):
            return validate if name == "validate" else getattr(jsonschema, name)

    nbgrader_format.jsonschema = JsonschemaCheckingSchemasOnce()
    try:
        yield
    finally:
        nbgrader_format.jsonschema = jsonschema


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


def submitted_students(course, assignment):
    """The students with a folder submitted/<student>/<assignment> in the course folder ``course``, sorted."""
    return sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}") if p.is_dir())
