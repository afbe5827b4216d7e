"""Checking documents against the protected set (``pipelines.decontaminate.check``) and the
filter stage's map function with it (``filter_batch(..., protected=...)``), without Ray.

Tested against an independent reference (``test_protected.ref_*``: tuples of 13 words of the
texts the generator wrote): on many random documents mixing planted windows of 12, 13 and 25
tokens (case, punctuation, spacing and full-width letters changed), spans across two TSV cells,
train sentences and unrelated text, a document is dropped exactly when the reference finds a
shared 13-tuple, with the reason of the task whose window comes first and a detail naming the
file and the shared words. Also: the GLUE-dev-sentence cases of the issue (25 words planted:
dropped; 8 or 12 shared: kept), cells never joined into one window, the first file owning a
shared n-gram, short documents, a configured ``ngram``, and word pairs whose CRC-32 collide.
"""
from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipelines.config import FilterConfig
from pipelines.decontaminate.check import contamination, resolve
from pipelines.decontaminate.protected import build
from pipelines.filters import filter_batch, normalize_text
from tests.pipelines.decontaminate.test_protected import (MRPC_HEADER, N, eval_tree, ref_owners, ref_tokens,
                                                          vocabulary, write_tsv)

_SEPARATORS = (" ", "  ", "\n", ", ", " -- ", "; ", "\t", " (", ") ", ' "', '" ', "_", "...", " / ", "'", ":\n\n")


def _fullwidth(word: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in word)


def render(words: list[str], rng: random.Random) -> str:
    """The words with their case, letters (full-width forms), punctuation and spacing changed:
    all of which the normalisation must see through."""
    out = []
    for w in words:
        r = rng.random()
        w = w.upper() if r < 0.2 else w.title() if r < 0.4 else _fullwidth(w) if r < 0.5 else w
        out += [w, rng.choice(_SEPARATORS)]
    return "".join(out[:-1])


def reference(text: str, owners: dict[tuple[str, ...], int], n: int = N) -> tuple[int, str, int] | None:
    """(owner file index, the words, windows shared) of the first shared window, or None."""
    t = ref_tokens(text)
    hits = [i for i in range(len(t) - n + 1) if tuple(t[i:i + n]) in owners]
    if not hits:
        return None
    return owners[tuple(t[hits[0]:hits[0] + n])], " ".join(t[hits[0]:hits[0] + n]), len(hits)


@pytest.fixture
def tree(tmp_path) -> dict[str, Any]:
    return eval_tree(tmp_path)


@pytest.fixture
def protected(tree):
    return build([str(tree["glue"]), str(tree["squad"])], N)


def _check_against_reference(text: str, tree: dict[str, Any], owners, protected) -> bool:
    got, want = contamination(text, protected), reference(text, owners)
    assert (got is None) == (want is None), (text, got, want)
    if want is None:
        return False
    index, words, _ = want
    path, task, _ = tree["files"][index]
    reason, detail = got
    assert reason == f"decontaminate:{task}", (text, got, want)
    assert Path(path).name in detail and f'"{words}"' in detail, (detail, words)
    return True


def test_random_documents_are_dropped_exactly_when_the_reference_finds_a_shared_window(tree, protected):
    rng, words, owners = random.Random(11), tree["words"], ref_owners(tree["files"])
    texts = [t for _, _, ts in tree["files"] for t in ts]
    long_texts = {k: [ref_tokens(t) for t in texts if len(ref_tokens(t)) >= k] for k in (12, 13, 25)}
    pairs = [(ref_tokens(a), ref_tokens(b)) for a, b in tree["pairs"]]
    seen = {"kept": 0, "dropped": 0, "kept with a 12-token plant": 0, "kept across cells": 0,
            "dropped by a 13-token plant": 0}
    for _ in range(500):
        segments, kinds = [], set()
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(("noise", "noise", "plant", "plant", "cross", "train"))
            if kind == "noise":
                segments.append([rng.choice(words) for _ in range(rng.randint(0, 25))])
            elif kind == "plant":
                k = rng.choice((12, 13, 25))
                t = rng.choice(long_texts[k])
                start = rng.randint(0, len(t) - k)
                segments.append(t[start:start + k])
                kind = f"plant{k}"
            elif kind == "cross":
                a, b = rng.choice(pairs)
                cut = rng.randint(1, N - 1)
                segments.append(a[len(a) - cut:] + b[:N - cut])
            else:
                t = ref_tokens(rng.choice(tree["train"]))
                segments.append(t)
            kinds.add(kind)
        text = render([w for seg in segments for w in seg], rng)
        dropped = _check_against_reference(text, tree, owners, protected)
        seen["dropped" if dropped else "kept"] += 1
        if not dropped and "plant12" in kinds:
            seen["kept with a 12-token plant"] += 1
        if not dropped and "cross" in kinds:
            seen["kept across cells"] += 1
        if dropped and kinds & {"plant13"} and not kinds & {"plant25"}:
            seen["dropped by a 13-token plant"] += 1
    # Both outcomes, and every kind of near miss, were exercised.
    assert min(seen.values()) >= 20, seen


