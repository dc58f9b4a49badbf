"""`python -m transformer_course.evaluate CHECKPOINT`: translate a Multi30k split, or any parallel test set,
and print its BLEU.

    python -m transformer_course.evaluate runs/full/best.pt --split test            # beam 4, alpha 0.6
    python -m transformer_course.evaluate runs/full/best.pt --beam 1 --output hyp.txt   # greedy, save output
    python -m transformer_course.evaluate runs/full/best.pt --src news.de --ref news.en  # another test set

Two figures are printed:

* **sacreBLEU** on the detokenised, cased translations against the raw reference sentences, with its
  signature: the number to compare with papers (Multi30k results are usually reported this way).
* **lowercased tokenised BLEU**: corpus BLEU on lowercased spaCy tokens, the figure many older
  tutorials print. It depends on the tokenizer, so it is only comparable with numbers computed the same way.

The checkpoint is one written by `python -m transformer_course.train` (or `save_checkpoint` in notebook
07): the model and both vocabularies travel in it. `--src FILE --ref FILE` name a test set of your own: German
sources and English references, UTF-8 text (or gzipped, .gz), one sentence a line, the lines matching;
it is translated and scored exactly like the Multi30k splits.
"""
import argparse
import gzip
import json
import sys
import time
import zlib
from pathlib import Path
from typing import NamedTuple

from . import data
from .bleu import BleuReport, bleu_report, capitalize_first, detokenize
from .decoding import PAPER, translate


class Evaluation(NamedTuple):
    report: BleuReport        # the BLEU figures
    hypotheses: list          # the model's output, token lists
    texts: list               # the same as text, as sacreBLEU scored it
    references: list          # the reference sentences
    seconds: float            # time taken to translate


class TestSetError(ValueError):
    """A --src or --ref file that cannot be a test set: missing, unreadable, or not line for line parallel."""


def evaluate(model, src_vocab, tgt_vocab, split="test", beam_size=PAPER.beam_size, alpha=PAPER.alpha,
             max_extra=50, batch_size=64, limit=None, lowercase=False, subword=None, device=None, progress=False,
             sentences=None, **fetch_options):
    """Translate `split` of Multi30k with the model and score it: an Evaluation. `lowercase`: the model was
    trained on lowercased text (its input is lowercased, and its detokenised output gets a capital first
    letter before cased sacreBLEU). `subword`: the SubwordTokenizer of a model trained on subwords (the
    source is cut into its pieces and the output pieces are joined back into text). `sentences`: a test set
    of your own, (sources, references), two lists of sentences, instead of the split."""
    german, english = sentences if sentences is not None else data.load_split(split, **fetch_options)
    if limit is not None:
        german, english = german[:limit], english[:limit]
    if subword is not None:
        sources = subword.to_pieces([s.lower() for s in german] if lowercase else german)
    else:
        sources = data.tokenize(german, "de", lowercase=lowercase)
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        hypotheses = translate(model, sources, src_vocab, tgt_vocab, beam_size=beam_size, alpha=alpha,
                               max_extra=max_extra, batch_size=batch_size, device=device, progress=progress)
    finally:
        model.train(was_training)
    seconds = time.perf_counter() - start
    references = [" ".join(sentence.split()) for sentence in english]     # stray double spaces in the data
    detokenizer = subword.to_text if subword is not None else detokenize
    report = bleu_report(hypotheses, references, data.tokenize(references, "en"), capitalize=lowercase,
                         detokenizer=subword.to_text if subword is not None else None)
    texts = [detokenizer(h) for h in hypotheses]
    texts = [capitalize_first(t) for t in texts] if lowercase else texts
    return Evaluation(report, hypotheses, texts, references, seconds)


