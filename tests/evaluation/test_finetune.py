"""The fine-tuning loop without Prefect: schedule, padding, reproducibility, SQuAD 1.1, DeepSpeed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.finetune import finetune_glue, recipe_for_model
from evaluation.loop import lr_multiplier, pad_batch
from evaluation.predictions import read_predictions, recompute_metrics
from evaluation.squad_finetune import finetune_squad

from .glue_files import independent_glue_scores, squad_json, write_keyword_sst2, write_task
from .tiny_model import tiny_export, train_tokenizer

REPO = Path(__file__).resolve().parents[2]
FAST = {"epochs": 1, "batch_size": 16, "lr": 6e-3, "num_threads": 1, "num_seeds": 1,
        "max_seq_len": 32}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    export = tiny_export(root / "hf", tokenizer_dir=train_tokenizer(root / "tok"))
    write_keyword_sst2(root / "glue", n_train=48, n_dev=20)
    squad_json(root / "squad" / "train-v1.1.json", version="1.1", n_paragraphs=3)
    squad_json(root / "squad" / "dev-v1.1.json", version="1.1", n_paragraphs=2, seed=1)
    return root, export / "discriminator"


def test_schedule_is_warmup_times_linear_decay():
    assert [lr_multiplier(s, total_steps=100, warmup_steps=10) for s in (0, 5, 10, 55, 100)] == \
        pytest.approx([0.0, 0.5 * 0.95, 0.9, 0.45, 0.0])
    assert lr_multiplier(0, total_steps=10, warmup_steps=0) == 1.0


def test_pad_batch_masks_padding():
    ids, seg, mask = pad_batch([[2, 7, 3], [2, 3]], [[0, 0, 0], [0, 1]], pad_id=0)
    assert ids.tolist() == [[2, 7, 3], [2, 3, 0]] and seg.tolist() == [[0, 0, 0], [0, 1, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_recipe_size_from_the_export(tiny):
    _, model = tiny
    rec = recipe_for_model(model)
    assert (rec.size, rec.lr, rec.layerwise_lr_decay) == ("small", 3e-4, 0.8)
    assert recipe_for_model(model, size="large").lr == 5e-5


def test_same_seed_same_run(tiny):
    root, model = tiny
    rec = recipe_for_model(model, **FAST)
    a = finetune_glue("SST-2", model_dir=model, glue_dir=root / "glue", recipe=rec, out_dir=root / "a")
    b = finetune_glue("SST-2", model_dir=model, glue_dir=root / "glue", recipe=rec, out_dir=root / "b")
    assert a.seeds[0].train_loss == b.seeds[0].train_loss and a.seeds[0].steps == 3
    assert (root / "a" / a.seeds[0].predictions).read_text() == \
        (root / "b" / b.seeds[0].predictions).read_text()
    rows = read_predictions(root / "a" / a.seeds[0].predictions)
    assert [r["id"] for r in rows] == [f"dev-{i}" for i in range(2, 22)]  # line numbers
    assert a.baseline == _majority_baseline_from_files(root / "glue" / "SST-2")


def _majority_baseline_from_files(folder: Path) -> dict:
    """SST-2's majority-class baseline from the TSV files by csv + scikit-learn."""
    import csv
    from collections import Counter

    from sklearn.metrics import accuracy_score

    def labels(name):
        with open(folder / name, newline="") as f:
            rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            return [row["label"] for row in rows]

    counts = Counter(labels("train.tsv"))
    majority = "1" if counts["1"] > counts["0"] else "0"  # a tie goes to "0", the first label
    dev = labels("dev.tsv")
    accuracy = 100 * accuracy_score(dev, [majority] * len(dev))
    return {"name": f"majority class '{majority}'", "prediction": majority,
            "metrics": {"accuracy": pytest.approx(accuracy)}}


def test_squad11_predictions_and_scores(tiny):
    root, model = tiny
    rec = recipe_for_model(model, **FAST, squad_max_len=32, squad_doc_stride=16,
                           squad_max_query=8)
    res = finetune_squad(model_dir=model, squad_dir=root / "squad", version="1.1", recipe=rec,
                         out_dir=root / "sq")
    (seed,) = res.seeds
    rows = read_predictions(root / "sq" / seed.predictions)
    assert sorted(r["id"] for r in rows) == sorted(f"p{p}q{q}" for p in range(2) for q in range(3))
    assert all(r["prediction"] == r["best_text"] and r["na_prob"] == 0 for r in rows)
    assert set(seed.metrics) == {"exact", "f1"} and 0 <= seed.metrics["exact"] <= seed.metrics["f1"] <= 100
    assert recompute_metrics("SQuAD1.1", root / "sq" / seed.predictions) == seed.metrics
    assert res.num_train > 9  # several doc-stride windows per question
    # SQuAD 1.1: every question has an answer, so answering none scores 0
    assert res.baseline == {"name": "always no answer", "prediction": "",
                            "metrics": {"exact": 0.0, "f1": 0.0}}