def test_a_planted_25_word_glue_dev_sentence_drops_and_8_or_12_shared_words_do_not(tmp_path):
    rng, words = random.Random(5), vocabulary(seed=1)
    dev = " ".join(rng.choice(words) for _ in range(25))
    assert len(ref_tokens(dev)) == 25
    write_tsv(tmp_path / "MRPC" / "dev.tsv", [["1", "11", "12", dev.capitalize() + ".", "Another sentence here."]],
              MRPC_HEADER)
    write_tsv(tmp_path / "MRPC" / "train.tsv", [["1", "1", "2", "A train sentence.", "And its pair."]], MRPC_HEADER)
    ps = build([str(tmp_path / "MRPC")], N)

    def doc(shared: list[str]) -> str:  # the rest is words the dev file lacks: nothing else is shared
        before = " ".join(f"noise{i}" for i in range(30))
        return f"{before}. {' '.join(shared).upper()}, and more text follows here."

    toks = dev.split()
    reason, detail = contamination(doc(toks), ps)
    assert reason == "decontaminate:MRPC"
    assert "dev.tsv" in detail and f'"{" ".join(toks[:N])}"' in detail
    for k in (8, 12):
        for start in (0, 5, 25 - k):
            assert contamination(doc(toks[start:start + k]), ps) is None, (k, start)
    for start in (0, 6, 12):  # 13 words anywhere in the sentence are enough
        assert contamination(doc(toks[start:start + N]), ps)[0] == "decontaminate:MRPC"


def test_windows_never_cross_tsv_cells(tree, protected):
    """The end of sentence1 and the start of sentence2 make no window; the same words inside
    one cell do (the control that this test can fail)."""
    for a, b in tree["pairs"]:
        ta, tb = ref_tokens(a), ref_tokens(b)
        for cut in (1, 6, 12):
            span = ta[len(ta) - cut:] + tb[:N - cut]
            assert contamination(" ".join(span), protected) is None
    joined = tree["pairs"][0][0] + " " + tree["pairs"][0][1]
    one_cell = tree["glue"].parent / "joined" / "CoLA"
    write_tsv(one_cell / "dev.tsv", [["src", "1", "", joined]])
    ta, tb = ref_tokens(tree["pairs"][0][0]), ref_tokens(tree["pairs"][0][1])
    assert contamination(" ".join(ta[-6:] + tb[:7]), build([str(one_cell)], N))[0] == "decontaminate:CoLA"


def test_the_first_window_decides_and_a_shared_ngram_belongs_to_the_first_file(tree, protected):
    squad_context = ref_tokens(tree["files"][-1][2][0])
    mrpc = ref_tokens(tree["pairs"][0][1])
    filler = ["zzfiller"] * 3
    a = " ".join(squad_context[:N] + filler + mrpc[:N])
    b = " ".join(mrpc[:N] + filler + squad_context[:N])
    assert contamination(a, protected)[0] == "decontaminate:squad-v2.0"
    assert "dev-v2.0.json" in contamination(a, protected)[1]
    assert contamination(b, protected)[0] == "decontaminate:MRPC"
    # The sentence in CoLA's test file and MRPC's dev file: CoLA's, the first file discovered.
    reason, detail = contamination(tree["shared"], protected)
    assert reason == "decontaminate:CoLA" and "test.tsv" in detail
    mrpc_only = build([str(tree["glue"] / "MRPC")], N)
    reason, detail = contamination(tree["shared"], mrpc_only)
    assert reason == "decontaminate:MRPC" and "dev.tsv" in detail


