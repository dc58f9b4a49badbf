"""autograder.repair: submissions damaged the ways Colab and editors damage them are matched back to the
release, and another assignment's notebook is refused.

Every test starts from a real release in notebooks/, answered by a "student" (answer cells filled in),
damages a copy, repairs it, and checks that each graded cell of the release is there exactly once, in the
release's order, with the release's nbgrader metadata, the release's source for cells the student cannot
change, and the student's answer for answer cells; and that the result is a valid notebook.
"""
import copy
import uuid
import warnings
from pathlib import Path

import nbformat
import pytest
from nbgrader.preprocessors import CheckCellMetadata, DeduplicateIds
from support.notebooks import colab

from autograder.repair import RepairError, repair_file, repair_notebook

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

ANSWERS = {
    "02_attention": {
        "scaled_dot_product_attention": (
            "def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):\n"
            "    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))\n"
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    used = dropout(weights) if dropout is not None else weights\n"
            "    return used @ value, weights"),
        "written_variance_sigma": (
            "Each product $q_i k_i$ has variance $\\sigma^4$, so the score has variance $d_k \\sigma^4$: "
            "divide by $\\sigma^2 \\sqrt{d_k}$ instead."),
    },
    "07_training": {
        "build_vocab": (
            "def build_vocab(sentences, min_freq=2, specials=(\"<pad>\", \"<unk>\", \"<bos>\", \"<eos>\")):\n"
            "    counts = Counter(token for sentence in sentences for token in sentence)\n"
            "    kept = sorted((t for t, n in counts.items() if n >= min_freq and t not in specials),\n"
            "                  key=lambda t: (-counts[t], t))\n"
            "    return Vocab(list(specials) + kept)"),
        "label_smoothing_loss": (
            "def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):\n"
            "    log_probs = logits.log_softmax(-1)\n"
            "    keep = target != ignore_index\n"
            "    nll = -log_probs[keep].gather(-1, target[keep].unsqueeze(-1)).squeeze(-1)\n"
            "    return ((1 - smoothing) * nll - smoothing * log_probs[keep].mean(-1)).mean()"),
        "noam_lr": (
            "def noam_lr(step, d_model, warmup_steps, factor=1.0):\n"
            "    step = max(step, 1)\n"
            "    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)"),
        # train_step left as the stub: students do not always finish
        "written_label_smoothing": "It keeps the model from becoming over-confident, which helps BLEU.",
    },
}


def load(name):
    return nbformat.read(NOTEBOOKS / name / f"{name}.ipynb", as_version=4)


@pytest.fixture(scope="module")
def releases():
    return {name: load(name) for name in ("02_attention", "05_layer_norm_feed_forward", "06_transformer",
                                          "07_training")}


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def find(nb, gid):
    """The index of the cell with this grade_id."""
    return next(i for i, cell in enumerate(nb.cells) if grade_id(cell) == gid)


def answered(release, name):
    """The release as a student hands it in from Jupyter: answers written, cells run."""
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        if grade_id(cell) in ANSWERS.get(name, {}):
            cell.source = ANSWERS[name][grade_id(cell)]
        if cell.cell_type == "code":
            cell.execution_count = 1
    return nb




def new_cell(cell_type, source):
    make = nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell
    return make(source)


