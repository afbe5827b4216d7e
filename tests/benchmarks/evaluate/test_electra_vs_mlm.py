"""ELECTRA vs MLM comparison (benchmarks/evaluate/electra_vs_mlm.py): equal budgets, same stream, report.

The smoke run is the real script end to end on a tiny corpus (tiny preset, one checkpoint per
objective, since each fine-tuned row costs a cli.evaluate start; one task of a small generated
SST-2-format folder, one seed), then run again to check it resumes with nothing left to do. The
budgets are recomputed from what the runs wrote (RUN/config.json and the final checkpoint's
tokens_seen) with this file's own FLOPs arithmetic, the formula of electra/model/flops.py's docstring
written out again, not the project's function. The same stream is checked on the sample keys
each run's sample log (data.log_samples): MLM's first steps are exactly ELECTRA's steps.
"""
from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.evaluate.electra_vs_mlm import checkpoint_steps, eval_order
from benchmarks.evaluate.electra_vs_mlm_report import collect_row, write_report
from electra.data.sample_log import read_sample_log
from tests._procs import run_in_group
from tests.electra._corpus import write_tiny_corpus

pytestmark = pytest.mark.slow  # runs the benchmark end to end twice (trainer, Prefect servers)

REPO = Path(__file__).resolve().parents[3]
ELECTRA_STEPS = 40


