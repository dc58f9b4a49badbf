"""What Canvas's and Moodle's names for submitted files say, and the course directory's record of who is who.

Read by the collector (collect.py), the grades CSV (grade.py) and the export (export.py); it imports nothing of
nbgrader. See collect.py for the names the two LMSs give the files.
"""
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

CANVAS = re.compile(r"(?P<student>[^_/]+)(?P<late>_late)?_(?P<id>\d+)_\d+_(?P<file>[^/]+)", re.IGNORECASE)
MOODLE_FILE = re.compile(r"(?P<student>[^_/]+)_(?P<id>\d+)_assignsubmission_file_(?P<file>[^/]+)")
MOODLE_FOLDER = re.compile(r"(?:^|/)(?P<student>[^_/]+)_(?P<id>\d+)_assignsubmission_file_?/(?:[^/]+/)*(?P<file>[^/]+)$")
# what LMSs and browsers add to a file's name: "-1" (a Canvas re-upload), " (1)" (a second download)
AGAIN = re.compile(r"(?:-(?P<upload>\d+)|\s*\((?P<copy>\d+)\))$")


@dataclass(frozen=True)
class LmsFile:
    """What an LMS's name for a submitted file says."""
    lms: str              # "canvas" or "moodle"
    name: str             # the student id the name alone gives: "smithjane", "jane-smith"
    user_id: str          # Canvas's user id; Moodle's participant id (in that assignment only)
    file: str             # the file's own name
    late: bool = False    # Canvas marks a late submission in the name
    full_name: str = ""   # Moodle's "Jane Smith"


def lms_file(path):
    """The LmsFile of a submission file's path as Canvas or Moodle name it, else None."""
    folder = MOODLE_FOLDER.search(Path(path).as_posix())
    if folder:
        return LmsFile("moodle", _moodle_student(folder["student"], folder["id"]), folder["id"], folder["file"],
                       full_name=folder["student"])
    match = MOODLE_FILE.fullmatch(Path(path).name)
    if match:
        return LmsFile("moodle", _moodle_student(match["student"], match["id"]), match["id"], match["file"],
                       full_name=match["student"])
    match = CANVAS.fullmatch(Path(path).name)
    if match:
        return LmsFile("canvas", match["student"].lower(), match["id"], match["file"], late=bool(match["late"]))
    return None


def _moodle_student(name, participant=""):
    """Moodle's full name (it writes '_' in names as spaces) as a student id: 'Jane Smith' -> 'jane-smith'."""
    words = re.findall(r"\w+", name.lower())
    if words == ["participant"] and participant:      # blind marking: no name, only the participant's number
        words.append(participant)
    return "-".join(words)


def notebook_name(filename, released):
    """(the released notebook ``filename`` is, (whether its name was exact, the number of its upload)): the
    suffixes an LMS or a browser adds are dropped, and a name that contains exactly one released notebook's name
    is that notebook. The second item orders several files of one notebook: the last is the one to collect."""
    if filename in released:
        return filename, (True, 0)
    stem, extension = os.path.splitext(filename)
    again = AGAIN.search(stem)
    upload = int(again["upload"] or again["copy"]) if again else 0
    stem = stem[:again.start()] if again else stem
    exact = f"{stem}{extension}" in released
    if not exact:
        inside = [name for name in released if os.path.splitext(name)[0] in stem]
        stem = os.path.splitext(inside[0])[0] if len(inside) == 1 else stem
    return f"{stem}{extension}", (exact, upload)


RECORD = Path(".autograder") / "lms-students.json"   # in the course directory


class StudentRecord:
    """The course directory's record of who is who in the LMS (``RECORD``): student id -> LMS identity, and for
    each assignment, each student's submission as the LMS named it (its user id there, whether it was late)."""

    def __init__(self, root):
        self.path = Path(root) / RECORD
        data = json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file() else {}
        self.students, self.assignments = data.get("students", {}), data.get("assignments", {})

    def student_of(self, found, namesakes):
        """The student id of ``found`` (an LmsFile): the one its Canvas user had, else its name, unless the name
        is another user's or ``namesakes`` (other user ids of the same name in this zip) share it."""
        for student, known in self.students.items():
            if found.lms == "canvas" and known == {"lms": "canvas", "user_id": found.user_id, "name": found.name}:
                return student
        taken = found.name in self.students and self.students[found.name].get("user_id") != found.user_id \
            and found.lms == "canvas"
        return f"{found.name}-{found.user_id}" if namesakes or taken else found.name

    def late(self, assignment):
        """The students whose submission of ``assignment`` the LMS marked late."""
        return sorted(s for s, submission in self.assignments.get(assignment, {}).items() if submission["late"])

    def add(self, student, found, assignment):
        self.students[student] = {"lms": found.lms, "user_id": found.user_id, "name": found.name}
        self.assignments.setdefault(assignment, {})[student] = {
            "lms": found.lms, "user_id": found.user_id, "late": found.late, "full_name": found.full_name}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"students": self.students, "assignments": self.assignments}, indent=1,
                                        sort_keys=True), encoding="utf-8")