def check_repaired(repaired, release, answers):
    """The repaired notebook is valid and carries each graded cell of the release exactly once, in order,
    with the release's metadata, and the release's or the student's source."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # nbformat "corrects" bad ids with a warning only
        nbformat.validate(copy.deepcopy(repaired))
    ids = [cell.id for cell in repaired.cells]
    assert len(set(ids)) == len(ids)
    CheckCellMetadata().preprocess(copy.deepcopy(repaired), {})     # nbgrader's own metadata check
    deduplicated, _ = DeduplicateIds().preprocess(copy.deepcopy(repaired), {})
    assert deduplicated == repaired                                 # no grade_id twice

    wanted = [cell for cell in release.cells if grade_id(cell)]
    got = [cell for cell in repaired.cells if grade_id(cell)]
    assert [grade_id(cell) for cell in got] == [grade_id(cell) for cell in wanted]
    for cell, release_cell in zip(got, wanted):
        assert cell.metadata.nbgrader == release_cell.metadata.nbgrader
        assert cell.cell_type == release_cell.cell_type
        gid = grade_id(cell)
        if gid in answers:
            assert cell.source == answers[gid], gid
        else:   # a cell the student cannot change, or an answer left as the stub
            assert " ".join(cell.source.split()) == " ".join(release_cell.source.split()), gid


def repaired_ok(submitted, release, name, expect_actions=True):
    repaired, actions = repair_notebook(submitted, release, name)
    check_repaired(repaired, release, ANSWERS.get(name, {}))
    assert bool(actions) == expect_actions, actions
    return repaired, actions


# --- intact and harmlessly changed notebooks ---------------------------------------------------------

@pytest.mark.parametrize("name", ["02_attention", "07_training"])
def test_an_intact_notebook_needs_no_repair(releases, name):
    submitted = answered(releases[name], name)
    repaired, actions = repaired_ok(submitted, releases[name], name, expect_actions=False)
    assert repaired == submitted


def test_reordered_metadata_keys_and_other_metadata_are_not_repairs(releases):
    submitted = answered(releases["07_training"], "07_training")
    for cell in submitted.cells:
        if "nbgrader" in cell.metadata:
            cell.metadata["nbgrader"] = dict(reversed(list(cell.metadata.nbgrader.items())))
        cell.metadata["colab"] = {"base_uri": "https://localhost:8080/", "id": cell.id}
        cell.metadata["execution"] = {"iopub.status.busy": "2024-05-01T10:00:00Z"}
    submitted.metadata["colab"] = {"provenance": []}
    repaired, _ = repaired_ok(submitted, releases["07_training"], "07_training", expect_actions=False)
    assert all(cell.metadata["colab"]["id"] == cell.id for cell in repaired.cells)   # kept, untouched


def test_the_inputs_are_left_untouched(releases):
    release = releases["02_attention"]
    submitted = colab(answered(release, "02_attention"))
    before = copy.deepcopy((submitted, release))
    repair_notebook(submitted, release, "02_attention.ipynb")
    assert (submitted, release) == before


# --- Colab: metadata and ids ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["02_attention", "06_transformer", "07_training"])
@pytest.mark.parametrize("ids", ["keep", "new"])
def test_dropped_nbgrader_metadata_is_restored(releases, name, ids):
    release = releases[name]
    _, actions = repaired_ok(colab(answered(release, name), ids=ids), release, name)
    restored = [a for a in actions if a.startswith("restored the nbgrader metadata")]
    assert len(restored) == sum(1 for cell in release.cells if grade_id(cell))


def test_a_notebook_saved_without_ids_is_upgraded(releases):
    release = releases["02_attention"]
    submitted = colab(answered(release, "02_attention"), ids="none")
    repaired, actions = repaired_ok(submitted, release, "02_attention")
    assert (repaired.nbformat, repaired.nbformat_minor) == (4, 5)
    assert any("upgraded the notebook from nbformat 4.0 to 4.5" in a for a in actions)


def test_metadata_a_student_edited_is_reset(releases):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    at = find(submitted, "test_scaled_dot_product_attention_mask")
    submitted.cells[at].metadata.nbgrader.update(points=30, locked=False)
    _, actions = repaired_ok(submitted, release, "02_attention")
    assert actions == ["reset the nbgrader metadata of test cell 'test_scaled_dot_product_attention_mask' "
                       f"(cell {at + 1} of the submission): locked, points differed from the release"]


def test_duplicated_and_missing_ids_get_fresh_ones(releases):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    submitted.cells[4].id = submitted.cells[3].id
    del submitted.cells[5]["id"]
    repaired, actions = repaired_ok(submitted, release, "02_attention")
    assert repaired.cells[3].id == release.cells[3].id        # the first keeps its id
    assert actions == ["gave 2 cells fresh ids (missing, duplicated or invalid)"]


# --- moved, duplicated and deleted cells ----------------------------------------------------------

@pytest.mark.parametrize("damage", [lambda nb: nb, colab], ids=["metadata kept", "colab"])
def test_swapped_answer_cells_go_back(releases, damage):
    release = releases["07_training"]
    submitted = answered(release, "07_training")
    a, b = find(submitted, "build_vocab"), find(submitted, "label_smoothing_loss")
    submitted.cells[a], submitted.cells[b] = submitted.cells[b], submitted.cells[a]
    _, actions = repaired_ok(damage(submitted), release, "07_training")
    assert any(a.startswith("moved answer cell") for a in actions)


@pytest.mark.parametrize("damage", [lambda nb: nb, colab], ids=["metadata kept", "colab"])
def test_a_graded_cell_moved_to_the_end_goes_back(releases, damage):
    release = releases["07_training"]
    submitted = answered(release, "07_training")
    submitted.cells.append(submitted.cells.pop(find(submitted, "test_label_smoothing_loss_ignore")))
    repaired, actions = repaired_ok(damage(submitted), release, "07_training")
    assert any(a.startswith("moved test cell 'test_label_smoothing_loss_ignore'") for a in actions)
    assert len(repaired.cells) == len(release.cells)


def test_an_answer_moved_to_the_end_without_metadata_is_found_by_its_names(releases):
    release = releases["07_training"]
    submitted = answered(release, "07_training")
    submitted.cells.append(submitted.cells.pop(find(submitted, "noam_lr")))
    repaired, actions = repaired_ok(colab(submitted), release, "07_training")
    assert any(a.startswith("moved answer cell 'noam_lr'") for a in actions)


@pytest.mark.parametrize("same_id", [False, True], ids=["jupyter copy", "copy keeps the id"])
def test_a_duplicated_answer_cell_is_graded_once(releases, same_id):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    at = find(submitted, "scaled_dot_product_attention")
    duplicate = copy.deepcopy(submitted.cells[at])
    if not same_id:
        duplicate.id = uuid.uuid4().hex[:8]
    submitted.cells.insert(at + 1, duplicate)
    repaired, actions = repaired_ok(submitted, release, "02_attention")
    copies = [c for c in repaired.cells if c.source == ANSWERS["02_attention"]["scaled_dot_product_attention"]]
    assert len(copies) == 2 and sum("nbgrader" in c.metadata for c in copies) == 1
    assert any("a second copy of 'scaled_dot_product_attention'" in a for a in actions)
    # the original is graded (it has the release's id, or comes first); the copy below it is not
    assert "nbgrader" in repaired.cells[at].metadata and "nbgrader" not in repaired.cells[at + 1].metadata
    assert repaired.cells[at].id == release.cells[at].id


def test_of_two_copies_of_a_written_answer_the_one_written_in_is_graded(releases):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    at = find(submitted, "written_variance_sigma")
    stub = copy.deepcopy(release.cells[at])               # the student copied the cell, then wrote in one
    stub.id = "copy-of-the-stub"
    submitted.cells.insert(at, stub)
    repaired, actions = repaired_ok(submitted, release, "02_attention")
    assert "nbgrader" not in repaired.cells[at].metadata and repaired.cells[at].source == "YOUR ANSWER HERE"


def test_a_stale_grade_id_loses_its_metadata(releases):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    scratch = new_cell("code", "print('scratch')")
    scratch.metadata["nbgrader"] = dict(release.cells[find(release, "setup")].metadata.nbgrader,
                                        grade_id="old_exercise")
    submitted.cells.insert(5, scratch)
    repaired, actions = repaired_ok(submitted, release, "02_attention")
    assert "nbgrader" not in repaired.cells[5].metadata and repaired.cells[5].source == "print('scratch')"
    assert actions == ["removed the nbgrader metadata of cell 6 of the submission: grade_id "
                       "'old_exercise' matches no cell of the release"]


@pytest.mark.parametrize("damage", [lambda nb: nb, colab], ids=["metadata kept", "colab"])
def test_a_deleted_test_cell_is_reinserted(releases, damage):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    del submitted.cells[find(submitted, "test_scaled_dot_product_attention_batched")]
    repaired, actions = repaired_ok(damage(submitted), release, "02_attention")
    assert ("re-inserted the missing test cell 'test_scaled_dot_product_attention_batched' from the release"
            in actions)
    assert len(repaired.cells) == len(release.cells)


@pytest.mark.parametrize("damage", [lambda nb: nb, colab], ids=["metadata kept", "colab"])
def test_a_deleted_answer_cell_comes_back_as_the_stub(releases, damage):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    at = find(submitted, "scaled_dot_product_attention")
    del submitted.cells[at]
    repaired, actions = repair_notebook(damage(submitted), release, "02_attention")
    written = ANSWERS["02_attention"]["written_variance_sigma"]
    check_repaired(repaired, release, {"written_variance_sigma": written})     # the answer: the stub
    assert repaired.cells[at].source == release.cells[at].source                  # the stub, in its place
    assert repaired.cells[at - 1].source == release.cells[at - 1].source          # after the exercise
    assert any("'scaled_dot_product_attention' from the release as its empty stub" in a for a in actions)


def test_scratch_cells_stay_where_the_student_put_them(releases):
    release = releases["07_training"]
    submitted = answered(release, "07_training")
    scratch = {   # before the answer, between answer and tests, after a written answer, at the end
        find(submitted, "build_vocab"): new_cell("code", "sentences = [['a', 'b'], ['a']]\nprint(sentences)"),
        find(submitted, "noam_lr") + 1: new_cell("code", "plt.plot([noam_lr(s, 512, 4000) for s in range(1, 99)])"),
        find(submitted, "written_label_smoothing") + 1: new_cell("markdown", "Note to self: re-read section 5."),
        len(submitted.cells): new_cell("code", "print('done')"),
    }
    for at in sorted(scratch, reverse=True):
        submitted.cells.insert(at, scratch[at])
    damaged = colab(submitted)
    repaired, _ = repaired_ok(damaged, release, "07_training")
    assert [c.source for c in repaired.cells] == [c.source for c in damaged.cells]   # nothing moved
    assert all("nbgrader" not in repaired.cells[i].metadata
               for i, c in enumerate(damaged.cells) if any(c.source == s.source for s in scratch.values()))


def test_an_answer_cell_turned_into_another_type_is_turned_back(releases):
    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    written = submitted.cells[find(submitted, "written_variance_sigma")]
    written.cell_type, written.outputs, written.execution_count = "code", [], None
    repaired, actions = repaired_ok(submitted, release, "02_attention")
    assert any("back to a markdown cell" in a for a in actions)


# --- the wrong notebook ---------------------------------------------------------------------------

@pytest.mark.parametrize("damage", [lambda nb: nb, colab], ids=["metadata kept", "colab"])
def test_another_assignments_notebook_is_refused(releases, damage):
    other = answered(releases["05_layer_norm_feed_forward"], "05_layer_norm_feed_forward")
    graded = sum(1 for cell in releases["02_attention"].cells if grade_id(cell))
    with pytest.raises(RepairError, match=rf"does not look like the release of 02_attention\.ipynb: "
                                          rf"only \d+ of {graded} graded cells could be found"):
        repair_notebook(damage(other), releases["02_attention"], "02_attention.ipynb")


@pytest.mark.parametrize("submitted, release", [("06_transformer", "07_training"),
                                                 ("07_training", "06_transformer")])
def test_a_neighbouring_assignment_is_refused_too(releases, submitted, release):
    with pytest.raises(RepairError):
        repair_notebook(colab(releases[submitted]), releases[release], release)


# --- files ------------------------------------------------------------------------------------------

def test_repair_file_writes_the_repaired_notebook(releases, tmp_path):
    release_path = NOTEBOOKS / "02_attention" / "02_attention.ipynb"
    submitted_path, out_path = tmp_path / "02_attention.ipynb", tmp_path / "repaired" / "02_attention.ipynb"
    nbformat.write(colab(answered(releases["02_attention"], "02_attention"), ids="none"), submitted_path)
    actions = repair_file(submitted_path, release_path, out_path)
    check_repaired(nbformat.read(out_path, as_version=4), releases["02_attention"], ANSWERS["02_attention"])
    assert actions

    wrong_path = tmp_path / "05.ipynb"
    nbformat.write(releases["05_layer_norm_feed_forward"], wrong_path)
    # named as the student knows it (the message reaches their feedback page), not by the course's folders
    with pytest.raises(RepairError, match="^the submitted 05.ipynb does not look like the release of 02_attention.ipynb"):
        repair_file(wrong_path, release_path, tmp_path / "never.ipynb")
    assert not (tmp_path / "never.ipynb").exists()


# --- a copy of an earlier release ------------------------------------------------------------------

def released_again(release):
    """The release as `nbgrader generate_assignment --force` writes it after the instructor changed a test, added
    one and removed one (checksums as nbgrader computes them)."""
    from nbgrader.utils import compute_checksum

    again = copy.deepcopy(release)
    changed = again.cells[find(again, "test_scaled_dot_product_attention_mask")]
    changed.source = "assert True, 'a new check'\n" + changed.source
    changed.metadata.nbgrader["checksum"] = compute_checksum(changed)
    added = copy.deepcopy(changed)
    added.id = "added-test"
    added.metadata.nbgrader.update(grade_id="test_added", checksum="")
    added.metadata.nbgrader["checksum"] = compute_checksum(added)
    again.cells.insert(find(again, "test_scaled_dot_product_attention_mask") + 1, added)
    del again.cells[find(again, "test_scaled_dot_product_attention_batched")]
    return again


def test_a_copy_of_an_earlier_release_is_told_apart_from_damage(releases):
    from autograder.repair import RELEASE_CHANGED

    release = releases["02_attention"]
    again = released_again(release)
    repaired, actions = repair_notebook(answered(release, "02_attention"), again, "02_attention")
    assert len(actions) == 3 and all(action.endswith(RELEASE_CHANGED) for action in actions), actions
    assert any("test_scaled_dot_product_attention_mask" in a and "checksum differed" in a for a in actions), actions
    assert any("inserted the test cell 'test_added' of the current release" in a for a in actions), actions
    assert any("'test_scaled_dot_product_attention_batched' matches no cell of the current release" in a
               for a in actions), actions
    wanted = {grade_id(c): c.metadata.nbgrader for c in again.cells if grade_id(c)}
    assert {grade_id(c): c.metadata.nbgrader for c in repaired.cells if grade_id(c)} == wanted
    # the same copy saved by Colab has lost the evidence: its repairs are damage, said as before
    _, damaged = repair_notebook(colab(answered(release, "02_attention")), again, "02_attention")
    assert damaged and not any(RELEASE_CHANGED in action for action in damaged), damaged


def test_points_a_student_edited_are_no_earlier_release(releases):
    from autograder.repair import RELEASE_CHANGED

    release = releases["02_attention"]
    submitted = answered(release, "02_attention")
    submitted.cells[find(submitted, "test_scaled_dot_product_attention_mask")].metadata.nbgrader["points"] = 30
    _, actions = repaired_ok(submitted, release, "02_attention")
    assert len(actions) == 1 and RELEASE_CHANGED not in actions[0] and "points differed" in actions[0], actions
