"""Where the ``lm_quality`` block's thresholds sit: its measures on the project's own data.

The shipped model (``pipelines/filters/reference/``) scores, per document, the context gain and the
share of unknown tokens (and the perplexity, for comparison: CCNet's signal) of

* clean text: prose of the books the reference was not cut from (``../shared/data/corpus``,
  ``--clean`` documents), the demo corpus (``synthetic.class_task``, as ``make demo`` writes it)
  and the generated prose of the tests;
* junk made from that prose: word salad drawn by word frequency (and the same with 45 % of its
  words made unknown), salad drawn uniformly from the model's vocabulary with 0 / 15 / 30 % stop
  words, sentences with their words shuffled, and made-up words.

Printed per set: min, 1st percentile, median and max of each measure, and the share each default
rule drops. The thresholds (``LmQualityConfig``) must lie below every clean set and above the
junk, with a margin; they are not tuned per junk kind.

    python benchmarks/corpus/lm_quality_gain.py [--clean 1500] [--seed 7]
"""
from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import numpy as np

from pipelines.config import LmQualityConfig
from pipelines.filters import lm_quality

BOOKS = Path(__file__).resolve().parents[3] / "shared" / "data" / "corpus" / "gutenberg"
STOP = "the of and to a in that it was he i his is with as for had you be at not on her but by".split()


def uniform_salad(rng: random.Random, vocab: list[str], stop_share: float) -> str:
    sentences = []
    for _ in range(15):
        words = [rng.choice(STOP) if rng.random() < stop_share else rng.choice(vocab)
                 for _ in range(rng.randint(6, 18))]
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def made_up(rng: random.Random) -> str:
    letters = "abcdefghijklmnoprstuvwy"
    return " ".join("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(200)) + "."


def half_made_up(rng: random.Random, text: str) -> str:
    return re.sub(r"[A-Za-z]+", lambda m: m.group() + "qx" if rng.random() < 0.45 else m.group(), text)


def sets(n_clean: int, seed: int) -> dict[str, list[str]]:
    from cli.demo import CLASS_FRACTION
    from synthetic import class_task, prose, web_junk

    rng = random.Random(seed)
    clean = web_junk.clean_documents(n_clean, seed, BOOKS, lm_quality.REFERENCE_SOURCES)
    if not BOOKS.is_dir():
        print(f"no books at {BOOKS}: the clean prose is the generated one")
    vocab = sorted(w for w in lm_quality.model(None, 2).vocab if w.isalpha())
    half = len(clean) // 2
    return {
        "book prose": clean,
        "demo corpus": class_task.classed_documents(3000, seed=0, fraction=CLASS_FRACTION),
        "generated prose": prose.documents(300, seed=4),
        "salad (by frequency)": [web_junk._salad(rng, d) for d in clean[:half]],
        "salad, 45% made-up words": [half_made_up(rng, web_junk._salad(rng, d)) for d in clean[:200]],
        "salad (uniform)": [uniform_salad(rng, vocab, 0.0) for _ in range(100)],
        "salad (uniform, 15% stop)": [uniform_salad(rng, vocab, 0.15) for _ in range(100)],
        "salad (uniform, 30% stop)": [uniform_salad(rng, vocab, 0.30) for _ in range(100)],
        "shuffled sentences": [web_junk._shuffled(rng, d) for d in clean[half:]],
        "made-up words": [made_up(rng) for _ in range(50)],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clean", type=int, default=1500, help="documents of book prose")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    cfg = LmQualityConfig()
    model = lm_quality.model(cfg.reference, cfg.min_count)
    print(f"thresholds: context_gain >= {cfg.min_context_gain}, unknown_frac <= {cfg.max_unknown_frac}")
    print(f"{'set':27s} {'docs':>5s} | context gain: min / q01 / median / max | unknown: median / max | "
          f"perplexity median | dropped: gain, unknown")
    for name, docs in sets(args.clean, args.seed).items():
        s = np.array([model.score(d, cfg.max_tokens)[:3] for d in docs])
        ppl, gain, unk = s[:, 0], s[:, 1], s[:, 2]
        print(f"{name:27s} {len(docs):5d} | {gain.min():+.3f} / {np.quantile(gain, 0.01):+.3f} / "
              f"{np.median(gain):+.3f} / {gain.max():+.3f} | {np.median(unk):.3f} / {unk.max():.3f} | "
              f"{np.median(ppl):8.0f} | {(gain < cfg.min_context_gain).mean():.3f}, "
              f"{(unk > cfg.max_unknown_frac).mean():.3f}", flush=True)


if __name__ == "__main__":
    main()
