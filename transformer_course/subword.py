"""A joint subword vocabulary for German and English (SentencePiece BPE), for the recipe that trains the best
model of the course (`transformer_course/recipes/`).

Word vocabularies built with spaCy (notebook 07) map every rare word to <unk>. Byte-pair encoding instead
splits words into pieces learnt from the training text ("Skateboarder" -> "▁Skate", "board", "er"): a few
thousand pieces spell every word, so nothing is unknown. One vocabulary for both languages lets the source
embedding, the target embedding and the output layer share one matrix, as in the paper (section 3.4): names
and numbers are copied from German to English through the same vectors. The text stays cased and
untokenised, and decoding the pieces gives back ordinary text, ready for sacreBLEU.
"""
import hashlib
import io
from collections import Counter
from pathlib import Path

from .extras import import_extra

__all__ = ["SubwordTokenizer", "learn_bpe", "apply_bpe"]

WORD_START = "\u2581"  # SentencePiece's mark of a word's first piece, "▁"


def _merged(symbols: tuple, pair: tuple) -> tuple:
    """The symbols with every occurrence of the adjacent pair joined into one, from left to right."""
    out, i = [], 0
    while i < len(symbols):
        if symbols[i:i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def learn_bpe(word_counts: dict, num_merges: int) -> list:
    """Byte-pair encoding as Sennrich et al. (2016) learn it, for teaching (notebook 07; the recipe uses SentencePiece).

    Every word starts as "▁" and its characters; each step joins the adjacent pair of symbols that occurs most often,
    counting each word as often as it occurs (ties: the pair that sorts first). Returns the merges, in order.
    """
    words = {tuple(WORD_START + word): count for word, count in word_counts.items()}
    merges = []
    for _ in range(num_merges):
        pairs = Counter()
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:   # every word is one symbol already
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        words = {_merged(symbols, best): count for symbols, count in words.items()}
    return merges


def apply_bpe(word: str, merges: list) -> list:
    """One word as pieces: its characters after "▁", joined by the merges in the order they were learnt."""
    symbols = tuple(WORD_START + word)
    for pair in merges:
        symbols = _merged(symbols, pair)
    return list(symbols)


def _sentencepiece():
    return import_extra("sentencepiece", "the subword vocabulary")


class SubwordTokenizer:
    """Text <-> subword pieces with a trained SentencePiece model, kept as bytes (so it travels in checkpoints).

    Its methods are `to_pieces` and `to_text`, not encode/decode: those are the names of the model's
    (`Transformer.encode`, `.decode`) and of the Vocab's (tokens <-> ids), which the exercises fix."""

    def __init__(self, model_proto: bytes):
        self.model_proto = bytes(model_proto)
        self._processor = _sentencepiece().SentencePieceProcessor(model_proto=self.model_proto)

    @classmethod
    def train(cls, sentences, vocab_size=8000, model_type="bpe", cache_dir=None):
        """Learn `vocab_size` pieces from `sentences` (raw strings, both languages together). With `cache_dir`,
        the model is stored there under a hash of the text and settings, and reused."""
        sentences = list(sentences)
        if vocab_size < 100:
            raise ValueError(f"vocab_size must be at least 100, got {vocab_size}")
        cache_file = None
        if cache_dir is not None:
            digest = hashlib.sha256(f"{vocab_size} {model_type}\n".encode())
            for sentence in sentences:
                digest.update(sentence.encode("utf-8") + b"\n")
            cache_file = Path(cache_dir).expanduser() / f"sentencepiece-{digest.hexdigest()[:16]}.model"
            if cache_file.exists():
                return cls(cache_file.read_bytes())
        model = io.BytesIO()
        # Only <unk> is SentencePiece's own special; <pad>, <bos> and <eos> are added by the course's Vocab.
        _sentencepiece().SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size, model_type=model_type,
            character_coverage=1.0, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, num_threads=1, minloglevel=2)
        tokenizer = cls(model.getvalue())
        if cache_file is not None:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            part = cache_file.with_suffix(".part")
            part.write_bytes(tokenizer.model_proto)
            part.replace(cache_file)
        return tokenizer

    @property
    def pieces(self):
        """Every piece the model knows, except its <unk>: the tokens of the course's Vocab."""
        return [self._processor.id_to_piece(i) for i in range(self._processor.get_piece_size())
                if not self._processor.is_unknown(i)]

    def to_pieces(self, sentences):
        """Raw strings -> lists of pieces."""
        return self._processor.encode(list(sentences), out_type=str)

    def to_text(self, pieces):
        """A list of pieces -> text (the inverse of `to_pieces`)."""
        return self._processor.decode_pieces(list(pieces))

    def __len__(self):
        return self._processor.get_piece_size()

    def __repr__(self):
        return f"SubwordTokenizer({len(self)} pieces)"
