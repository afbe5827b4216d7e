"""End-to-end evaluation flows from a tiny randomly initialised HF export, under a test Prefect.

One module-scoped evaluation (SST-2 keyword task a tiny model can learn, MNLI with test files and
AX, STS-B, SQuAD 2.0) is shared by the assertions; the scanner test uses a run folder of two
checkpoints. Sizes are tiny: the whole module runs in about a minute on two busy cores.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evaluation import report
from evaluation.predictions import read_predictions, recompute_metrics
from tests.evaluation.glue_files import independent_glue_scores, write_keyword_sst2, write_task
from tests.flows._eval_data import make_run as _make_run

LEARN_BAR = 85.0  # SST-2-format keyword task: chance is 50 %


# Tiny-model settings (the paper's lr is for 14M+ parameters); 1 thread: see recipe.num_threads.
RECIPE = {"lr": 2e-3, "epochs": 4, "batch_size": 16, "max_seq_len": 32, "squad_max_len": 48,
          "squad_doc_stride": 16, "squad_max_query": 8, "num_threads": 1}


@pytest.fixture(scope="module")
def evaluated(tiny, prefect_harness):
    from flows.evaluate import evaluate

    out = tiny["root"] / "out"
    results = evaluate(checkpoint=str(tiny["export"]), out=str(out), glue_dir=str(tiny["glue"]),
                       tasks="SST-2,MNLI,STS-B", squad_dir=str(tiny["squad"]),
                       squad_version="2.0", seeds=3, recipe=RECIPE)
    return out, results


def test_outputs_exist_and_scores_recompute(evaluated):
    out, results = evaluated
    assert report.read_results(out) == json.loads(json.dumps(results))
    assert set(results["tasks"]) == {"SST-2", "MNLI", "STS-B", "SQuAD2.0"}
    import torch  # precision "auto": bf16 only where the CPU has native bf16 (AMX / AVX512-BF16)
    native = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    assert results["recipe"]["precision"] == "auto"
    assert results["precision"] == ("bf16" if native else "fp32")
    for name, task in results["tasks"].items():
        assert [s["seed"] for s in task["seeds"]] == [0, 1, 2]
        for seed in task["seeds"]:
            path = out / seed["predictions"]
            assert path.is_file() and path.parent.name == name
            rows = read_predictions(path)
            assert all(r["id"] for r in rows) and len({(r["split"], r["id"]) for r in rows}) == len(rows)
            if name.startswith("SQuAD"):  # scored against the official scripts in test_squad_scoring
                assert recompute_metrics(name, path) == pytest.approx(seed["metrics"])
            else:  # scikit-learn/scipy on the prediction file, not the code that produced the score
                assert independent_glue_scores(name, rows) == pytest.approx(seed["metrics"])
        for metric, median in task["median"].items():
            values = sorted(s["metrics"][metric] for s in task["seeds"])
            assert median == pytest.approx(values[1])
    assert set(results["tasks"]["MNLI"]["median"]) == {"accuracy_m", "accuracy_mm"}
    assert results["tasks"]["STS-B"]["num_train"] == 2 * 24  # both sentence orders
    assert results["tasks"]["MNLI"]["num_eval"] == {"dev_matched": 9, "dev_mismatched": 9}
    assert {"exact", "f1", "best_exact", "best_f1"} <= set(results["tasks"]["SQuAD2.0"]["median"])
    assert (out / "report.html").is_file() and (out / "seeds.png").stat().st_size > 1000
    html = (out / "report.html").read_text()
    assert "SST-2" in html and "seeds.png" in html
    primaries = [results["tasks"][t]["median"][results["tasks"][t]["primary"]]
                 for t in ("SST-2", "MNLI", "STS-B")]
    assert results["glue_average"] == pytest.approx(sum(primaries) / 3)


def test_markdown_artifact_published(evaluated):
    import httpx
    from prefect.settings import PREFECT_API_URL

    # Plain REST: prefect 3.8.8's client sends null for omitted filter fields, which its own
    # server rejects (422).
    response = httpx.post(f"{PREFECT_API_URL.value()}/artifacts/filter",
                          json={"artifacts": {"key": {"any_": ["electra-eval"]}}})
    response.raise_for_status()
    arts = response.json()
    assert arts and "| SST-2 | accuracy |" in arts[0]["data"] and arts[0]["type"] == "markdown"


def test_tiny_model_learns_the_keyword_task(evaluated):
    _, results = evaluated
    sst2 = results["tasks"]["SST-2"]
    assert sst2["median"]["accuracy"] >= LEARN_BAR, sst2


def test_glue_submission_files(evaluated):
    out, results = evaluated
    sub = out / "glue_submission"
    assert sorted(p.name for p in sub.iterdir()) == [
        "AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "SST-2.tsv", "WNLI.tsv"]
    lines = (sub / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 1 + 8
    assert {ln.split("\t")[1] for ln in lines[1:]} <= {"0", "1"}
    ax = (sub / "AX.tsv").read_text().splitlines()[1:]
    assert [ln.split("\t")[0] for ln in ax] == ["0", "1"]
    assert {ln.split("\t")[1] for ln in ax} <= {"entailment", "neutral", "contradiction"}
    assert {ln.split("\t")[1] for ln in (sub / "WNLI.tsv").read_text().splitlines()[1:]} <= {"0", "1"}
    assert len((sub / "MNLI-mm.tsv").read_text().splitlines()) == 1 + 5


def test_evaluate_new_checkpoints_is_idempotent(tiny, prefect_harness):
    from flows.evaluate_new_checkpoints import evaluate_new_checkpoints

    run = _make_run(tiny["root"], tiny["export"], [10, 20])
    (run / "checkpoints" / "step_00000030").mkdir()  # incomplete: no meta.json, never evaluated
    corrupt = run / "checkpoints" / "step_00000005"
    corrupt.mkdir()
    (corrupt / "meta.json").write_text("{")  # unreadable: skipped with its reason, not fatal
    kwargs = dict(runs=str(run.parent), glue_dir=str(tiny["glue"]), tasks="SST-2", seeds=1,
                  recipe={"epochs": 1, "max_train_examples": 40, "max_eval_examples": 20,
                          "num_threads": 1})
    first = evaluate_new_checkpoints(**kwargs)
    # newest first: when evaluation falls behind, the freshest model is scored first
    assert [Path(p).name for p in first["evaluated"]] == ["step_00000020", "step_00000010"]
    assert list(first["skipped"]) == [str(corrupt)]
    assert "unreadable checkpoint meta" in first["skipped"][str(corrupt)]
    latest = run / "eval" / "step_00000020"
    res = report.read_results(latest)
    assert res["step"] == 20 and res["checkpoint_meta"]["tokens_seen"] == 2000
    # the second one evaluated (step 10) plots both: loss beside scores by step
    assert (run / "eval" / "step_00000010" / "checkpoints.png").stat().st_size > 1000
    stamp = (latest / "results.json").stat().st_mtime_ns
    again = evaluate_new_checkpoints(**kwargs)
    assert again["evaluated"] == [] and list(again["skipped"]) == [str(corrupt)]
    assert (latest / "results.json").stat().st_mtime_ns == stamp


def test_cli_unknown_task_is_one_line(tiny, capsys):
    from cli.evaluate import main

    code = main(["--checkpoint", str(tiny["export"]), "--glue-dir", str(tiny["glue"]),
                 "--tasks", "CoLA,SST-3", "--out", str(tiny["root"] / "bad")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert err.startswith("evaluate: error: unknown GLUE task 'SST-3'; known tasks: ") and "SST-2" in err
    assert not (tiny["root"] / "bad").exists()


def test_cli_data_folder_from_the_environment(tiny, capsys, monkeypatch):
    """No --glue-dir: $ELECTRA_GLUE_DIR; a missing folder is one line naming the variable."""
    from cli.evaluate import main

    monkeypatch.setenv("ELECTRA_GLUE_DIR", str(tiny["root"] / "nowhere"))
    code = main(["--checkpoint", str(tiny["export"]), "--tasks", "SST-2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"evaluate: error: $ELECTRA_GLUE_DIR={tiny['root'] / 'nowhere'}: "
                                        "no such folder"), err


def test_a_glue_folder_lacking_a_task_is_one_line_before_anything_runs(tiny, capsys):
    """First contact: the GLUE folder has SST-2 but no RTE. The CLI says so in one line, before
    Prefect or any model starts, naming the missing task and the --tasks that runs the ones
    present; the flow (deployments, the scan) refuses the same way; nothing is written."""
    from cli.evaluate import main
    from common.config import ConfigError
    from evaluation.evaluation_job import EvaluationJob

    out = tiny["root"] / "missing"
    code = main(["--checkpoint", str(tiny["export"]), "--out", str(out), "--glue-dir", str(tiny["glue"]),
                 "--tasks", "SST-2,RTE"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert err.startswith(f"evaluate: error: --glue-dir={tiny['glue']} lacks RTE ({tiny['glue'] / 'RTE'}: "
                          "task folder missing"), err
    assert err.endswith("; evaluate the tasks it has with --tasks SST-2"), err
    with pytest.raises(ConfigError, match="lacks RTE .*--tasks SST-2$"):  # what the flow loads
        EvaluationJob.load(checkpoint=str(tiny["export"]), out=str(out), glue_dir=str(tiny["glue"]),
                           tasks="SST-2,RTE")
    assert not out.exists()  # nothing was started


def test_a_task_failing_mid_run_prints_what_finished_and_the_way_on(tiny, prefect_harness):
    """First contact: RTE's files are present but one row is bad, found once the run started.
    The CLI (a user's process) prints what finished (SST-2's table) and the report's path, then
    one error line naming RTE and the --tasks that leaves it out; exit 1; report.html and
    results.json kept; no traceback anywhere."""
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    glue = tiny["root"] / "glue_bad_rte"
    write_keyword_sst2(glue, n_train=12, n_dev=6)
    rte = write_task(glue, "RTE", n_train=12, n_dev=6) / "train.tsv"
    lines = rte.read_text().splitlines()
    lines[3] = "\t".join(lines[3].split("\t")[:-1] + ["maybe"])  # line 4: label not in the set
    rte.write_text("\n".join(lines) + "\n")
    out = tiny["root"] / "bad_rte"
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        [sys.executable, "-m", "cli.evaluate", "--checkpoint", str(tiny["export"]), "--out", str(out),
         "--glue-dir", str(glue), "--tasks", "SST-2,RTE", "--seeds", "1", "--epochs", "1",
         "--max-train-examples", "8", "--max-eval-examples", "4", "--max-seq-len", "32", "--threads", "1"],
        cwd=repo, env={**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(repo)},
        capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr[-3000:]
    assert p.stdout.count("| SST-2 | accuracy |") == 1 and "| RTE |" not in p.stdout
    assert f"report: {out / 'report.html'}" in p.stdout and (out / "report.html").is_file()
    assert list(report.read_results(out)["tasks"]) == ["SST-2"]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("evaluate: error: 1 task(s) failed (RTE: GlueDataError: ") and f"{rte}:4" in last
    assert last.endswith(f"results.json and report.html in {out} hold the others; fix the data and rerun to "
                         "redo only these, or leave them out: --tasks SST-2"), last
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]


def test_cli_flags_come_from_the_job_and_the_recipe():
    """Outside scripts call these flags: every one of the earlier hand-written parser still
    parses to the same values; the rest are the recipe's other fields, generated."""
    import dataclasses

    from cli.evaluate import build_parser
    from evaluation.evaluation_job import RECIPE_WITHOUT_FLAGS, job_values
    from evaluation.recipe import FinetuneRecipe

    parser = build_parser()
    flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    before = {"--help", "--checkpoint", "--out", "--glue-dir", "--tasks", "--squad-dir", "--squad-version",
              "--seeds", "--size", "--lr", "--layerwise-lr-decay", "--llrd-variant", "--optimizer", "--reference",
              "--epochs", "--batch-size", "--max-seq-len", "--max-train-examples", "--max-eval-examples",
              "--precision", "--device", "--threads", "--deepspeed", "--workers", "--length-buckets"}
    assert before <= flags
    recipe = {f.name for f in dataclasses.fields(FinetuneRecipe)} - set(RECIPE_WITHOUT_FLAGS)
    assert {f"--{n.replace('_', '-')}" for n in recipe - {"num_threads"}} <= flags
    args = parser.parse_args(["--checkpoint", "c", "--out", "o", "--lr", "1e-4", "--threads",
                              "1", "--llrd-variant", "corrected", "--deepspeed", "--squad-version", "2.0"])
    assert job_values(args) == {"checkpoint": "c", "out": "o", "squad_version": "2.0",
                                "recipe": {"lr": 1e-4, "num_threads": 1, "llrd_variant": "corrected",
                                           "deepspeed": True}}
    assert job_values(parser.parse_args(["--checkpoint", "c"])) == {"checkpoint": "c", "recipe": {}}