@pytest.mark.slow
def test_deepspeed_engine_matches_plain_loop(tiny):
    """Same recipe through a single-process DeepSpeed engine: same losses (own process,
    because DeepSpeed initialises torch.distributed; the first run compiles its CPU op ~75 s).
    In fp32: on a CPU with native bf16, "auto" picks bf16, where DeepSpeed's bf16 mode (bf16
    weights, fp32 masters) and the loop's autocast (fp32 weights) round differently (1.4% apart
    after 3 steps on an AMX Xeon); the engine's plumbing is what this compares."""
    root, model = tiny
    script = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
from evaluation.finetune import finetune_glue, recipe_for_model
out = {{}}
for ds in (False, True):
    rec = recipe_for_model({str(model)!r}, **{FAST!r}, deepspeed=ds, precision="fp32")
    r = finetune_glue("SST-2", model_dir={str(model)!r}, glue_dir={str(root / 'glue')!r},
                      recipe=rec, out_dir={str(root)!r} + "/ds" + str(ds))
    out[str(ds)] = r.seeds[0].train_loss
print("RESULT" + json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    losses = json.loads(line[len("RESULT"):])
    assert losses["True"] == pytest.approx(losses["False"], rel=1e-4)


@pytest.mark.gpu
def test_same_code_on_cuda(tiny):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    root, model = tiny
    rec = recipe_for_model(model, **{**FAST, "device": "cuda", "precision": "bf16"})
    res = finetune_glue("SST-2", model_dir=model, glue_dir=root / "glue", recipe=rec,
                        out_dir=root / "cuda")
    rows = read_predictions(root / "cuda" / res.seeds[0].predictions)
    assert res.seeds[0].steps == 3 and independent_glue_scores("SST-2", rows) == pytest.approx(res.seeds[0].metrics)


def test_lengths_capped_to_the_models_positions(tiny):
    _, model = tiny  # tiny_export: max_position_embeddings 128
    rec = recipe_for_model(model)
    assert (rec.max_seq_len, rec.squad_max_len) == (128, 128)
    assert rec.length_caps == {"squad_max_len": {"recipe": 512, "used": 128}}
    rec = recipe_for_model(model, max_seq_len=300, squad_max_len=64)
    assert (rec.max_seq_len, rec.squad_max_len) == (128, 64)
    assert rec.length_caps == {"max_seq_len": {"recipe": 300, "used": 128}}


def test_finished_seeds_are_reused(tiny):
    root, model = tiny
    one = finetune_glue("SST-2", model_dir=model, glue_dir=root / "glue", out_dir=root / "r",
                        recipe=recipe_for_model(model, **FAST), run_id="first")
    two = finetune_glue("SST-2", model_dir=model, glue_dir=root / "glue", out_dir=root / "r",
                        recipe=recipe_for_model(model, **{**FAST, "num_seeds": 2}),
                        run_id="second")
    # a different recipe (num_seeds) is a different key: both seeds run again
    assert [s.run_id for s in two.seeds] == ["second", "second"]
    assert two.seeds[0].train_loss == one.seeds[0].train_loss  # same seed, same run
    again = finetune_glue("SST-2", model_dir=model, glue_dir=root / "glue",
                          out_dir=root / "r", run_id="third",
                          recipe=recipe_for_model(model, **{**FAST, "num_seeds": 2}))
    assert again.to_dict() == two.to_dict()  # nothing redone


def test_check_task_data_parses_every_file(tmp_path):
    import re

    from evaluation.finetune import check_task_data
    from evaluation.glue_tasks import GlueDataError

    folder = write_task(tmp_path, "RTE", n_train=7, n_dev=3, n_test=2)
    assert check_task_data("RTE", tmp_path) == {"train": 7, "dev": 3, "test": 2}
    dev = folder / "dev.tsv"
    lines = dev.read_text().splitlines()
    lines[2] = "\t".join(lines[2].split("\t")[:-1] + ["maybe"])
    dev.write_text("\n".join(lines) + "\n")
    with pytest.raises(GlueDataError, match=re.escape(f"{dev}:3: RTE label 'maybe'")):
        check_task_data("RTE", tmp_path)


def test_skipped_qqp_rows_are_recorded_in_the_task_result(tiny):
    root, model = tiny
    folder = write_task(root / "glue_qqp", "QQP", n_train=16, n_dev=6)
    lines = (folder / "train.tsv").read_text().splitlines()
    lines.insert(3, "cut\trow\twith four")  # line 4: a row broken as in the official downloads
    (folder / "train.tsv").write_text("\n".join(lines) + "\n")
    res = finetune_glue("QQP", model_dir=model, glue_dir=root / "glue_qqp",
                        recipe=recipe_for_model(model, **FAST), out_dir=root / "qqp")
    assert res.num_train == 16  # the 16 good rows, the cut one left out
    skipped = res.to_dict()["skipped_rows"]
    assert list(skipped) == ["train"] and skipped["train"]["skipped"] == 1
    assert skipped["train"]["rows"][0]["line"] == 4 and skipped["train"]["path"].endswith("QQP/train.tsv")
