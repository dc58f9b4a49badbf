"""While the grader runs nbgrader's steps, nbgrader does its usual work with less repeated set-up
(autograder.nbgrader_course.faster_nbgrader): its gradebooks share one SQLAlchemy engine per database and keep
it connected, each gradebook seeing what the one before it wrote, and its cells' metadata meet a validator built
once per schema, with the same verdicts. nbgrader is left as it was afterwards, even after an error.
tests/test_grader.py checks that nbgrader as it is records the same notebooks and scores as the grader."""
import jsonschema
import nbgrader.api
import nbgrader.nbgraderformat.common
import pytest
from nbformat.v4 import new_code_cell
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import MetadataValidator

from autograder.nbgrader_course import faster_nbgrader, metadata_schema_checked_once, one_engine_per_database


def student_ids(gradebook):
    return [student.id for student in gradebook.students]


def test_gradebooks_opened_while_it_lasts_share_one_engine_and_see_each_others_writes(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with one_engine_per_database():
        with Gradebook(url) as first:
            first.add_student("ada")
            engine = first.engine
        assert engine.pool.checkedin() == 1, "closing the gradebook closed the shared engine's connection"
        with Gradebook(url) as second:
            assert second.engine is engine, "a second gradebook of the same database made an engine of its own"
            assert student_ids(second) == ["ada"], "the second gradebook does not see what the first wrote"
            second.add_student("alan")
        with Gradebook(f"sqlite:///{tmp_path / 'other.db'}") as other:
            assert other.engine is not engine, "two databases were given the same engine"
            assert student_ids(other) == []
    assert engine.pool.checkedin() == 0, "the shared engine's connections stayed open after grading"
    with Gradebook(url) as after:
        assert after.engine is not engine, "gradebooks opened afterwards still share the grading's engine"
        assert student_ids(after) == ["ada", "alan"]


def test_nbgrader_is_left_as_it_was_after_an_error():
    make_engine, schemas = nbgrader.api.create_engine, nbgrader.nbgraderformat.common.jsonschema
    with pytest.raises(RuntimeError), faster_nbgrader():
        assert nbgrader.api.create_engine is not make_engine, "the engines are not shared while grading"
        assert nbgrader.nbgraderformat.common.jsonschema is not schemas, "the metadata schema is checked every time"
        raise RuntimeError("a grading run that failed")
    assert nbgrader.api.create_engine is make_engine
    assert nbgrader.nbgraderformat.common.jsonschema is jsonschema


def metadata_cell(**nbgrader_metadata):
    cell = new_code_cell("x = 1")
    cell.metadata["nbgrader"] = {"schema_version": 3, "grade": True, "solution": False, "locked": True,
                                 "grade_id": "test_x", "points": 1, **nbgrader_metadata}
    return cell


def verdict(cell):
    """None if nbgrader accepts the cell's metadata, else the error's type and message."""
    try:
        MetadataValidator().validate_cell(cell)
    except Exception as error:
        return type(error).__name__, str(error)
    return None


@pytest.mark.parametrize("metadata", [{}, {"points": -1}, {"points": "one"}, {"grade_id": "no spaces"},
                                      {"grade": "yes"}, {"stolen": True}, {"checksum": "short"}],
                         ids=["valid", "negative points", "text points", "bad id", "text flag", "extra key",
                              "short checksum"])
def test_metadata_gets_the_same_verdict_from_a_validator_built_once(metadata):
    cell = metadata_cell(**metadata)
    plain = verdict(cell)
    with metadata_schema_checked_once():
        once, again = verdict(cell), verdict(cell)
    assert once == plain and again == plain, f"nbgrader's verdict {plain} became {once}, then {again}"
    assert (plain is None) == (metadata == {}), f"the test's own expectation is wrong: {plain}"


def test_a_schema_that_is_itself_invalid_is_still_refused():
    with metadata_schema_checked_once(), pytest.raises(jsonschema.SchemaError):
        nbgrader.nbgraderformat.common.jsonschema.validate({}, {"type": "no such type"})