def test_broken_task_is_isolated_and_rerun_redoes_only_it(tiny, prefect_harness):
    """RTE's train file has a bad label: SST-2 and SQuAD (at the recipe's 512, capped to the
    tiny model's 128 positions) still finish; after the fix, the rerun evaluates only RTE."""
    import hashlib

    from flows.evaluate import EvaluationFailed, evaluate

    glue = tiny["root"] / "glue_iso"
    write_keyword_sst2(glue, n_train=12, n_dev=6)
    rte = write_task(glue, "RTE", n_train=12, n_dev=6) / "train.tsv"
    good = rte.read_text()
    lines = good.splitlines()
    lines[3] = "\t".join(lines[3].split("\t")[:-1] + ["maybe"])  # line 4: label not in the set
    rte.write_text("\n".join(lines) + "\n")
    out = tiny["root"] / "iso"
    kwargs = dict(checkpoint=str(tiny["export"]), out=str(out), glue_dir=str(glue),
                  tasks="SST-2,RTE", squad_dir=str(tiny["squad"]), squad_version="2.0", seeds=2,
                  recipe={"epochs": 1, "max_train_examples": 8, "max_eval_examples": 4,
                          "max_seq_len": 32, "num_threads": 1})
    with pytest.raises(EvaluationFailed, match="RTE"):
        evaluate(**kwargs)
    first = report.read_results(out)
    assert set(first["tasks"]) == {"SST-2", "SQuAD2.0"}
    assert list(first["failed"]) == ["RTE"] and f"{rte}:4" in first["failed"]["RTE"]
    assert first["length_caps"] == {"squad_max_len": {"recipe": 512, "used": 128}}
    assert first["recipe"]["squad_max_len"] == 128
    assert {(out / "seeds" / "SST-2" / f"seed{s}.json").is_file() for s in (0, 1)} == {True}
    assert not (out / "seeds" / "RTE").exists()  # its data was checked before any fine-tuning

    rte.write_text(good)
    second = evaluate(**kwargs)
    assert second["failed"] == {} and set(second["tasks"]) == {"SST-2", "RTE", "SQuAD2.0"}
    assert second["run_id"] != first["run_id"]
    ran = {t: {s["run_id"] for s in r["seeds"]} for t, r in second["tasks"].items()}
    assert ran == {"SST-2": {first["run_id"]}, "SQuAD2.0": {first["run_id"]},
                   "RTE": {second["run_id"]}}
    assert second["tasks"]["SST-2"] == first["tasks"]["SST-2"]  # reused, not recomputed

    # provenance: every data file read, hashed independently; the resolved recipe; code version
    read = [glue / t / f"{s}.tsv" for t in ("SST-2", "RTE") for s in ("train", "dev")]
    read += [tiny["squad"] / "train-v2.0.json", tiny["squad"] / "dev-v2.0.json"]
    assert second["data_files"] == {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
                                    for p in read}
    assert second["recipe"]["num_seeds"] == 2 and second["recipe"]["max_seq_len"] == 32
    assert second["code_version"].startswith(("git:", "package:"))