def _write_sst2(glue: Path) -> None:
    """A small SST-2-format task: the label is carried by one sentiment word."""
    rng = random.Random(0)
    words = {1: ["good", "great", "fine", "happy"], 0: ["bad", "awful", "poor", "sad"]}
    nouns = ["film", "book", "story", "day", "meal", "song"]
    (glue / "SST-2").mkdir(parents=True)
    for split, n in (("train", 64), ("dev", 32)):
        rows = []
        for _ in range(n):
            label = rng.randint(0, 1)
            rows.append(f"the {rng.choice(nouns)} was {rng.choice(words[label])} today\t{label}")
        (glue / "SST-2" / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")


def _flops_per_token(cfg: dict) -> float:
    """3 x forward matmul FLOPs per token (see the module docstring)."""
    m, o, t = cfg["model"], cfg["objective"], cfg["data"]["seq_len"]
    e, v, p = m["embedding_size"], m["vocab_size"], o["mask_prob"]

    def encoder(h, f):
        return (2 * e * h if e != h else 0) + m["num_layers"] * (8 * h * h + 4 * h * f + 4 * t * h)

    def head(h):
        return 2 * h * e + 2 * e * v

    h, f = m["hidden_size"], m["intermediate_size"]
    if o["kind"] == "mlm":
        return 3 * (encoder(h, f) + p * head(h))
    hg = max(1, round(h * m["generator_fraction"]))
    gen = encoder(hg, 4 * hg)  # generator FFN = 4 x its hidden (config.generator_sizes)
    return 3 * (gen + encoder(h, f) + 2 * h * h + 2 * h + p * head(hg))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evm")
    corpus = write_tiny_corpus(tmp / "corpus", seq_len=32, train_shards=(40, 40, 40, 40), validation_shards=(16,))
    _write_sst2(tmp / "glue")
    out = tmp / "out"
    cmd = [sys.executable, "benchmarks/evaluate/electra_vs_mlm.py", "--corpus", str(corpus), "--glue-dir", str(tmp / "glue"),
           "--out", str(out), "--preset", "tiny", "--electra-steps", str(ELECTRA_STEPS), "--checkpoints", "1",
           "--tasks", "SST-2", "--seeds", "1", "--max-train-examples", "64", "--ft-epochs", "1", "--ft-lr", "1e-3",
           "--ft-batch", "16", "--threads", "1",
           "--set", "data.seq_len=32", "--set", "model.max_position_embeddings=64", "--set", "train.log_every=5",
           "--set", "data.shuffle_buffer=16", "--set", "data.num_workers=1", "--set", "data.log_samples=true",
           "--set", "train.global_batch_size=8", "--set", "train.micro_batch_size=8"]
    import os
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    p = run_in_group(cmd, cwd=str(REPO), env=env, timeout=600)
    assert p.returncode == 0, p.output[-4000:]
    again = run_in_group(cmd, cwd=str(REPO), env=env, timeout=600)  # resumable: nothing left to do
    assert again.returncode == 0, again.output[-4000:]
    return out, again.output


def _final(run_dir: Path) -> tuple[dict, dict]:
    cfg = json.loads((run_dir / "config.json").read_text())
    steps = sorted((run_dir / "checkpoints").glob("step_*/meta.json"))
    return cfg, json.loads(steps[-1].read_text())


def test_equal_flops_budgets_same_stream(smoke):
    out, _ = smoke
    (ce, me), (cm, mm) = _final(out / "runs" / "electra"), _final(out / "runs" / "mlm")
    assert ce["objective"]["kind"] == "electra" and cm["objective"]["kind"] == "mlm"
    fe, fm = _flops_per_token(ce), _flops_per_token(cm)
    assert fe > fm  # the generator costs: MLM gets more steps for the same budget
    budget_e, budget_m = me["tokens_seen"] * fe, mm["tokens_seen"] * fm
    assert abs(budget_e / budget_m - 1) <= 0.02, (budget_e, budget_m)
    assert me["step"] == ELECTRA_STEPS and mm["step"] > ELECTRA_STEPS
    # each schedule decays to 0 at its own budget, warm-up the same share
    for cfg, meta in ((ce, me), (cm, mm)):
        assert cfg["optimizer"]["total_steps"] == meta["step"]
        assert cfg["optimizer"]["warmup_steps"] == max(1, round(0.1 * meta["step"]))
    # same tokenizer, data, seed, batch, model
    assert me["tokenizer_sha256"] == mm["tokenizer_sha256"] and me["data_sha256"] == mm["data_sha256"]
    assert ce["train"]["seed"] == cm["train"]["seed"]
    assert ce["train"]["global_batch_size"] == cm["train"]["global_batch_size"]
    assert ce["model"] == cm["model"]
    # the same stream: each run's sample log; MLM's first steps are ELECTRA's steps
    electra, mlm = (read_sample_log(out / "runs" / kind, 0) for kind in ("electra", "mlm"))
    assert sorted(electra) == list(range(1, ELECTRA_STEPS + 1)) and sorted(mlm) == list(range(1, mm["step"] + 1))
    assert all(len(electra[s]) == ce["train"]["global_batch_size"] for s in electra)
    assert electra == {s: mlm[s] for s in electra}
    for kind, n in (("electra", me["step"]), ("mlm", mm["step"])):
        got = sorted(int(p.parent.name[5:]) for p in (out / "runs" / kind / "checkpoints").glob("step_*/meta.json"))
        assert got == [n]


def test_checkpoints_at_the_same_budget_fractions():
    assert checkpoint_steps(1000, 3) == [250, 500, 1000] and checkpoint_steps(1078, 3) == [270, 539, 1078]
    assert checkpoint_steps(40, 1) == [40] and checkpoint_steps(2, 3) == [1, 2]


def test_report_rows_and_resume(smoke):
    out, rerun_output = smoke
    assert "$ " not in rerun_output  # the rerun started no trainer and no evaluation
    res = json.loads((out / "results.json").read_text())
    rows = {(r["objective"], r["step"]): r for r in res["rows"]}
    assert sorted(o for o, _ in rows) == ["electra", "mlm", "random"]
    for (objective, step), r in rows.items():
        ev = out / "eval" / ("random_init" if objective == "random" else f"{objective}_step_{step:08d}")
        seeds = json.loads((ev / "results.json").read_text())["tasks"]["SST-2"]["seeds"]
        assert r["tasks"]["SST-2"]["scores"] == [s["metrics"]["accuracy"] for s in seeds]
    assert (out / "score_vs_flops.png").stat().st_size > 1000
    assert "SST-2 accuracy" in (out / "table.md").read_text()


def _results(scores: dict[str, list[float]], primaries: dict[str, str]) -> dict:
    return {"tasks": {t: {"primary": primaries[t], "seeds": [{"seed": i, "metrics": {primaries[t]: s}}
                                                            for i, s in enumerate(v)]}
                      for t, v in scores.items()}}


def test_report_medians_spread_and_average(tmp_path):
    prim = {"CoLA": "mcc", "SST-2": "accuracy"}
    rows, expect = [], []
    rng = np.random.default_rng(3)
    for objective, step, tokens, fpt in (("electra", 10, 1000, 2.0), ("mlm", 11, 1100, 1.8), ("random", 0, 0, 0.0)):
        scores = {t: [float(x) for x in np.round(rng.uniform(0, 100, 4), 1)] for t in prim}
        path = tmp_path / f"{objective}.json"
        path.write_text(json.dumps(_results(scores, prim)))
        meta = {"tokens_seen": tokens, "wall_time": 60.0} if objective != "random" else None
        rows.append(collect_row(objective, step, meta, fpt, path))
        expect.append(scores)
    text = write_report(tmp_path, rows, {"seeds": 4, "max_train_examples": 100, "finetune_flags": ["--lr", "1"]})
    for r, scores in zip(rows, expect):
        meds = {t: float(np.median(v)) for t, v in scores.items()}
        for t, v in scores.items():
            assert math.isclose(r["tasks"][t]["median"], meds[t])
            assert (r["tasks"][t]["min"], r["tasks"][t]["max"]) == (min(v), max(v))
            assert f"{meds[t]:.1f} [{min(v):.1f}, {max(v):.1f}]" in text
        per_seed = [sum(scores[t][i] for t in prim) / len(prim) for i in range(4)]
        assert math.isclose(r["average"]["median"], float(np.median(per_seed)))
        assert math.isclose(r["average"]["min"], min(per_seed)) and math.isclose(r["average"]["max"], max(per_seed))
    assert math.isclose(rows[0]["flops"], 2000.0) and math.isclose(rows[1]["flops"], 1980.0)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["rows"][1]["tasks"]["CoLA"]["metric"] == "mcc"
    assert (tmp_path / "score_vs_flops.png").stat().st_size > 1000 and "capped at 100" in text


def test_average_band_contains_its_centre(tmp_path):
    # Each seed fails a different task: the mean of the task medians (10) lies outside the per-seed
    # means' range (6.67 each), which broke the plot's error bars; one statistic for both now.
    scores = {"CoLA": [0.0, 10.0, 10.0], "MRPC": [10.0, 0.0, 10.0], "SST-2": [10.0, 10.0, 0.0]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_results(scores, {t: "accuracy" for t in scores})))
    row = collect_row("electra", 1, {"tokens_seen": 10, "wall_time": 1.0}, 1.0, path)
    assert row["average"]["min"] <= row["average"]["median"] <= row["average"]["max"]
    assert math.isclose(row["average"]["median"], 20 / 3)
    write_report(tmp_path, [row], {"seeds": 3, "max_train_examples": 0, "finetune_flags": []})
    assert (tmp_path / "score_vs_flops.png").is_file()