def read_test_set(src, ref):
    """(sources, references): the sentences of the parallel files `src` and `ref` (see read_lines)."""
    sources, references = read_lines(src, "--src"), read_lines(ref, "--ref")
    if len(sources) != len(references):
        raise TestSetError(f"--src {src} has {len(sources)} lines but --ref {ref} has {len(references)}: a test set "
                           "is one sentence a line, the reference of each source on the same line")
    if not sources:
        raise TestSetError(f"--src {src} and --ref {ref} are empty: give one sentence a line")
    return sources, references


def read_lines(path, option):
    """The lines of the UTF-8 text file `path` (gzipped if it ends in .gz) without their newline."""
    path = Path(path)
    if not path.is_file():
        problem = "is a folder" if path.is_dir() else "does not exist"
        raise TestSetError(f"{option} {path} {problem}: give a text file, one sentence a line")
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except UnicodeDecodeError as error:
        raise TestSetError(f"{option} {path} is not UTF-8 text (byte {error.start}: {error.reason}): save it as "
                           "UTF-8, one sentence a line") from None
    except (OSError, EOFError, zlib.error) as error:
        raise TestSetError(f"{option} {path} cannot be read ({error}): give a text file, one sentence a line, "
                           "gzipped only if its name ends in .gz") from None
    return data.split_lines(text)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.evaluate",
        description="Translate a Multi30k split (or a test set of your own: --src, --ref) with a checkpoint and "
                    "print sacreBLEU (with its signature) and lowercased tokenised BLEU.")
    parser.add_argument("checkpoint", help="a checkpoint written by python -m transformer_course.train")
    parser.add_argument("--split", choices=["test", "val", "train", "test_2017_flickr"],
                        help="which Multi30k split to translate (default: test = test_2016_flickr; "
                             "test_2017_flickr is held out)")
    parser.add_argument("--src", help="a test set of your own: German sentences, one a line (UTF-8 text, or .gz)")
    parser.add_argument("--ref", help="the English references of --src, line for line")
    parser.add_argument("--beam", type=int, default=PAPER.beam_size,
                        help=f"beam size; 1 = greedy decoding (default: {PAPER.beam_size}, the paper's)")
    parser.add_argument("--alpha", type=float, default=PAPER.alpha,
                        help=f"length penalty alpha (default: {PAPER.alpha}, the paper's)")
    parser.add_argument("--max-extra", type=int, default=50,
                        help="a translation may have up to source length + this many tokens (default: 50)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences decoded together (default: 64)")
    parser.add_argument("--limit", type=int, help="translate only the first N sentences (a quick look)")
    parser.add_argument("--mirror", help="folder holding the Multi30k .gz files (default: $MULTI30K_MIRROR, else "
                                         "download into the cache)")
    parser.add_argument("--cache-dir", help="download cache (default: $MULTI30K_CACHE or ~/.cache/...)")
    parser.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda, cuda:1, mps")
    parser.add_argument("--output", help="write the detokenised translations to this file, one per line")
    parser.add_argument("--json", dest="json_path", help="write the scores and settings to this JSON file")
    parser.add_argument("--show", type=int, default=3, help="print this many sample translations (default: 3)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def check_options(args):
    """The options' combinations: a one-line error (SystemExit) for a bad one."""
    for option, value, least in (("--beam", args.beam, 1), ("--batch-size", args.batch_size, 1),
                                 ("--max-extra", args.max_extra, 0), ("--limit", args.limit, 1)):
        if value is not None and value < least:
            fail(f"{option} must be at least {least}, got {value}")
    if (args.src is None) != (args.ref is None):
        fail("--src and --ref go together: the sources to translate and their references, one sentence a line")
    if args.src is not None and args.split is not None:
        fail("--split and --src/--ref choose the test set: give one or the other")
    for option, path in (("--output", args.output), ("--json", args.json_path)):
        if path is not None and not Path(path).resolve().parent.is_dir():
            fail(f"{option} {path}: the folder {Path(path).resolve().parent} does not exist")


def fail(message):
    """The command's answer to bad input: one line on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_options(args)
    from .run.checkpoints import load_checkpoint    # imported here so that --help works without torch
    from .devices import choose_device

    try:   # everything the options name, read before any work: a bad one is a one-line error
        device = choose_device(args.device)
        checkpoint = load_checkpoint(args.checkpoint, map_location=device)
        sentences = load_test_set(args)
    except (ValueError, data.Multi30kError) as error:   # CheckpointError, TestSetError, a bad device or mirror
        fail(error)
    result = run(args, checkpoint, device, sentences)
    print_results(args, result, device, lowercase_model(checkpoint))
    try:
        write_results(args, result, lowercase_model(checkpoint))
    except OSError as error:
        fail(f"cannot write {error.filename}: {error.strerror}")
    return result.report


def load_test_set(args):
    """(sources, references): --src and --ref, or the Multi30k split."""
    if args.src is not None:
        return read_test_set(args.src, args.ref)
    fetch_options = {key: value for key, value in (("mirror", args.mirror), ("cache_dir", args.cache_dir))
                     if value is not None}
    return data.load_split(args.split or "test", **fetch_options)


def lowercase_model(checkpoint):
    """Whether the checkpoint's model was trained on lowercased text."""
    config = checkpoint.get("config") or {}
    return bool((config.get("data") or {}).get("lowercase", config.get("lowercase", False)))


def run(args, checkpoint, device, sentences):
    """Translate and score `sentences` ((sources, references)) as `args` say: an Evaluation."""
    model = checkpoint["model"].to(device).eval()
    if hasattr(model, "set_need_weights"):
        model.set_need_weights(False)    # the fused attention kernel: faster, no weights kept
    return evaluate(
        model, checkpoint["src_vocab"], checkpoint["tgt_vocab"], beam_size=args.beam, alpha=args.alpha,
        max_extra=args.max_extra, batch_size=args.batch_size, limit=args.limit,
        lowercase=lowercase_model(checkpoint), subword=checkpoint.get("subword"), device=device,
        progress=not args.no_progress, sentences=sentences)


def print_results(args, result, device, lowercase):
    """Print the figures and a few sample translations."""
    report = result.report
    decoding = "greedy" if args.beam == 1 else f"beam {args.beam}, alpha {args.alpha:g}"
    test_set = f"Multi30k {args.split or 'test'}" if args.src is None else f"{args.src} (references: {args.ref})"
    print(f"{args.checkpoint}: {report.n_sentences} sentences of {test_set} ({decoding}) "
          f"in {result.seconds:.1f} s on {device}")
    for text, reference in list(zip(result.texts, result.references))[:args.show]:
        print(f"  reference:   {reference}\n  translation: {text}")
    print(f"sacreBLEU                  {report.sacrebleu:6.2f}   {report.signature}")
    if lowercase:
        print(f"  (the model was trained on lowercased text: its output gets a capital first letter; "
              f"case-insensitive sacreBLEU {report.sacrebleu_lc:.2f}, {report.signature_lc})")
    print(f"lowercased tokenised BLEU  {report.tokenized_lower:6.2f}   (corpus BLEU on lowercased spaCy tokens, "
          "the figure of older tutorials)")


def write_results(args, result, lowercase):
    """--output: the translations; --json: the scores and settings."""
    report = result.report
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.writelines(text + "\n" for text in result.texts)
    if args.json_path:
        test_set = {"split": args.split or "test"} if args.src is None else {"split": None, "src": args.src,
                                                                             "ref": args.ref}
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump({"checkpoint": str(args.checkpoint), **test_set, "sentences": report.n_sentences,
                       "beam": args.beam, "alpha": args.alpha, "sacrebleu": report.sacrebleu,
                       "signature": report.signature, "sacrebleu_lc": report.sacrebleu_lc,
                       "signature_lc": report.signature_lc, "tokenized_lower_bleu": report.tokenized_lower,
                       "lowercased_model": lowercase, "seconds": result.seconds}, out, indent=2)


if __name__ == "__main__":
    main()
