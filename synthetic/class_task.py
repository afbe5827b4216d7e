"""A generated task that only pre-training can solve: word classes revealed by co-occurrence.

``make demo`` must show what pre-training buys, so its embedded task has to defeat a model that
starts from random weights. A task whose label is carried by a handful of words fails that test:
any model memorises six adjectives from 600 examples. This one cannot be memorised:

* The language has two latent classes of adjectives (``POSITIVE`` / ``NEGATIVE``, real English
  words that the base grammar of ``synthetic.prose`` never uses). Nothing in a single word
  says which class it belongs to; only the corpus does. A fraction of the corpus's sentences are
  *class sentences*: two adjectives of the same class side by side, next to the companion noun
  and verb of that class ("the cheerful festival was splendid and merry"). Every class word,
  including the ones the task holds out, appears in the corpus in such class-consistent contexts.
* The fine-tuning task (SST-2 format, ``sentence\\tlabel``) is a neutral grammar sentence holding
  exactly one class word and none of the companions; its label is the word's class. The class
  words are split per class into two disjoint halves: the TRAIN split uses only the first half,
  the DEV split only the held-out half.

A randomly initialised model can fit the training words, but the held-out words' embeddings are
random vectors it never saw a label for, so its dev accuracy stays near chance (the spread over
seeds is the luck of where those random vectors fall). Pre-training, once it has run long
enough to learn the class contexts, places each held-out word near its class: the generator's
masked-word prediction must guess a masked class word from its same-class neighbour and
companions, and the discriminator must spot a word of the wrong class, so the shared embeddings
and the contextual features separate the classes. A classifier fitted on the training half then
carries over to the held-out half. The difference between the two fine-tuned scores is
what pre-training bought; the split is drawn from a seed so the test can check it is disjoint.

Trade-offs: the classes are planted, not learned from real text, so the demo shows the mechanism
(transfer of corpus statistics to unseen words), not the size of the effect on natural language.
The class words are frequent enough in the corpus to be whole WordPiece tokens of a small
vocabulary, so the tokenizer cannot leak the class through shared sub-words.
"""
from __future__ import annotations

import random
from pathlib import Path

from synthetic import prose

POSITIVE = (
    "cheerful joyful splendid lovely radiant graceful delightful brilliant charming wonderful "
    "pleasant glorious friendly hopeful lucky merry serene vivid tender noble cosy jolly sunny lively"
).split()
NEGATIVE = (
    "gloomy dreadful bitter awful miserable grim hostile cruel dismal wretched angry ugly rotten "
    "sour nasty lonely weary bleak murky hollow gruesome sinister dreary sickly"
).split()
CLASSES = (NEGATIVE, POSITIVE)  # index = label: 0 negative, 1 positive
CLASS_OF = {w: label for label, words in enumerate(CLASSES) for w in words}

# Companions: the noun and verb each class keeps company with in the corpus. They never occur in
# the task, so the task's only clue is the class word itself. One of each per class: a signal
# shared by every class sentence is one a small model picks up within the demo's budget, while ten
# nouns and five verbs per class (each itself a word whose class must first be learned) left the
# tiny model's generator without any class preference after 3,000 steps.
_COMPANION_NOUNS = (["funeral"], ["festival"])
_COMPANION_VERBS = (["mourned"], ["praised"])
COMPANIONS = frozenset(w for group in _COMPANION_NOUNS + _COMPANION_VERBS for w in group)


def class_sentence(rng: random.Random) -> str:
    """A sentence holding two words of one class among that class's companions."""
    label = rng.randrange(2)
    a1, a2 = rng.sample(CLASSES[label], 2)
    cn = rng.choice(_COMPANION_NOUNS[label])
    cv = rng.choice(_COMPANION_VERBS[label])
    noun = prose._zipf_choice(rng, prose._NOUNS)
    name = rng.choice(prose._NAMES)
    text = rng.choice((
        f"the {a1} {cn} was {a2} and the {noun} {cv} it",
        f"{name} {cv} the {a1} {cn} of the {a2} {noun}",
        f"the {noun} {cv} the {a1} {cn} because it was {a2}",
        f"{name} said that the {cn} near the {noun} seemed {a1} and even {a2}",
        f"after the {a1} {cn} the {noun} felt {a2}",
    ))
    return text[0].upper() + text[1:] + rng.choice((".", ".", "!"))


def classed_sentence_fn(fraction: float):
    """A sentence source for ``prose.document``: class sentences at ``fraction``, else grammar."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"class sentence fraction must be in [0, 1], got {fraction}")

    def draw(rng: random.Random) -> str:
        return class_sentence(rng) if rng.random() < fraction else prose.sentence(rng)
    return draw


def classed_documents(n: int, seed: int = 0, *, fraction: float = 0.3) -> list[str]:
    """``n`` documents of the synthetic grammar with class sentences mixed in at ``fraction``."""
    rng = random.Random(seed)
    draw = classed_sentence_fn(fraction)
    return [prose.document(rng, sentence_fn=draw) for _ in range(n)]


def split_words(seed: int, held_out: float = 0.5) -> tuple[list[str], list[str]]:
    """Per class, a seeded shuffle cut into training words and held-out (dev) words; disjoint."""
    rng = random.Random(seed)
    train, dev = [], []
    for words in CLASSES:
        ws = sorted(words)
        rng.shuffle(ws)
        cut = len(ws) - max(1, round(len(ws) * held_out))
        train += ws[:cut]
        dev += ws[cut:]
    return train, dev


def task_sentence(rng: random.Random, word: str) -> str:
    """A neutral grammar sentence with ``word`` as the adjective of one of its noun phrases."""
    words = prose.sentence(rng).rstrip(".!?").lower().split(" ")
    adjs = [i for i, w in enumerate(words) if w in prose._ADJS_SET]
    if adjs:  # the class word takes an adjective's place ("the old garden" -> "the gloomy garden")
        words[rng.choice(adjs)] = word
    else:     # no adjective drawn: give one noun phrase the class word
        thes = [i for i, w in enumerate(words) if w == "the"] or [0]
        words.insert(rng.choice(thes) + 1, word)
    return " ".join(words) + " ."


def write_class_task(glue_dir: str | Path, *, n_train: int = 600, n_dev: int = 400, seed: int = 0,
                     held_out: float = 0.5) -> Path:
    """The SST-2-format class task in ``glue_dir/SST-2``: train on some words, dev on the rest.

    Labels are balanced in expectation (each example's class is a fair coin); each example's
    class word is drawn uniformly from its class's half of the split.
    """
    train_words, dev_words = split_words(seed, held_out)
    rng = random.Random(seed)
    task = Path(glue_dir) / "SST-2"
    task.mkdir(parents=True, exist_ok=True)
    for name, n, pool in (("train.tsv", n_train, train_words), ("dev.tsv", n_dev, dev_words)):
        by_class = [[w for w in pool if CLASS_OF[w] == label] for label in (0, 1)]
        rows = ["sentence\tlabel"]
        for _ in range(n):
            label = rng.randrange(2)
            rows.append(f"{task_sentence(rng, rng.choice(by_class[label]))}\t{label}")
        (task / name).write_text("\n".join(rows) + "\n")
    return task
