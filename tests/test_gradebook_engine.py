"""While the grader records grades, nbgrader's gradebooks share one SQLAlchemy engine per database
(autograder.nbgrader_course.one_engine_per_database): each gradebook opened sees what the one before it wrote,
another database gets an engine of its own, and nbgrader is left as it was afterwards, even after an error."""
import nbgrader.api
import pytest
from nbgrader.api import Gradebook

from autograder.nbgrader_course import one_engine_per_database


def student_ids(gradebook):
    return [student.id for student in gradebook.students]


def test_gradebooks_opened_while_it_lasts_share_one_engine_and_see_each_others_writes(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with one_engine_per_database():
        with Gradebook(url) as first:
            first.add_student("ada")
            engine = first.engine
        with Gradebook(url) as second:
            assert second.engine is engine, "a second gradebook of the same database made an engine of its own"
            assert student_ids(second) == ["ada"], "the second gradebook does not see what the first wrote"
            second.add_student("alan")
        with Gradebook(f"sqlite:///{tmp_path / 'other.db'}") as other:
            assert other.engine is not engine, "two databases were given the same engine"
            assert student_ids(other) == []
    with Gradebook(url) as after:
        assert after.engine is not engine, "gradebooks opened afterwards still share the grading's engine"
        assert student_ids(after) == ["ada", "alan"]


def test_nbgrader_makes_its_own_engines_again_after_an_error(tmp_path):
    make_engine = nbgrader.api.create_engine
    with pytest.raises(RuntimeError), one_engine_per_database():
        assert nbgrader.api.create_engine is not make_engine, "the engines are not shared while grading"
        raise RuntimeError("a grading run that failed")
    assert nbgrader.api.create_engine is make_engine
