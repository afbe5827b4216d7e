"""Near-dedup shingles and decontamination windows in scripts without spaces, on real text.

MinHash: a Chinese document and a copy with 2% of its characters changed are near-duplicates by
the signatures (estimated Jaccard against an exact set computation of character 3-grams, the
shingles of a run of such characters), where whitespace words made them nearly disjoint; English
text hashes to exactly what it did (``space_out`` returns it untouched). Decontamination: a
document containing a Chinese dev sentence of a GLUE-format task is dropped; one sharing only a
few characters is kept.
"""
from __future__ import annotations

import random
import re

from pipelines.config import DedupConfig
from pipelines.decontaminate.check import contamination
from pipelines.decontaminate.ngrams import tokens, window_hashes
from pipelines.decontaminate.protected import build
from pipelines.dedup.minhash import minhash_signatures, word_hashes
from tests.pipelines._languages import documents
from tests.pipelines.decontaminate.test_protected import write_tsv


def mutate(text: str, share: float, seed: int) -> str:
    """``share`` of the non-space characters replaced by another character of the same text."""
    rng = random.Random(seed)
    chars = list(text)
    where = [i for i, c in enumerate(chars) if not c.isspace()]
    pool = [chars[i] for i in where]
    for i in rng.sample(where, max(1, round(share * len(where)))):
        chars[i] = rng.choice(pool)
    return "".join(chars)


def char_grams(text: str, n: int = 5) -> set:
    chars = [c for c in text if c.isalnum()]  # the CJK characters (and Latin letters, near enough)
    return {tuple(chars[i:i + n]) for i in range(len(chars) - n + 1)}


def test_a_chinese_near_copy_is_near_by_its_signature():
    doc = "\n\n".join(documents("zh-cn")[:3])
    copy = mutate(doc, 0.02, seed=1)
    cfg = DedupConfig()
    grams = {t: char_grams(t, cfg.spaceless_ngram) for t in (doc, copy)}
    exact = len(grams[doc] & grams[copy]) / len(grams[doc] | grams[copy])
    assert exact > 0.85  # character 3-grams: 2% of characters touch at most ~6% of them
    sig = minhash_signatures([doc, copy, "\n\n".join(documents("zh-cn")[3:6])], cfg)
    agree = float((sig[0] == sig[1]).mean())
    assert abs(agree - exact) < 0.15 and agree >= cfg.jaccard_threshold  # linked by LSH + verification
    assert float((sig[0] == sig[2]).mean()) < 0.1  # another section: not a duplicate
    def word_grams(text, n=5):  # what whitespace words made of it: clauses as "words"
        w = text.split()
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
    before = len(word_grams(doc) & word_grams(copy)) / len(word_grams(doc) | word_grams(copy))
    assert before < 0.5 < agree


# Computed by the code before the language work (commit 1383218): spaced text must hash as it did.
_TEXTS = ["The quick brown fox, don’t you know -- jumps over “the” lazy dog.", "Naïve café — résumé… Ünïcödé ﬁne",
          "Tab\tand\nnewline; semi: colon! ok?"]
_GOLDEN_WORDS = [17376660465188207016, 4641111807412429344, 15018813559755154877, 12235076842617593407,
                 3523938581437464087, 5189738729256918576]
_GOLDEN_SIGNATURES = ([309323834106431874, 454491362642133619, 239100062724039787], 595928820558336655)
_GOLDEN_WINDOWS = [548190603245017766, 3017263289155515026, 5389556063021031941]


def test_english_hashes_as_before():
    hashes, docs = word_hashes(_TEXTS)
    runs = re.findall(r"[^\s!-/:-@\[-`{-~]+", _TEXTS[0])  # runs between ASCII spaces and punctuation
    assert [int(h) for h in hashes[:6]] == _GOLDEN_WORDS and int((docs == 0).sum()) == len(runs) == 12
    sig = minhash_signatures(_TEXTS, DedupConfig())
    assert ([int(x) for x in sig[:, 0]], int(sig.sum() % (1 << 61))) == _GOLDEN_SIGNATURES
    assert tokens(_TEXTS[1]) == ["naïve", "café", "résumé", "ünïcödé", "fine"]
    assert [int(x) for x in window_hashes(tokens(_TEXTS[0]), 5)[:3]] == _GOLDEN_WINDOWS


def test_a_chinese_dev_sentence_is_decontaminated(tmp_path):
    dev = "然而，要学会如何使用它的全部功能并不容易。"
    write_tsv(tmp_path / "glue" / "CoLA" / "dev.tsv", [["src", "1", "", dev]])
    protected = build([str(tmp_path / "glue")], 13)
    assert len(tokens(dev)) == 19  # one token per character: the window is 13 characters
    article = documents("zh-cn")[0] + "\n" + dev + "\n" + documents("zh-cn")[1]
    found = contamination(article, protected)
    assert found is not None and found[0] == "decontaminate:CoLA"
    near_miss = documents("zh-cn")[0] + "要学会如何使用它"  # 8 characters of it: kept
    assert contamination(near_miss, protected) is None
