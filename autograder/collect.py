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

**Who is who.** Canvas's name part (``smithjane``) is not unique: two users may share it. The collector keeps each
file's LMS identity (Canvas's user id, Moodle's participant id and full name, Canvas's late marker) in the course
directory's ``.autograder/lms-students.json``, and a Canvas user keeps the student id it was first collected as,
assignment after assignment. Namesakes (one name, two Canvas user ids; one Moodle full name, two participants)
each get the name and their id (``smithjohn-22222``), with a warning that says so; a user already known keeps
their id. The gradebook's student records get the LMS user id and, from Moodle, the first and last name; the
late submissions of each assignment are listed there too, for a late policy (``python -m autograder export``
and the grades CSV read them).

The notebook's name is then matched to the release: the re-upload suffix (``-1``) and a browser's duplicate
suffix (`` (1)``) are dropped, and a name that contains exactly one released notebook's name (``Copy of
01_positional_encoding``) is that notebook. When one student's zip holds the same notebook more than once, the
latest upload (the highest suffix) is collected and the others are skipped, with a line that says so.

Another LMS: set ``c.FileNameCollectorPlugin.named_regexp`` (see docs/instructors.md); this collector then does exactly
what nbgrader's does with it.
"""
import os
from pathlib import Path

from nbgrader.plugins import FileNameCollectorPlugin

from .lms import StudentRecord, lms_file, notebook_name


class LMSCollector(FileNameCollectorPlugin):
    """Collect the files of a Canvas or Moodle zip (see the module's docstring)."""

    _release_names = None
    _warned = None

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
        lms, notebook, order = found
        if notebook not in self._released():
            self.log.warning("Skipped %s: %s is not a notebook of %s (%s)", submitted_file, notebook,
                             self.parent.coursedir.assignment_id, ", ".join(sorted(self._released())))
            return None
        later = [path for path in self._siblings(submitted_file)
                 if (there := self._read(path)) and (there[0].lms, there[0].user_id, there[1]) ==
                 (lms.lms, lms.user_id, notebook) and (there[2], path) > (order, submitted_file)]
        if later:
            self.log.warning("Skipped %s: %s uploaded %s again, in %s", submitted_file, lms.name, notebook,
                             os.path.basename(max(later)))
            return None
        return {"student_id": self._student(submitted_file, lms), "file_id": notebook}

    def _student(self, path, found):
        """The student id of a file, recorded with its LMS identity (and in the gradebook's student record)."""
        namesakes = sorted({there[0].user_id for other in self._siblings(path) if (there := self._read(other))
                            and there[0].lms == found.lms and there[0].name == found.name
                            and there[0].user_id != found.user_id})
        record = StudentRecord(self.parent.coursedir.root)
        student = record.student_of(found, namesakes)
        if namesakes and student != found.name:
            self._warn_once(found.name, f"{len(namesakes) + 1} {found.lms.capitalize()} users are named "
                            f"{found.name} (ids {', '.join(sorted(namesakes + [found.user_id]))}): each is collected as "
                            f"the name and their id, here {student}")
        record.add(student, found, self.parent.coursedir.assignment_id)
        self._update_gradebook(student, found)
        return student

    def _warn_once(self, key, message):
        self._warned = self._warned if self._warned is not None else set()
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning(message)

    def _update_gradebook(self, student, found):
        from nbgrader.api import Gradebook

        names = found.full_name.split(" ", 1) if found.full_name != "Participant" else []   # blind marking: none
        fields = {"lms_user_id": found.user_id} if found.lms == "canvas" else {}
        if len(names) == 2:
            fields.update(first_name=names[0], last_name=names[1])
        with Gradebook(self.parent.coursedir.db_url) as gradebook:
            gradebook.update_or_create_student(student, **fields)

    def _read(self, path):
        """(LmsFile, released notebook name, order) of a file (notebook_name's order), or None if the LMS's
        name is not found."""
        found = lms_file(path)
        if found is None:
            return None
        return (found, *notebook_name(found.file, self._released()))

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
