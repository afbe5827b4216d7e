"""benchmarks/gpu/gpu.py: the ``--smoke`` run end to end (CPU), its JSON checked field by field against
figures recomputed here, and the out-of-memory bookkeeping."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu import gpu
from electra.config import load_config
from electra.model.flops import training_flops_per_token

REPO = Path(__file__).resolve().parents[3]
SIDE_FIELDS = {"status", "sec_per_step", "sequences_per_s", "tokens_per_s", "model_tflops", "mfu_measured_peak",
               "mfu_nominal_peak"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    """The command as a user runs it, in a subprocess; its JSON file plus what it printed."""
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    p = subprocess.run([sys.executable, "benchmarks/gpu/gpu.py", "--smoke", "--json", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(out.read_text())
    result["stdout"] = p.stdout
    return result


def test_smoke_reports_every_configuration_with_consistent_figures(smoke):
    assert smoke["precision"] == "fp32" and smoke["fill"] == 0.7 and smoke["overrides"] == []
    assert {"device", "torch", "cuda", "transformers"} <= smoke["environment"].keys()
    peak = smoke["peak_tflops"]["measured"] * 1e12
    nominal = smoke["peak_tflops"]["nominal"]
    assert peak > 0 and math.isfinite(peak)
    rows = smoke["results"]
    assert [(r["preset"], r["seq_len"]) for r in rows] == [("tiny", 32), ("tiny", 64)]
    for r in rows:
        t, b = r["seq_len"], r["batch"]
        assert r["tokens_per_step"] == round(0.7 * b * t)  # --fill, exactly
        # keys per query: sum(len^2) / sum(len), between the mean length and the full length
        assert r["tokens_per_step"] / b <= r["attention_len"] <= t
        cfg = load_config(REPO / "electra/configs/tiny.json", [f"data.seq_len={t}"])
        assert r["train_flops_per_token"] == pytest.approx(training_flops_per_token(cfg, r["attention_len"]))
        assert r["setup"] == {side: {"optimizer": "AdamWeightDecay", "fast_path": []}
                              for side in ("ours", "transformers")}
        for name in ("ours", "transformers"):
            s = r[name]
            assert s.keys() == SIDE_FIELDS and s["status"] == "ok"
            assert all(math.isfinite(v) and v > 0 for k, v in s.items() if k != "status")
            assert s["sequences_per_s"] == pytest.approx(b / s["sec_per_step"])
            assert s["tokens_per_s"] == pytest.approx(r["tokens_per_step"] / s["sec_per_step"])
            flops = s["tokens_per_s"] * r["train_flops_per_token"]
            assert s["model_tflops"] == pytest.approx(flops / 1e12)
            assert s["mfu_measured_peak"] == pytest.approx(flops / peak)
            assert s["mfu_nominal_peak"] == pytest.approx(flops / (nominal * 1e12))
        ratio = r["ours"]["tokens_per_s"] / r["transformers"]["tokens_per_s"]
        assert r["speedup_vs_transformers"] == pytest.approx(ratio)
        loader = r["loader"]
        assert loader["samples_per_s"] > 0 and math.isfinite(loader["samples_per_s"])
        assert loader["over_consumption_x"] == pytest.approx(loader["samples_per_s"] / r["ours"]["sequences_per_s"])
        assert re.search(rf"^\s*tiny\s+{t}\s+{b}\s+\|", smoke["stdout"], re.M)  # its table row


def test_overrides_reach_both_sides(tmp_path):
    """``--set`` goes into every preset's config; activation checkpointing is switched on for ours by
    the trainer's ``configure_fast_path`` and for transformers by its own gradient checkpointing."""
    args = gpu.parse_args(["--smoke", "--lengths", "32", "--rounds", "1",
                           "--set", "train.activation_checkpointing=true"])
    assert (args.presets, args.lengths, args.rounds, args.fill) == ("tiny", "32", 1, 0.7)  # smoke defaults, flags win
    corpus = gpu.write_corpus(tmp_path / "corpus", 32, 16)
    row = gpu.bench_config("tiny", 32, args, torch.device("cpu"), corpus, {"measured": 1e9, "nominal": None})
    assert [row["setup"][side]["fast_path"] for side in ("ours", "transformers")] == [["activation_checkpointing"]] * 2
    assert row["ours"]["status"] == row["transformers"]["status"] == "ok"


def _oom(*_, **__):
    raise torch.cuda.OutOfMemoryError("CUDA out of memory (raised by the test)")


class OomAfter:
    """A side whose step runs ``ok`` times, then reports the device out of memory."""

    def __init__(self, ok: int):
        self.left = ok

    def step(self, ids, seg):
        if self.left == 0:
            _oom()
        self.left -= 1


def test_guarded_turns_only_out_of_memory_into_a_record():
    assert gpu.guarded(lambda x, *, y: x + y, 1, y=2) == 3
    assert gpu.guarded(_oom) == "oom"
    with pytest.raises(ValueError):
        gpu.guarded(int, "not a number")


def test_a_side_that_runs_out_of_memory_is_recorded_and_the_other_still_timed(capsys):
    ids = seg = torch.ones(2, 16, dtype=torch.long)
    sides = {"in_warmup": OomAfter(0), "in_rounds": OomAfter(2), "fine": OomAfter(10**6)}
    secs = gpu.time_sides(sides, ids, seg, warmup=1, rounds=3, steps=1)
    assert secs["in_warmup"] == "oom" and secs["in_rounds"] == "oom"
    assert isinstance(secs["fine"], float) and secs["fine"] >= 0
    assert sides["in_warmup"] is None and sides["in_rounds"] is None  # released for the next configuration
    row = {"preset": "x", "seq_len": 16, "batch": 2, "speedup_vs_transformers": None,
           "ours": gpu.figures(secs["in_rounds"], batch=2, tokens=20, flops_per_token=1.0, peak=1.0, nominal=None),
           "transformers": gpu.figures(1.0, batch=2, tokens=20, flops_per_token=1.0, peak=10.0, nominal=None),
           "loader": {"samples_per_s": 5.0, "over_consumption_x": None}}
    assert row["ours"] == {"status": "oom"}
    assert row["transformers"]["mfu_measured_peak"] == pytest.approx(2.0)  # 20 tokens/s x 1 FLOP / 10 FLOP/s
    assert row["transformers"]["mfu_nominal_peak"] is None
    json.dumps(row, allow_nan=False)  # what --json writes
    gpu.print_row(row)
    line = capsys.readouterr().out
    assert "oom" in line and line.count("|") == 4


class OomOnBuild:
    def __init__(self, *args, **kwargs):
        _oom()


def test_a_side_out_of_memory_when_built_leaves_a_row_with_the_other_side(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu, "Theirs", OomOnBuild)  # the device "full" when the baseline is built
    args = gpu.parse_args(["--smoke", "--lengths", "32"])
    corpus = gpu.write_corpus(tmp_path / "corpus", 32, 16)
    row = gpu.bench_config("tiny", 32, args, torch.device("cpu"), corpus, {"measured": 1e9, "nominal": None})
    assert row["transformers"] == {"status": "oom"} and row["speedup_vs_transformers"] is None
    assert row["ours"]["status"] == "ok" and list(row["setup"]) == ["ours"]
    assert row["loader"]["over_consumption_x"] == pytest.approx(row["loader"]["samples_per_s"]
                                                               / row["ours"]["sequences_per_s"])
    gpu.print_row(row)
    assert "oom" in capsys.readouterr().out
