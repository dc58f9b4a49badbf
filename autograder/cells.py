"""What kind of nbgrader cell a cell is: nbgrader's own predicates (``nbgrader.utils``).

A student's check (check.py) runs where nbgrader is not installed (Colab), so without it the same three
rules are spelled out here, as nbgrader 0.9 writes them.
"""
try:
    from nbgrader.utils import is_grade, is_locked, is_solution
except ImportError:
    def is_grade(cell):
        return bool(cell.metadata.get("nbgrader", {}).get("grade", False))

    def is_solution(cell):
        return bool(cell.metadata.get("nbgrader", {}).get("solution", False))

    def is_locked(cell):
        if "nbgrader" not in cell.metadata or is_solution(cell):
            return False
        return is_grade(cell) or bool(cell.metadata["nbgrader"].get("locked", False))


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def is_test(cell):
    """An autograder test cell: graded, code, not an answer."""
    return cell.cell_type == "code" and bool(is_grade(cell)) and not is_solution(cell)


def is_locked_setup(cell):
    """A read-only cell of the release that is neither an answer nor a test (nbgrader restores its source)."""
    return bool(is_locked(cell)) and not is_grade(cell) and bool(grade_id(cell))


def is_answer(cell):
    """An autograded answer cell: where a student writes an exercise."""
    return cell.cell_type == "code" and bool(is_solution(cell)) and not is_grade(cell)


def exercise_of(test_grade_id, exercises):
    """The exercise a test cell belongs to: its grade_id is test_<exercise> or test_<exercise>_<aspect>."""
    matches = [e for e in exercises if test_grade_id == f"test_{e}" or test_grade_id.startswith(f"test_{e}_")]
    return max(matches, key=len) if matches else None
