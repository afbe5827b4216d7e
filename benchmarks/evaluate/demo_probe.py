"""Has pre-training placed the demo's held-out class words? Two probes of exported checkpoints.

    .venv/bin/python benchmarks/evaluate/demo_probe.py --glue demo_out/glue demo_out/run/hf demo_out/random_init

The demo's task (``synthetic.class_task``) labels a sentence by the class of its one class
word, and its dev split uses only words the training split never shows. Fine-tuning can only
carry a classifier over to those words when pre-training has already encoded their class:

* **Generator probe.** Class sentences of the corpus's own kind, with one class word masked next
  to its same-class neighbour and companions: of the probability the exported generator puts on
  class words, the share on the right class. 0.5 = the class is not used; 1.0 = always right.
* **Linear probe.** The discriminator's features ([CLS] and mean of the last hidden states) of
  the task's sentences, frozen; a logistic regression fitted on the training split and scored on
  the dev split (held-out words). Chance is 50%; a pre-trained model that has placed the words
  scores above the same probe on the randomly initialised model.

Both read only the exported Hugging Face folders (``RUN/hf/{generator,discriminator}``, or
``electra.random_init``'s output), so they check what a user of the checkpoints would get.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import torch

from synthetic import class_task as st


def generator_class_share(folder: str, *, sentences: int = 200, seed: int = 5) -> float:
    """Mean share, over masked class words, of the class-word probability on the right class."""
    from transformers import AutoTokenizer, ElectraForMaskedLM

    model = ElectraForMaskedLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = [[tok.convert_tokens_to_ids(w) for w in words] for words in st.CLASSES]
    rng, shares = random.Random(seed), []
    for _ in range(sentences):
        words = st.class_sentence(rng).lower().rstrip(".!").split()
        i = next(j for j, w in enumerate(words) if w in st.CLASS_OF)
        label = st.CLASS_OF[words[i]]
        words[i] = tok.mask_token
        batch = tok(" ".join(words) + " .", return_tensors="pt")
        at = int((batch["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0])
        with torch.no_grad():
            p = model(**batch).logits[0, at].softmax(-1)
        right, wrong = p[ids[label]].sum().item(), p[ids[1 - label]].sum().item()
        shares.append(right / max(right + wrong, 1e-12))
    return float(np.mean(shares))


def _features(model, tok, sentences: list[str]) -> np.ndarray:
    out = []
    with torch.no_grad():
        for i in range(0, len(sentences), 64):
            batch = tok(sentences[i:i + 64], padding=True, return_tensors="pt")
            h = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            out.append(torch.cat([h[:, 0], (h * mask).sum(1) / mask.sum(1)], -1).numpy())
    return np.concatenate(out)


def _read_tsv(path: Path) -> tuple[list[str], np.ndarray]:
    rows = [line.split("\t") for line in path.read_text().splitlines()[1:] if line]
    return [r[0] for r in rows], np.array([int(r[1]) for r in rows])


def linear_probe(folder: str, glue: str, *, c: float = 1.0) -> tuple[float, float]:
    """(train accuracy, dev accuracy) in percent of a logistic regression on frozen features."""
    from sklearn.linear_model import LogisticRegression
    from transformers import AutoTokenizer, ElectraModel

    model = ElectraModel.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    x_train, y_train = _read_tsv(Path(glue) / "SST-2" / "train.tsv")
    x_dev, y_dev = _read_tsv(Path(glue) / "SST-2" / "dev.tsv")
    a, b = _features(model, tok, x_train), _features(model, tok, x_dev)
    mu, sd = a.mean(0), a.std(0) + 1e-6
    clf = LogisticRegression(C=c, max_iter=2000).fit((a - mu) / sd, y_train)
    return 100 * clf.score((a - mu) / sd, y_train), 100 * clf.score((b - mu) / sd, y_dev)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--glue", required=True, help="the demo's GLUE folder (demo_out/glue)")
    p.add_argument("models", nargs="+", help="folders holding generator/ and discriminator/ exports")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the discriminator export's unused head is expected
    print(f"{'model':<40} {'generator class share':>22} {'probe train %':>14} {'probe dev %':>12}")
    for folder in args.models:
        share = generator_class_share(str(Path(folder) / "generator"))
        train, dev = linear_probe(str(Path(folder) / "discriminator"), args.glue)
        print(f"{folder:<40} {share:22.3f} {train:14.1f} {dev:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