SMALL = {"epochs": 1, "max_train_examples": 24, "max_eval_examples": 12, "max_seq_len": 32,
         "num_threads": 1}


def test_overlapping_scans_evaluate_a_checkpoint_once(tiny, prefect_harness, monkeypatch):
    """Scan A is paused inside the fine-tuning of step 10 (holding its lease); scan B and a
    direct evaluate of the same checkpoint leave it alone; A then finishes it, once."""
    import threading

    import evaluation.evaluation_unit as er  # where a unit calls the fine-tuning
    import flows.evaluate as ev
    from flows.evaluate_new_checkpoints import evaluate_new_checkpoints

    root = tiny["root"] / "overlap"
    run = _make_run(root, tiny["export"], [10])
    with open(run / "metrics.jsonl", "a") as f:  # the trainer was killed mid-line
        f.write('{"step": 25, "loss": 0.4')
    inside, go = threading.Event(), threading.Event()
    real = er.finetune_glue

    def paused(*args, **kwargs):  # fault injection at a chosen step, the real work follows
        inside.set()
        assert go.wait(600)
        return real(*args, **kwargs)

    monkeypatch.setattr(er, "finetune_glue", paused)
    kwargs = dict(runs=str(run.parent), glue_dir=str(tiny["glue"]), tasks="SST-2", seeds=1,
                  recipe=SMALL)
    outcome = {}
    scan_a = threading.Thread(target=lambda: outcome.update(a=evaluate_new_checkpoints(**kwargs)))
    scan_a.start()
    try:
        assert inside.wait(600)
        step = run / "checkpoints" / "step_00000010"
        b = evaluate_new_checkpoints(**kwargs)
        assert b["evaluated"] == [] and list(b["in_progress"]) == [str(step)]
        assert f"pid {os.getpid()}" in b["in_progress"][str(step)]
        direct = ev.evaluate(checkpoint=str(step), glue_dir=str(tiny["glue"]), tasks="SST-2",
                             seeds=1, recipe=SMALL)  # out defaults to RUN/eval/step_N
        assert direct["status"] == "in_progress"
        assert direct["out"] == str(run.resolve() / "eval" / "step_00000010")
    finally:
        go.set()
        scan_a.join(600)
    assert outcome["a"]["evaluated"] == [str(step)] and outcome["a"]["in_progress"] == {}
    results = report.read_results(run / "eval" / "step_00000010")
    assert {s["run_id"] for s in results["tasks"]["SST-2"]["seeds"]} == {results["run_id"]}
    cut = results["metrics_jsonl_skipped"]  # the cut line is counted, the curve still drawn
    assert cut["skipped"] == 1 and cut["rows"][0]["line"] == 25
    assert "1 unreadable line skipped" in (run / "eval" / "step_00000010" / "report.html").read_text()
    assert not (run / "eval" / "step_00000010" / "lease.json").exists()
    assert evaluate_new_checkpoints(**kwargs) == {"evaluated": [], "in_progress": {},
                                                  "skipped": {}}


