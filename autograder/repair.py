"""Match a submission's cells back to the release, so that nbgrader grades the right cells.

The problem
-----------
nbgrader recognises the graded cells of a submission (answer cells, test cells, read-only cells) only by
the ``metadata.nbgrader`` that ``generate_assignment`` wrote into the release (``grade_id``, ``solution``,
``grade``, ``locked``, ``points``, ...). Colab and some editors drop that metadata, regenerate the cell
ids, or keep the metadata on a duplicated cell. nbgrader then refuses the notebook, grades an answer as
missing, or sees the same ``grade_id`` twice.

What this module does
---------------------
:func:`repair_notebook` finds, for every release cell that carries nbgrader metadata (a "graded cell"),
the submission cell that plays its part, and gives that cell exactly the release's nbgrader metadata.
Each rule runs over all graded cells before the next one, so strong evidence is used up first, and a
submission cell is used at most once:

1. grade_id: the submission cell whose nbgrader metadata has the release cell's ``grade_id``. When a
   cell was duplicated, prefer the copy a student worked in (an answer that differs from the stub, a
   test that equals the release), then the one with the release's cell id (Jupyter gives a copy a new
   id), then the first (a copy is pasted below its original).
2. cell id: the cell with the same nbformat cell ``id`` and cell type.
3. source: for cells the student cannot change (locked cells, tests, read-only markdown), the cell
   whose source equals the release's, whitespace normalised.
4. position: for answer cells, the cells of the same type between the neighbouring matched cells. The
   neighbours are the graded cells found so far and the release's ungraded cells (explanations, demos)
   found unchanged in the submission. Cells that are copies, or edited copies, of other release cells
   are not answers. Among the candidates prefer one that defines the function/class names of the
   release stub (``ast``, falling back to a regular expression), then the most similar (``difflib``).
   If no cell in that window defines the stub's names but one elsewhere does, that one is taken: the
   student moved the answer.

If fewer than half of the release's graded cells are found, the submission is not this assignment's
notebook: :class:`RepairError`. Otherwise:

* submission cells whose nbgrader metadata matched nothing (a duplicated cell, a stale grade_id) lose
  that metadata, so that nbgrader does not count them twice; the cells themselves stay;
* graded cells the student moved go back to the release's order; cells the student added stay where
  they are;
* graded cells missing from the submission are re-inserted from the release, answer cells as the
  release's empty stub, so they score nothing;
* missing, duplicated or invalid cell ids get fresh ids (an nbformat 4.0-4.4 notebook is upgraded to
  4.5, whose cells carry ids), so that the result passes ``nbformat.validate``.

Every change is reported as a sentence for the instructor. Metadata that differs only in the order of
its keys, and metadata outside ``nbgrader`` (colab, execution, ...), is not a change.

A copy made before the instructor changed the assignment and released it again (``nbgrader generate_assignment
--force``) is not damaged: its cells carry an earlier release's metadata, whole, differing from the current
release's only in a checksum or in points (:func:`of_an_earlier_release`). Those repairs, and the cells the current
release added or removed in such a copy, end with :data:`RELEASE_CHANGED`, so that the feedback tells the two apart.
"""
import ast
import collections
import copy
import difflib
import functools
import os
import re
import uuid
from pathlib import Path

import nbformat

