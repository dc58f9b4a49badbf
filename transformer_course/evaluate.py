"""`python -m transformer_course.evaluate CHECKPOINT`: translate a Multi30k split and print its BLEU.

    python -m transformer_course.evaluate runs/full/best.pt --split test            # beam 4, alpha 0.6
    python -m transformer_course.evaluate runs/full/best.pt --beam 1 --output hyp.txt   # greedy, save output

Two figures are printed:

* **sacreBLEU** on the detokenised, cased translations against the raw reference sentences, with its
  signature: the number to compare with papers (Multi30k results are usually reported this way).
* **lowercased tokenised BLEU**: corpus BLEU on lowercased spaCy tokens, the figure many older
  tutorials print. It depends on the tokenizer, so it is only comparable with numbers computed the same way.

The checkpoint is one written by `python -m transformer_course.train` (or `save_checkpoint` in notebook
07): the model and both vocabularies travel in it.
"""
import argparse
import json
import time
from typing import NamedTuple

import torch

from . import data
from .bleu import BleuReport, bleu_report, capitalize_first, detokenize
from .decoding import translate


class Evaluation(NamedTuple):
    report: BleuReport        # the BLEU figures
    hypotheses: list          # the model's output, token lists
    texts: list               # the same as text, as sacreBLEU scored it
    references: list          # the reference sentences
    seconds: float            # time taken to translate


def evaluate(model, src_vocab, tgt_vocab, split="test", beam_size=4, alpha=0.6, max_extra=50, batch_size=64,
             limit=None, lowercase=False, subword=None, device=None, progress=False, **fetch_options):
    """Translate `split` of Multi30k with the model and score it: an Evaluation. `lowercase`: the model was
    trained on lowercased text (its input is lowercased, and its detokenised output gets a capital first
    letter before cased sacreBLEU). `subword`: the SubwordTokenizer of a model trained on subwords (the
    source is cut into its pieces and the output pieces are joined back into text)."""
    german, english = data.load_split(split, **fetch_options)
    if limit is not None:
        german, english = german[:limit], english[:limit]
    if subword is not None:
        sources = subword.encode([s.lower() for s in german] if lowercase else german)
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
    detokenizer = subword.decode if subword is not None else detokenize
    report = bleu_report(hypotheses, references, data.tokenize(references, "en"), capitalize=lowercase,
                         detokenizer=subword.decode if subword is not None else None)
    texts = [detokenizer(h) for h in hypotheses]
    texts = [capitalize_first(t) for t in texts] if lowercase else texts
    return Evaluation(report, hypotheses, texts, references, seconds)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.evaluate",
        description="Translate a Multi30k split with a checkpoint and print sacreBLEU (with its signature) "
                    "and lowercased tokenised BLEU.")
    parser.add_argument("checkpoint", help="a checkpoint written by python -m transformer_course.train")
    parser.add_argument("--split", default="test", choices=["test", "val", "train"],
                        help="which Multi30k split to translate (default: test = test_2016_flickr)")
    parser.add_argument("--beam", type=int, default=4, help="beam size; 1 = greedy decoding (default: 4, the paper's)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty alpha (default: 0.6, the paper's)")
    parser.add_argument("--max-extra", type=int, default=50,
                        help="a translation may have up to source length + this many tokens (default: 50)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences decoded together (default: 64)")
    parser.add_argument("--limit", type=int, help="translate only the first N sentences (a quick look)")
    parser.add_argument("--mirror", help="folder holding the Multi30k .gz files (default: $MULTI30K_MIRROR, else "
                                         "download into the cache)")
    parser.add_argument("--cache-dir", help="download cache (default: $MULTI30K_CACHE or ~/.cache/...)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    parser.add_argument("--output", help="write the detokenised translations to this file, one per line")
    parser.add_argument("--json", dest="json_path", help="write the scores and settings to this JSON file")
    parser.add_argument("--show", type=int, default=3, help="print this many sample translations (default: 3)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.beam < 1:
        raise SystemExit(f"--beam must be at least 1, got {args.beam}")
    from .training import load_checkpoint   # the trainer's module; imported here so --help works without it

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    checkpoint = load_checkpoint(args.checkpoint, map_location=device)
    model = checkpoint["model"].to(device).eval()
    if hasattr(model, "set_need_weights"):
        model.set_need_weights(False)    # the fused attention kernel: faster, no weights kept
    config = checkpoint.get("config") or {}
    lowercase = bool((config.get("data") or {}).get("lowercase", config.get("lowercase", False)))
    fetch_options = {key: value for key, value in (("mirror", args.mirror), ("cache_dir", args.cache_dir))
                     if value is not None}
    result = evaluate(
        model, checkpoint["src_vocab"], checkpoint["tgt_vocab"], split=args.split, beam_size=args.beam,
        alpha=args.alpha, max_extra=args.max_extra, batch_size=args.batch_size, limit=args.limit,
        lowercase=lowercase, subword=checkpoint.get("subword"), device=device, progress=not args.no_progress,
        **fetch_options)
    report, texts, references, seconds = result.report, result.texts, result.references, result.seconds

    decoding = "greedy" if args.beam == 1 else f"beam {args.beam}, alpha {args.alpha:g}"
    print(f"{args.checkpoint}: {report.n_sentences} sentences of Multi30k {args.split} ({decoding}) "
          f"in {seconds:.1f} s on {device}")
    for text, reference in list(zip(texts, references))[:args.show]:
        print(f"  reference:   {reference}\n  translation: {text}")
    print(f"sacreBLEU                  {report.sacrebleu:6.2f}   {report.signature}")
    if lowercase:
        print(f"  (the model was trained on lowercased text: its output gets a capital first letter; "
              f"case-insensitive sacreBLEU {report.sacrebleu_lc:.2f}, {report.signature_lc})")
    print(f"lowercased tokenised BLEU  {report.tokenized_lower:6.2f}   (corpus BLEU on lowercased spaCy tokens, "
          "the figure of older tutorials)")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.writelines(text + "\n" for text in texts)
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump({"checkpoint": str(args.checkpoint), "split": args.split, "sentences": report.n_sentences,
                       "beam": args.beam, "alpha": args.alpha, "sacrebleu": report.sacrebleu,
                       "signature": report.signature, "sacrebleu_lc": report.sacrebleu_lc,
                       "signature_lc": report.signature_lc, "tokenized_lower_bleu": report.tokenized_lower,
                       "lowercased_model": lowercase,
                       "seconds": seconds}, out, indent=2)
    return report


if __name__ == "__main__":
    main()
