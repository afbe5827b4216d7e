"""The default blocks on the labelled mix of book prose and web junk (``synthetic.web_junk``):
at least 0.95 of the junk dropped and 0.95 of the prose kept, and the four datatrove-twin
blocks decide every document as datatrove's filters do."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.corpus.filters import datatrove_filters, datatrove_verdict, exact_config, quality
from synthetic import web_junk
from pipelines.config import FilterConfig
from pipelines.filters import Doc, build_blocks, normalize_text, run_blocks
from pipelines.filters.lm_quality import REFERENCE_SOURCES

BOOKS = Path(__file__).resolve().parents[4] / "shared" / "data" / "corpus" / "gutenberg"


@pytest.fixture(scope="module")
def mix():
    # Clean prose from the books the language model's reference was not cut from.
    return web_junk.mix(n_clean=300, n_per_kind=25, seed=1, books=BOOKS, exclude=REFERENCE_SOURCES)


def test_precision_and_recall(mix, capsys):
    if not BOOKS.is_dir():
        pytest.skip(f"no books at {BOOKS}: the clean side would be synthetic prose only")
    q = quality(mix, FilterConfig())
    with capsys.disabled():
        print(f"\nmix: prose kept {q['clean_kept']:.3f}, junk dropped {q['junk_dropped']:.3f}, "
              f"precision {q['precision']:.3f}, per kind {q['per_kind_dropped']}")
    assert q["documents"]["clean"] == 300 and sum(q["documents"].values()) == 300 + 25 * len(web_junk.JUNK_KINDS)
    assert q["clean_kept"] >= 0.95
    assert q["junk_dropped"] >= 0.95
    assert min(q["per_kind_dropped"].values()) >= 0.8


def test_synthetic_prose_is_kept():
    from synthetic import prose

    q = quality([(d, "clean") for d in prose.documents(200, seed=4)], FilterConfig())
    assert q["clean_kept"] == 1.0


def test_same_verdicts_and_text_as_datatrove(mix):
    cfg = exact_config()
    ours, theirs = build_blocks(cfg), datatrove_filters(cfg)
    for text, _ in mix:
        text = normalize_text(text, cfg)
        doc = Doc(text)
        mine = run_blocks(doc, ours)
        reference, final = datatrove_verdict(theirs, text)
        assert (mine is None) == (reference is None), (mine, reference, text[:300])
        if mine is None:
            assert doc.text == final
