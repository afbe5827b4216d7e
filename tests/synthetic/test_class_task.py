"""The demo's class task: deterministic, held-out words disjoint, labels = classes, corpus reveals them."""
from __future__ import annotations

import gzip
import random
import re
from collections import Counter

import pytest
from tokenizers import Tokenizer

from synthetic import prose

from synthetic import class_task as st
from pipelines.config import TokenizerConfig
from pipelines.tokenizer import train_tokenizer

CLASS_WORDS = set(st.POSITIVE) | set(st.NEGATIVE)
_COMPANION_CLASS = {w: label for label, group in enumerate(st._COMPANION_NOUNS) for w in group}
_COMPANION_CLASS.update({w: label for label, group in enumerate(st._COMPANION_VERBS) for w in group})


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _rows(path):
    lines = path.read_text().splitlines()
    assert lines[0] == "sentence\tlabel"
    return [(s, int(y)) for s, y in (line.split("\t") for line in lines[1:])]


@pytest.fixture(scope="module")
def corpus_docs():
    return st.classed_documents(300, seed=7, fraction=0.3)


def test_class_vocabulary_is_new_to_the_grammar():
    # The classes would leak (or be diluted) if a class word or companion were also a grammar word.
    grammar = set(prose._NOUNS + prose._VERBS + prose._ADJS + prose._ADVS + prose._PREPS)
    assert not set(st.POSITIVE) & set(st.NEGATIVE)
    assert not (CLASS_WORDS | st.COMPANIONS) & {w.lower() for w in grammar}
    assert len(set(st.POSITIVE)) == len(st.POSITIVE) == len(set(st.NEGATIVE)) == len(st.NEGATIVE)


def test_task_is_deterministic_for_a_seed(tmp_path):
    a = st.write_class_task(tmp_path / "a", n_train=80, n_dev=40, seed=3)
    b = st.write_class_task(tmp_path / "b", n_train=80, n_dev=40, seed=3)
    c = st.write_class_task(tmp_path / "c", n_train=80, n_dev=40, seed=4)
    for name in ("train.tsv", "dev.tsv"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
        assert (a / name).read_bytes() != (c / name).read_bytes()
    assert st.split_words(3) == st.split_words(3) != st.split_words(4)


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_split_is_disjoint_and_covers_both_classes(seed):
    train, dev = st.split_words(seed)
    assert not set(train) & set(dev)
    assert set(train) | set(dev) == CLASS_WORDS
    for words in st.CLASSES:  # half of every class on each side
        assert len(set(train) & set(words)) == len(words) // 2 == len(set(dev) & set(words))


def test_labels_follow_the_one_class_word(tmp_path):
    task = st.write_class_task(tmp_path, n_train=400, n_dev=300, seed=1)
    train_words, dev_words = st.split_words(1)
    for name, allowed in (("train.tsv", set(train_words)), ("dev.tsv", set(dev_words))):
        rows = _rows(task / name)
        seen = Counter()
        for sentence, label in rows:
            ws = _words(sentence)
            present = [w for w in ws if w in CLASS_WORDS]
            assert len(present) == 1, sentence           # exactly one clue ...
            assert present[0] in allowed, (name, sentence)  # ... from this split's half
            assert label == st.CLASS_OF[present[0]]
            assert not set(ws) & st.COMPANIONS, sentence   # companions live only in the corpus
            seen[label] += 1
        # both labels, roughly balanced (fair coin per row: 5 sigma bounds)
        n = len(rows)
        assert abs(seen[1] - n / 2) < 5 * (n ** 0.5) / 2
        assert {w for s, _ in rows for w in _words(s)} & CLASS_WORDS == allowed  # every word used


def test_corpus_shows_every_class_word_in_class_consistent_contexts(corpus_docs):
    count = Counter()
    for doc in corpus_docs:
        for sent in re.split(r"(?<=[.!?])\s+", doc.replace("\n", " ")):
            ws = _words(sent)
            classes = {st.CLASS_OF[w] for w in ws if w in CLASS_WORDS}
            classes |= {_COMPANION_CLASS[w] for w in ws if w in _COMPANION_CLASS}
            assert len(classes) <= 1, sent  # never two classes in one sentence
            if classes:  # a class sentence: two class words of that class and a companion
                assert sum(w in CLASS_WORDS for w in ws) == 2, sent
                assert any(w in _COMPANION_CLASS for w in ws), sent
            count.update(w for w in ws if w in CLASS_WORDS)
    _, held_out = st.split_words(1)
    assert min(count[w] for w in CLASS_WORDS) >= 20  # held-out words included: all are seen
    assert set(held_out) <= set(count)
    share = sum(count.values()) / 2 / sum(len(re.split(r"(?<=[.!?])\s+", d.replace("\n", " "))) for d in corpus_docs)
    assert 0.25 < share < 0.35  # the requested fraction of class sentences


def test_class_words_are_whole_tokens_of_a_small_vocabulary(corpus_docs, tmp_path):
    # Distinct whole tokens: sub-words shared across classes would leak class hints into spelling.
    train_tokenizer(corpus_docs, TokenizerConfig(vocab_size=4000), str(tmp_path))
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for w in sorted(CLASS_WORDS):
        assert tok.encode(w, add_special_tokens=False).tokens == [w]


def test_corpus_hooks_change_nothing_by_default(tmp_path):
    # The other pipeline tests rely on write_corpus's generated text; docs= only replaces it.
    a = prose.write_corpus(tmp_path / "a", num_docs=40, seed=2, bad_files=False)
    b = prose.write_corpus(tmp_path / "b", num_docs=999, seed=2, bad_files=False,
                               docs=prose.documents(40, seed=2))
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for f in names:  # gzip stamps the write time into its header: compare the text
        read = gzip.open if f.endswith(".gz") else open
        with read(a / f, "rb") as fa, read(b / f, "rb") as fb:
            assert fa.read() == fb.read()
    rng1, rng2 = random.Random(9), random.Random(9)
    assert prose.document(rng1) == prose.document(rng2, sentence_fn=prose.sentence)


def test_bad_fraction_is_an_error():
    with pytest.raises(ValueError, match="fraction"):
        st.classed_sentence_fn(1.5)