def test_lease_of_a_finished_flow_run_is_taken_over(tiny, prefect_harness):
    """A lease whose holder's Prefect flow run is final (its process crashed without releasing,
    here: a fresh heartbeat and a live pid, so only the API can tell) does not block."""
    from prefect import flow
    from prefect.runtime import flow_run

    from common.lease import Lease
    from flows.evaluate import evaluate

    @flow
    def finished() -> str:
        return flow_run.get_id()

    out = tiny["root"] / "taken"
    Lease(out / "lease.json", flow_run_id=finished()).acquire()
    res = evaluate(checkpoint=str(tiny["export"]), out=str(out), glue_dir=str(tiny["glue"]),
                   tasks="SST-2", seeds=1, recipe=SMALL)
    assert "status" not in res and list(res["tasks"]) == ["SST-2"]
    assert not (out / "lease.json").exists()


def test_parallel_workers_give_the_same_results(tiny, prefect_harness):
    """(task, seed) units in two spawned worker processes == one after another in-process."""
    from flows.evaluate import evaluate

    common = dict(checkpoint=str(tiny["export"]), glue_dir=str(tiny["glue"]), tasks="SST-2,STS-B",
                  seeds=2, recipe=SMALL)
    one = evaluate(out=str(tiny["root"] / "w1"), workers=1, **common)
    two = evaluate(out=str(tiny["root"] / "w2"), workers=2, **common)
    for task in ("SST-2", "STS-B"):
        assert [s["metrics"] for s in one["tasks"][task]["seeds"]] == \
               [s["metrics"] for s in two["tasks"][task]["seeds"]]
        for seed in (0, 1):
            rel = f"predictions/{task}/seed{seed}.jsonl"
            assert read_predictions(tiny["root"] / "w1" / rel) == \
                read_predictions(tiny["root"] / "w2" / rel)