# nbformat 4.5: a cell id is 1-64 letters, digits, '-' or '_'.
_CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# The fallback for sources that do not parse (IPython magics, unfinished code): top-level definitions.
_DEFINITION = re.compile(r"^(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)
# An unmatched cell this similar to another release cell is that cell, edited: not an answer.
_EDITED_COPY = 0.6
# The end of the repair sentence for an answer cell the student deleted (check.py shows those in full).
SCORES_NOTHING = "which scores nothing"
# The end of the repair sentence for a cell of a copy made from an earlier release (feedback.py tells them apart).
RELEASE_CHANGED = "this copy was made from an earlier release of the assignment"
# What `nbgrader generate_assignment` recomputes when a cell changes (its checksum) or an instructor may change
# (its points). Colab and editors drop the whole of nbgrader's metadata, and a student has no reason to edit these.
_RELEASE_KEYS = {"checksum", "points"}


class RepairError(Exception):
    """The submission cannot be matched to the release: most likely another assignment's notebook."""


def repair_notebook(submitted, release, name=""):
    """Return ``(repaired, actions)``: a copy of ``submitted`` whose graded cells carry the release's
    nbgrader metadata, and the repairs made, as sentences (empty when nothing had to be repaired).

    ``submitted`` and ``release`` are nbformat v4 notebooks and are left untouched; ``name`` names the
    release (say ``02_attention.ipynb``) in the message of :class:`RepairError`.
    """
    return _Repair(submitted, release).run(name, "the submitted notebook")


def repair_file(submitted_path, release_path, out_path):
    """Read a submission and its release, write the repaired submission to ``out_path``, return the
    actions. Raises :class:`RepairError` when the submission is not this release's notebook."""
    # Never through a link: it could be the instructor's source notebook, solutions and hidden tests included.
    with open(submitted_path, encoding="utf-8", opener=_no_follow) as file:
        submitted = nbformat.read(file, as_version=4)
    release = nbformat.read(str(release_path), as_version=4)
    # named as the student knows it: the message reaches their feedback page, the course's folders need not
    label = f"the submitted {Path(submitted_path).name}"
    repaired, actions = _Repair(submitted, release).run(Path(release_path).name, label)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(repaired, str(out_path))
    return actions


def of_an_earlier_release(had, wanted):
    """Whether a cell's nbgrader metadata `had`, whose grade_id is the release cell's, is the metadata of another
    release of that cell (the instructor changed it and ran `nbgrader generate_assignment --force` since the
    student's copy was made) rather than damage: it differs from the release's `wanted` in the checksum nbgrader
    computes from the cell (its source, its points, ...), perhaps in the points too, and in nothing else."""
    differ = {k for k in set(had) | set(wanted) if had.get(k) != wanted.get(k)}
    return "checksum" in differ and "checksum" in had and differ <= _RELEASE_KEYS


def _no_follow(path, flags):
    return os.open(path, flags | os.O_NOFOLLOW)


class _Repair:
    """One repair: the matching state shared by the rules, and the steps that use it."""

    def __init__(self, submitted, release):
        self.release = release.cells
        self.nb = copy.deepcopy(submitted)       # the caller's notebook stays as it was
        self.cells = self.nb.cells
        self.graded = [r for r, cell in enumerate(self.release) if _nbgrader(cell).get("grade_id")]
        self.grade_ids = {_nbgrader(self.release[r])["grade_id"] for r in self.graded}
        self.stub_names = {r: _defined_names(self.release[r]) for r in self.graded
                           if _nbgrader(self.release[r]).get("solution")}
        self.release_texts = {_normalised(cell) for cell in self.release}
        self.names = [_defined_names(cell) for cell in self.cells]
        self.match = {}      # graded release index -> submission index
        self.how = {}        # graded release index -> the rule that found it, for the report
        self.anchors = {}    # ungraded release index -> submission index of its unchanged copy
        self.taken = set()   # submission indices matched or anchored
        self.actions = []
        self.earlier_release = False   # a cell's metadata is an earlier release's (of_an_earlier_release)

    def run(self, name, label):
        self.match_by_grade_id()
        self.match_by_cell_id()
        self.match_by_source()
        self.find_anchors()
        self.match_by_position()
        self.check_enough_found(name, label)
        self.restore_metadata()
        self.strip_unmatched_metadata()
        self.nb.cells = self.put_in_release_order()
        self.fix_cell_ids()
        return self.nb, self.actions

    # --- matching -------------------------------------------------------------------------------

    def take(self, r, s, how):
        self.match[r] = s
        self.how[r] = how
        self.taken.add(s)

    def free(self, s):
        """May submission cell ``s`` still be matched by rules 2-4? Not when it is taken, and not when
        it carries a release grade_id that rule 1 gave to another copy: it is a duplicate."""
        return s not in self.taken and _nbgrader(self.cells[s]).get("grade_id") not in self.grade_ids

    def unmatched(self):
        return [r for r in self.graded if r not in self.match]

    def match_by_grade_id(self):
        cells_of = {}
        for s, cell in enumerate(self.cells):
            cells_of.setdefault(_nbgrader(cell).get("grade_id"), []).append(s)
        for r in self.graded:
            copies = cells_of.get(_nbgrader(self.release[r])["grade_id"], [])
            if copies:
                self.take(r, max(copies, key=lambda s: self.preference_among_copies(r, s)), "grade_id")

    def preference_among_copies(self, r, s):
        """Sort key among cells sharing a grade_id: the copy the student worked in (an answer that
        differs from the stub, a test that is the release's), the release's cell id, the first."""
        release_cell, cell = self.release[r], self.cells[s]
        changed = _normalised(cell) != _normalised(release_cell)
        worked_in = changed if _nbgrader(release_cell).get("solution") else not changed
        return worked_in, cell.get("id") == release_cell.get("id"), -s

    def match_by_cell_id(self):
        for r in self.unmatched():
            release_cell = self.release[r]
            for s, cell in enumerate(self.cells):
                if (self.free(s) and release_cell.get("id") is not None
                        and cell.get("id") == release_cell.get("id")
                        and cell.cell_type == release_cell.cell_type):
                    self.take(r, s, "its cell id")
                    break

    def match_by_source(self):
        for r in self.unmatched():
            release_cell = self.release[r]
            if _nbgrader(release_cell).get("solution"):
                continue                         # answers change: rule 4
            same = [s for s, cell in enumerate(self.cells)
                    if self.free(s) and cell.cell_type == release_cell.cell_type
                    and _normalised(cell) == _normalised(release_cell)]
            if same:
                # identical cells: take the first one after the previous graded cell's match
                after = self.previous_match(r)
                self.take(r, min(same, key=lambda s: (s < after, s)), "its unchanged source")

    def previous_match(self, r):
        return max((s for k, s in self.match.items() if k < r), default=-1)

    def find_anchors(self):
        """Ungraded release cells found unchanged, in order (difflib on the whole notebook): they bound
        the windows of rule 4 and place re-inserted cells. Graded and empty cells never pair here."""
        release_keys = [(("release", r) if r in self.graded or not _normalised(cell)
                         else (cell.cell_type, _normalised(cell)))
                        for r, cell in enumerate(self.release)]
        submission_keys = [(("submission", s) if s in self.taken or not _normalised(cell)
                            else (cell.cell_type, _normalised(cell)))
                           for s, cell in enumerate(self.cells)]
        matcher = difflib.SequenceMatcher(None, release_keys, submission_keys, autojunk=False)
        for r0, s0, size in matcher.get_matching_blocks():
            for k in range(size):
                self.anchors[r0 + k] = s0 + k
                self.taken.add(s0 + k)

    def match_by_position(self):
        for r in self.unmatched():
            if _nbgrader(self.release[r]).get("solution"):
                s = self.best_candidate(r)
                if s is not None:
                    self.take(r, s, "its position")

    def best_candidate(self, r):
        release_cell = self.release[r]
        window, expected, neighbours = self.window(r)

        def candidate(s):
            return (self.free(s) and self.cells[s].cell_type == release_cell.cell_type
                    and not self.copies_another_release_cell(s, r, *neighbours))

        def best(candidates):      # the most similar to the stub, then the nearest to where it was
            return max(candidates, default=None, key=lambda s: (
                _similarity(self.cells[s], release_cell), -abs(s - expected)))

        names = self.stub_names.get(r)
        if names:
            defining = [s for s in range(len(self.cells)) if names <= self.names[s] and candidate(s)]
            inside = [s for s in defining if s in window]
            if inside:
                return best(inside)
            if defining:           # the student moved the answer
                return min(defining, key=lambda s: abs(s - expected))
        # an answer to another exercise is not this one's
        others = set().union(*(n for k, n in self.stub_names.items() if k != r))
        return best([s for s in window if not self.names[s] & others and candidate(s)])

    def window(self, r):
        """The submission cells between the matched neighbours of release cell ``r``, the position
        it would have there, and the two neighbours (release indices, None at the ends)."""
        known = {**self.anchors, **self.match}
        prev = max((k for k in known if k < r), default=None)
        nxt = min((k for k in known if k > r), default=None)
        lo = known[prev] if prev is not None else -1
        hi = known[nxt] if nxt is not None else len(self.cells)
        if lo >= hi:   # the student moved cells across each other: take the gap after the previous one
            hi = min((s for s in known.values() if s > lo), default=len(self.cells))
        expected = lo + (r - prev if prev is not None else r + 1)
        return range(lo + 1, hi), expected, (prev, nxt)

    def copies_another_release_cell(self, s, r, prev, nxt):
        """Is submission cell ``s`` a copy of another release cell, or an edited copy of one of the
        release cells around ``r`` (an explanation the student annotated)?"""
        cell = self.cells[s]
        text = _normalised(cell)
        if text in self.release_texts and text != _normalised(self.release[r]):
            return True
        lo = -1 if prev is None else prev
        hi = len(self.release) if nxt is None else nxt
        bar = max(_EDITED_COPY, _similarity(cell, self.release[r]) + 1e-9)
        return any(_similar_enough(cell, other, bar)
                   for k, other in enumerate(self.release[lo + 1:hi], start=lo + 1)
                   if k != r and other.cell_type == cell.cell_type)

    def check_enough_found(self, name, label):
        found, total = len(self.match), len(self.graded)
        if 2 * found >= total:
            return
        missing = [_nbgrader(self.release[r])["grade_id"] for r in self.unmatched()]
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise RepairError(
            f"{label} does not look like the release of {name or 'this assignment'}: only {found} of "
            f"{total} graded cells could be found (missing: {shown}); was the wrong notebook submitted?")

    # --- repairing ------------------------------------------------------------------------------

    def restore_metadata(self):
        for r in self.graded:
            if r not in self.match:
                continue
            s, release_cell = self.match[r], self.release[r]
            cell, wanted = self.cells[s], _nbgrader(release_cell)
            where = f"{_kind(wanted)} '{wanted['grade_id']}' (cell {s + 1} of the submission)"
            if cell.cell_type != release_cell.cell_type:   # nbgrader would convert it too, silently
                _set_cell_type(cell, release_cell.cell_type)
                self.actions.append(f"changed {where} back to a {release_cell.cell_type} cell")
            had = _nbgrader(cell)
            if had == wanted:                              # dict equality: key order does not matter
                continue
            if self.how[r] == "grade_id":
                differ = sorted(k for k in set(had) | set(wanted) if had.get(k) != wanted.get(k))
                if of_an_earlier_release(had, wanted):
                    self.earlier_release = True
                    self.actions.append(f"took the nbgrader metadata of {where} from the current release "
                                        f"({', '.join(differ)} differed): {RELEASE_CHANGED}")
                else:
                    self.actions.append(f"reset the nbgrader metadata of {where}: {', '.join(differ)} "
                                        f"differed from the release")
            elif had.get("grade_id"):
                self.actions.append(f"replaced the stale nbgrader metadata (grade_id "
                                    f"'{had['grade_id']}') of {where}, found by {self.how[r]}")
            else:
                self.actions.append(f"restored the nbgrader metadata of {where}, found by {self.how[r]}")
            cell.metadata["nbgrader"] = copy.deepcopy(wanted)

    def strip_unmatched_metadata(self):
        graded_at = {_nbgrader(self.release[r])["grade_id"]: s for r, s in self.match.items()}
        matched = set(self.match.values())
        for s, cell in enumerate(self.cells):
            grade_id = _nbgrader(cell).get("grade_id")
            if s in matched or not _nbgrader(cell):
                continue
            if grade_id in graded_at:
                why = f"a second copy of '{grade_id}', which is graded in cell {graded_at[grade_id] + 1}"
            elif grade_id is None:
                why = "its nbgrader metadata has no grade_id"
            elif self.earlier_release:
                why = f"grade_id '{grade_id}' matches no cell of the current release: {RELEASE_CHANGED}"
            else:
                why = f"grade_id '{grade_id}' matches no cell of the release"
            del cell.metadata["nbgrader"]
            self.actions.append(f"removed the nbgrader metadata of cell {s + 1} of the submission: {why}")

    def put_in_release_order(self):
        """Graded cells found in the release's order stay (the longest increasing run); the others,
        moved or missing, are put after their predecessor in the release. Other cells stay."""
        in_order = _longest_increasing([self.match[r] for r in self.graded if r in self.match])
        stay = {r for r in self.graded if self.match.get(r) in in_order}
        moving = {self.match[r] for r in self.graded if r in self.match and r not in stay}
        out = [cell for s, cell in enumerate(self.cells) if s not in moving]
        placed = {r: self.cells[self.match[r]] for r in stay}
        for r in self.graded:
            if r in stay:
                continue
            meta = _nbgrader(self.release[r])
            if r in self.match:
                cell = self.cells[self.match[r]]
                self.actions.append(f"moved {_kind(meta)} '{meta['grade_id']}' (cell "
                                    f"{self.match[r] + 1} of the submission) back to its place in the "
                                    f"release's order")
            elif self.earlier_release and not meta.get("solution"):     # a cell the release added since
                cell = copy.deepcopy(self.release[r])
                self.actions.append(f"inserted the {_kind(meta)} '{meta['grade_id']}' of the current release, "
                                    f"which the copy lacks: {RELEASE_CHANGED}")
            else:
                cell = copy.deepcopy(self.release[r])
                self.actions.append(f"re-inserted the missing {_kind(meta)} '{meta['grade_id']}' from "
                                    f"the release" + (f" as its empty stub, {SCORES_NOTHING}"
                                                      if meta.get("solution") else ""))
            out.insert(self.insertion_point(r, out, placed, stay), cell)
            placed[r] = cell
        return out

    def insertion_point(self, r, out, placed, stay):
        """Where release cell ``r`` goes in ``out``: between the previous graded cell and the next one
        that stays, next to the nearest ungraded release cell found unchanged around it."""
        def position(cell):
            return next(i for i, c in enumerate(out) if c is cell)

        prev = max((k for k in self.graded if k < r), default=None)
        nxt_stay = min((k for k in stay if k > r), default=None)
        nxt_graded = min((k for k in self.graded if k > r), default=len(self.release))
        lo = position(placed[prev]) if prev is not None else -1
        hi = position(placed[nxt_stay]) if nxt_stay is not None else len(out)
        start = -1 if prev is None else prev
        for k in range(r - 1, start, -1):            # after the nearest unchanged cell before it
            if k in self.anchors and lo < position(self.cells[self.anchors[k]]) < hi:
                return position(self.cells[self.anchors[k]]) + 1
        for k in range(r + 1, nxt_graded):           # or before the nearest unchanged cell after it
            if k in self.anchors and lo < position(self.cells[self.anchors[k]]) < hi:
                return position(self.cells[self.anchors[k]])
        return lo + 1

    def fix_cell_ids(self):
        old_minor = self.nb.nbformat_minor
        if self.nb.nbformat == 4 and old_minor < 5:
            self.nb.nbformat_minor = 5                # the first minor version whose cells carry ids
        taken = {cell.get("id") for cell in self.nb.cells}
        seen, fresh = set(), 0
        for cell in self.nb.cells:
            cell_id = cell.get("id")
            if not (isinstance(cell_id, str) and _CELL_ID.fullmatch(cell_id)) or cell_id in seen:
                cell_id = _new_cell_id(taken)
                cell["id"] = cell_id
                taken.add(cell_id)
                fresh += 1
            seen.add(cell_id)
        if self.nb.nbformat_minor != old_minor:
            self.actions.append(f"upgraded the notebook from nbformat 4.{old_minor} to 4.5, whose "
                                f"cells carry ids, and gave {_cells(fresh)} ids")
        elif fresh:
            self.actions.append(f"gave {_cells(fresh)} fresh ids (missing, duplicated or invalid)")


# --- small helpers ------------------------------------------------------------------------------

def _nbgrader(cell):
    """The cell's nbgrader metadata, {} when there is none (nbgrader itself leaves {} on duplicates)."""
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _normalised(cell):
    """The source with runs of whitespace made one space: editors strip or add trailing whitespace."""
    return _collapse(_source(cell))


@functools.lru_cache(maxsize=4096)
def _collapse(text):
    return " ".join(text.split())


@functools.lru_cache(maxsize=4096)
def _words(text):
    """The first 2000 words: difflib over words is robust to reformatting, and fast on long cells."""
    return tuple(text.split()[:2000])


@functools.lru_cache(maxsize=65536)
def _ratio(text, other):
    return difflib.SequenceMatcher(None, _words(text), _words(other), autojunk=False).ratio()


def _similarity(cell, other):
    return _ratio(_normalised(cell), _normalised(other))


def _similar_enough(cell, other, bar):
    """``_similarity(cell, other) >= bar``, with cheap upper bounds (lengths, shared words) first."""
    text, other_text = _normalised(cell), _normalised(other)
    short, long = sorted((len(_words(text)), len(_words(other_text))))
    if 2 * short < bar * (short + long):
        return False
    shared = sum((_bag(text) & _bag(other_text)).values())
    return 2 * shared >= bar * (short + long) and _ratio(text, other_text) >= bar


@functools.lru_cache(maxsize=4096)
def _bag(text):
    return collections.Counter(_words(text))


def _defined_names(cell):
    """The function and class names a code cell defines at top level."""
    if cell.get("cell_type") != "code":
        return set()
    source = _source(cell)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):           # IPython magics, unfinished code: read the text
        return set(_DEFINITION.findall(source))
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _cells(count):
    return f"{count} cell" if count == 1 else f"{count} cells"


def _kind(meta):
    if meta.get("solution"):
        return "answer cell"
    return "test cell" if meta.get("grade") else "read-only cell"


def _set_cell_type(cell, cell_type):
    """Convert a cell between code and markdown, as nbgrader's OverwriteCells does."""
    cell.cell_type = cell_type
    if cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


def _new_cell_id(taken):
    while True:
        cell_id = uuid.uuid4().hex[:8]
        if cell_id not in taken:
            return cell_id


def _longest_increasing(values):
    """The longest strictly increasing subsequence of ``values``, as a set (quadratic: a notebook
    has tens of graded cells)."""
    best = []   # best[i]: the longest increasing run ending with values[i]
    for i, value in enumerate(values):
        runs = [best[j] for j in range(i) if values[j] < value]
        best.append(max(runs, key=len, default=[]) + [value])
    return set(max(best, key=len, default=[]))