def test_headline_rows_are_fine_tuned_first():
    stages = {"electra": [500, 1000, 2000], "mlm": [534, 1067, 2134]}
    assert eval_order(stages) == [("electra", 2000), ("mlm", 2134), ("random", 0), ("electra", 1000),
                                  ("mlm", 1067), ("electra", 500), ("mlm", 534)]
    assert eval_order({"electra": [40], "mlm": [43]}) == [("electra", 40), ("mlm", 43), ("random", 0)]
    every = eval_order(stages)
    assert len(every) == len(set(every)) == 7  # each checkpoint once


def test_a_partial_report_names_what_is_pending(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_results({"SST-2": [50.0, 60.0]}, {"SST-2": "accuracy"})))
    row = collect_row("electra", 2000, {"tokens_seen": 10, "wall_time": 1.0}, 1.0, path)
    text = write_report(tmp_path, [row], {"seeds": 2, "finetune_flags": [], "pending": ["mlm step 2134", "random init"]})
    assert "Not fine-tuned yet (rerun the same command to finish them): mlm step 2134, random init." in text
    assert "Not fine-tuned yet" in (tmp_path / "table.md").read_text()
    assert "Not fine-tuned yet" not in write_report(tmp_path, [row], {"seeds": 2, "finetune_flags": [], "pending": []})
