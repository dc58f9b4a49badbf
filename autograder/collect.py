"""``nbgrader zip_collect``'s collector for the zips of Canvas and Moodle (the course's nbgrader_config.py sets it).

nbgrader's own collector matches one regular expression against each extracted file's *absolute* path, so a
pattern written for the file's name matches nothing, or the wrong part of the path. This one reads the names the
two LMSs give the files of their "download all submissions" zip:

* **Canvas**: ``smithjane_12345_67890_01_positional_encoding.ipynb`` (name, user id, submission id, the file's own
  name); a late submission has ``late`` (or ``LATE``) after the name, ``smithjane_late_12345_67890_...``; a file
  the student uploaded again under the same name ends in ``-1``, ``-2``, ... before the extension. The student
  id is the name part (``smithjane``).
* **Moodle**: ``Jane Smith_1234567_assignsubmission_file_/01_positional_encoding.ipynb`` (a folder per student,
  Moodle's default since 3.1) or, without folders, ``Jane Smith_1234567_assignsubmission_file_01_positional_
  encoding.ipynb``. The number is the participant's id in that one assignment, so the student id is the full
  name, lower-cased, with ``-`` between its words (``jane-smith``); under blind marking (``Participant_1234567``)
  it is ``participant-1234567``.

The notebook's name is then matched to the release: the re-upload suffix (``-1``) and a browser's duplicate
suffix (`` (1)``) are dropped, and a name that contains exactly one released notebook's name (``Copy of
01_positional_encoding``) is that notebook. When one student's zip holds the same notebook more than once, the
latest upload (the highest suffix) is collected and the others are skipped, with a line that says so.

Another LMS: set ``c.FileNameCollectorPlugin.named_regexp`` (see docs/instructors.md); this collector then does exactly
what nbgrader's does with it.
"""
import os
import re
from pathlib import Path

from nbgrader.plugins import FileNameCollectorPlugin

CANVAS = re.compile(r"(?P<student>[^_/]+)(?:_late)?_\d+_\d+_(?P<file>[^/]+)", re.IGNORECASE)
MOODLE_FILE = re.compile(r"(?P<student>[^_/]+)_\d+_assignsubmission_file_(?P<file>[^/]+)")
MOODLE_FOLDER = re.compile(r"(?:^|/)(?P<student>[^_/]+)_(?P<id>\d+)_assignsubmission_file_?/(?:[^/]+/)*(?P<file>[^/]+)$")
# what LMSs and browsers add to a file's name: "-1" (a Canvas re-upload), " (1)" (a second download)
AGAIN = re.compile(r"(?:-(?P<upload>\d+)|\s*\((?P<copy>\d+)\))$")


def lms_fields(path):
    """(student id, the file's own name) from a submission file's path as Canvas or Moodle name it, else None."""
    folder = MOODLE_FOLDER.search(Path(path).as_posix())
    if folder:
        return _moodle_student(folder["student"], folder["id"]), folder["file"]
    for pattern, student in ((MOODLE_FILE, _moodle_student), (CANVAS, str.lower)):
        match = pattern.fullmatch(Path(path).name)
        if match:
            return student(match["student"]), match["file"]
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


class LMSCollector(FileNameCollectorPlugin):
    """Collect the files of a Canvas or Moodle zip (see the module's docstring)."""

    _release_names = None

    def collect(self, submitted_file):
        if self.named_regexp:        # the instructor's own pattern: nbgrader's rule, on the absolute path
            return super().collect(submitted_file)
        if os.path.splitext(submitted_file)[1] not in self.valid_ext:
            return None
        found = self._read(submitted_file)
        if found is None:
            self.log.warning("Not a Canvas or Moodle submission's name, skipped: %s (set "
                             "c.FileNameCollectorPlugin.named_regexp for another LMS)", submitted_file)
            return None
        student, notebook, order = found
        later = [path for path in self._siblings(submitted_file)
                 if (there := self._read(path)) and there[:2] == (student, notebook)
                 and (there[2], path) > (order, submitted_file)]
        if later:
            self.log.warning("Skipped %s: %s uploaded %s again, in %s", submitted_file, student, notebook,
                             os.path.basename(max(later)))
            return None
        return {"student_id": student, "file_id": notebook}

    def _read(self, path):
        """(student id, released notebook name, order) of a file (notebook_name's order), or None if the
        LMS's name is not found."""
        fields = lms_fields(path)
        if fields is None:
            return None
        return (fields[0], *notebook_name(fields[1], self._released()))

    def _released(self):
        """The names of the assignment's released notebooks (read once)."""
        if self._release_names is None:
            coursedir = self.parent.coursedir
            folder = Path(coursedir.format_path(coursedir.release_directory, ".", coursedir.assignment_id))
            self._release_names = {path.name for path in folder.glob("*.ipynb")}
        return self._release_names

    def _siblings(self, path):
        """The other files of the folder ``path`` is in: where another upload of the same notebook would be."""
        folder = os.path.dirname(path)
        return [os.path.join(folder, name) for name in sorted(os.listdir(folder))
                if name != os.path.basename(path) and os.path.splitext(name)[1] in self.valid_ext]