def test_short_documents_and_an_empty_set_never_drop(tree, protected, tmp_path):
    text = tree["pairs"][0][0]
    t = ref_tokens(text)
    assert contamination(" ".join(t[:N - 1]), protected) is None
    assert contamination("", protected) is None and contamination("!!! ...", protected) is None
    write_tsv(tmp_path / "short" / "SST-2" / "dev.tsv", [["a short sentence", "1"]], ["sentence", "label"])
    empty = build([str(tmp_path / "short")], N)
    assert len(empty.hashes) == 0 and empty.record()["ngrams"] == 0
    assert contamination(text * 3, empty) is None


def test_the_configured_ngram_is_the_window(tree):
    ps8 = build([str(tree["glue"]), str(tree["squad"])], 8)
    owners8 = ref_owners(tree["files"], 8)
    t = ref_tokens(tree["pairs"][2][0])
    assert contamination(" ".join(t[:8]), ps8)[0] == "decontaminate:MRPC"
    assert contamination(" ".join(t[:7]), ps8) is None
    rng = random.Random(3)
    for _ in range(200):
        text = " ".join(rng.choice(tree["words"]) for _ in range(6)) + " " + " ".join(
            t[rng.randint(0, 3):][:rng.randint(6, 10)])
        got, want = contamination(text, ps8), reference(text, owners8, 8)
        assert (got is None) == (want is None)


def test_resolve_returns_a_set_as_is(protected):
    assert resolve(protected) is protected


def _batch(texts: list[str], reasons: list[str] | None = None) -> dict[str, np.ndarray]:
    n = len(texts)
    return {"id": np.array([f"f:{i}" for i in range(n)], dtype=object), "uid": np.arange(n, dtype=np.int64),
            "text": np.array(texts, dtype=object), "reason": np.array(reasons or [""] * n, dtype=object),
            "detail": np.array([""] * n, dtype=object)}


def test_filter_batch_checks_the_documents_the_blocks_keep(tree, protected):
    planted = "Some words first.\n" + tree["pairs"][1][0] + "\nAnd then some words after it."
    clean = " ".join(tree["words"][:40])
    cfg = FilterConfig(blocks=[])
    out = filter_batch(_batch([planted, clean, planted], ["", "", "ingest:binary"]), cfg, protected=protected)
    assert list(out["reason"]) == ["decontaminate:MRPC", "", "ingest:binary"]
    assert "dev.tsv" in out["detail"][0] and out["detail"][2] == ""
    assert out["text"][0] == normalize_text(planted, cfg) and out["text"][1] == normalize_text(clean, cfg)
    # Without the set nothing is checked; a block that drops first keeps its own reason.
    assert list(filter_batch(_batch([planted]), cfg)["reason"]) == [""]
    short = FilterConfig(blocks=["gopher_quality"])
    assert filter_batch(_batch([planted]), short, protected=protected)["reason"][0].startswith(
        "filter:gopher_quality:")


def test_words_whose_crc32_collide_do_not_make_a_window_match(tmp_path):
    """"plumless" and "buckeroo" share a CRC-32: a window with one in place of the other is not
    the protected window, and the reference keeps the document (the 2**-64 of ``ngrams``)."""
    assert zlib.crc32(b"plumless") == zlib.crc32(b"buckeroo")
    words = [f"w{i}" for i in range(12)]
    write_tsv(tmp_path / "RTE" / "dev.tsv", [["0", " ".join(words[:6] + ["plumless"] + words[6:]), "x", "y"]],
              ["index", "sentence1", "sentence2", "label"])
    ps = build([str(tmp_path / "RTE")], N)
    assert contamination(" ".join(words[:6] + ["plumless"] + words[6:]), ps)[0] == "decontaminate:RTE"
    other = " ".join(words[:6] + ["buckeroo"] + words[6:])
    assert contamination(other, ps) is None
