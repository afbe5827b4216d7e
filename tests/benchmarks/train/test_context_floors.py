"""benchmarks/train/context_floors: the corpus floors against an independent count, the run gaps by hand."""
from __future__ import annotations

import io
import json
import math
import tarfile
from collections import Counter

import numpy as np
import pytest
from scipy.stats import entropy

from benchmarks.train import context_floors as cf
from tests.electra._corpus import SPECIALS, write_tiny_corpus


def _examples_from_tars(root) -> list[list[int]]:
    """Every train example's ids, read with tarfile + numpy only (not the project's reader)."""
    manifest = json.loads((root / "manifest.json").read_text())
    out = []
    for shard in (s for s in manifest["shards"] if s["split"] == "train"):
        with tarfile.open(root / shard["path"]) as tar:
            arrays = {m.name: np.load(io.BytesIO(tar.extractfile(m).read())) for m in tar if m.isfile()}
        for name in sorted(n for n in arrays if n.endswith(".tokens.npy")):
            layout = arrays[name.replace(".tokens.npy", ".layout.npy")]
            tokens, start = arrays[name].tolist(), 0
            for length in layout[:, 0]:
                out.append(tokens[start:start + int(length)])
                start += int(length)
    return out


def test_floors_match_an_independent_count(tmp_path):
    root = write_tiny_corpus(tmp_path / "c", seq_len=32, train_shards=(12, 9), validation_shards=(4,))
    special = set(SPECIALS.values())
    uni, pairs = Counter(), Counter()
    for ids in _examples_from_tars(root):
        uni.update(t for t in ids if t not in special)
        pairs.update((a, b) for a, b in zip(ids, ids[1:]) if a not in special and b not in special)
    firsts = Counter()
    for (a, _), n in pairs.items():
        firsts[a] += n
    floors = cf.corpus_floors(str(root))
    assert floors["tokens"] == sum(uni.values()) and floors["types"] == len(uni)
    assert floors["pairs"] == sum(pairs.values())
    assert floors["unigram_entropy"] == pytest.approx(entropy(list(uni.values())), rel=1e-9)
    h_cond = entropy(list(pairs.values())) - entropy(list(firsts.values()))
    assert floors["bigram_conditional_entropy"] == pytest.approx(h_cond, rel=1e-9)
    # the synthetic grammar's previous word says a lot about the next one
    assert 0 < floors["bigram_conditional_entropy"] < floors["unigram_entropy"] - 0.5


def test_run_gaps_against_the_floors(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"objective": {"mask_prob": 0.2}}))
    records = [{"kind": "train", "step": 10, "gen_loss": 9.0},
               {"kind": "eval", "step": 100, "eval_gen_loss": 4.0, "eval_disc_loss": 0.40, "eval_replaced_frac": 0.5},
               {"kind": "eval", "step": 200, "eval_gen_loss": 3.5, "eval_disc_loss": 0.0, "eval_replaced_frac": 0.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = cf.run_gaps(run, {"unigram_entropy": 4.5})
    assert [r["step"] for r in rows] == [100, 200]
    assert rows[0]["gen_gap"] == pytest.approx(0.5) and rows[1]["gen_gap"] == pytest.approx(1.0)
    p = 0.2 * 0.5  # replaced tokens: mask_prob x replaced share
    floor = -(0.1 * math.log(0.1) + 0.9 * math.log(0.9))
    assert rows[0]["disc_floor"] == pytest.approx(floor) and p == pytest.approx(0.1)
    assert rows[0]["disc_gap"] == pytest.approx(floor - 0.40)
    assert "disc_gap" not in rows[1]  # an MLM run has no discriminator


def test_binary_entropy_edges():
    assert cf.binary_entropy(0.5) == pytest.approx(math.log(2))
    assert cf.binary_entropy(0.0) == 0.0 and cf.binary_entropy(1.0) == 0.0
