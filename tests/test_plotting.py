"""The course's figures draw, and the map of the Transformer lights up the part each notebook builds."""
import json
import re

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from support.notebooks import SOLUTIONS  # noqa

from transformer_course.plotting import HIGHLIGHT, architecture_map  # noqa: E402

# The boxes each notebook's part must light up, by their labels, and how many of each.
EXPECTED = {
    "01_positional_encoding": {"input embedding": 1, "output embedding": 1, "+ positional encoding": 2},
    "02_attention": {"multi-head self-attention": 1, "masked multi-head self-attention": 1,
                     "multi-head cross-attention": 1},
    "03_masking": {"multi-head self-attention": 1, "masked multi-head self-attention": 1,
                   "multi-head cross-attention": 1},
    "04_multi_head_attention": {"multi-head self-attention": 1, "masked multi-head self-attention": 1,
                                "multi-head cross-attention": 1},
    "05_layer_norm_feed_forward": {"add & norm": 5, "feed-forward": 2},
    "06_transformer": {"multi-head self-attention": 1, "masked multi-head self-attention": 1,
                       "multi-head cross-attention": 1, "add & norm": 5, "feed-forward": 2, "linear + softmax": 1},
    "07_training": {"linear + softmax": 1, "label-smoothed loss (training)": 1},
    "08_decoding_bleu": {"linear + softmax": 1, "greedy / beam search, BLEU": 1},
    "09_gpt": {"output embedding": 1, "masked multi-head self-attention": 1, "add & norm": 2, "feed-forward": 1,
               "linear + softmax": 1},
}


def part_drawn_in(assignment):
    """The part named in the notebook's architecture_map("...") call, near its top."""
    notebook = json.loads((SOLUTIONS / assignment / f"{assignment}.ipynb").read_text())
    code = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    calls = [m for source in code[:4] for m in re.findall(r'architecture_map\("([^"]+)"\)', source)]
    assert len(calls) == 1, f"{assignment}: expected one architecture_map(...) among its first code cells, got {calls}"
    return calls[0]


def lit_labels(ax):
    counts = {}
    for text in ax.texts:
        patch = text.get_bbox_patch()
        if patch is not None and matplotlib.colors.same_color(patch.get_facecolor(), HIGHLIGHT):
            counts[text.get_text()] = counts.get(text.get_text(), 0) + 1
    return counts


@pytest.mark.parametrize("assignment", sorted(EXPECTED))
def test_every_notebook_opens_with_its_part_of_the_map(assignment):
    ax = architecture_map(part_drawn_in(assignment))
    try:
        assert lit_labels(ax) == EXPECTED[assignment]
        assert assignment[:2] in ax.get_title(), f"the map's title does not name notebook {assignment[:2]}"
    finally:
        plt.close(ax.figure)


def test_the_map_without_a_part_lights_nothing_and_a_wrong_name_is_refused():
    ax = architecture_map()
    assert lit_labels(ax) == {} and len(ax.texts) > 15
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="unknown part"):
        architecture_map("positional encodings")
