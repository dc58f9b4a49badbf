"""The teaching BPE learner of notebook 07 against merges worked out by hand and by brute force."""
from collections import Counter

from transformer_course.subword import apply_bpe, learn_bpe

TOY = {"low": 5, "lower": 2, "newest": 6, "widest": 3}     # Sennrich et al. (2016)'s example


def test_the_first_merges_of_the_toy_corpus_are_the_ones_worked_out_by_hand():
    # Pairs at the start: e s 6 + 3 = 9, s t 9, w e 2 + 6 = 8, ▁ l, l o, o w 7: e s wins the tie with s t (it sorts
    # first); then es t 9; then l o, o w and ▁ l tie at 7 and l o sorts first; then lo w 7; then ▁ low 7.
    assert learn_bpe(TOY, 5) == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w"), ("\u2581", "low")]


def test_segmentation_with_those_merges():
    merges = learn_bpe(TOY, 5)
    assert apply_bpe("lowest", merges) == ["\u2581low", "est"]          # never seen, two known pieces
    assert apply_bpe("lower", merges) == ["\u2581low", "e", "r"]
    assert apply_bpe("newer", merges) == ["\u2581", "n", "e", "w", "e", "r"]
    assert apply_bpe("widest", []) == list("\u2581widest")               # no merges: characters


def brute_force_merges(word_counts, num_merges):
    """Every occurrence of the corpus spelled out as a list of pieces; the most frequent adjacent pair, found by
    scanning all of them, is joined wherever it occurs, left to right."""
    corpus = [["\u2581", *word] for word, count in word_counts.items() for _ in range(count)]
    merges = []
    for _ in range(num_merges):
        counts = Counter((a, b) for pieces in corpus for a, b in zip(pieces, pieces[1:]))
        if not counts:
            break
        top = max(counts.values())
        best = sorted(pair for pair, n in counts.items() if n == top)[0]
        merges.append(best)
        for pieces in corpus:
            i = 0
            while i < len(pieces) - 1:
                if (pieces[i], pieces[i + 1]) == best:
                    pieces[i:i + 2] = [pieces[i] + pieces[i + 1]]
                i += 1
    return merges


def test_learn_bpe_agrees_with_brute_force_and_spells_every_word():
    corpus = {"aaab": 4, "abab": 3, "banana": 5, "bandana": 2, "nab": 1, "a": 7}
    merges = learn_bpe(corpus, 40)
    assert merges == brute_force_merges(corpus, 40)
    for word in [*corpus, "anna", "cab"]:
        assert "".join(apply_bpe(word, merges)) == "\u2581" + word
    assert all(len(apply_bpe(word, merges)) == 1 for word in corpus)   # 40 merges: every word is one piece
