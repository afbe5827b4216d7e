"""One evaluation per (checkpoint, request, task set): reruns, merges, conflicts, gone checkpoints,
and what the command line prints — through the real ``evaluate`` flow under a test Prefect."""
from __future__ import annotations

import json
import shutil

import pytest

from electra.checkpoint import eval_handoff as handoff
from evaluation import report
from tests.evaluation.glue_files import write_task
from tests.flows._eval_data import make_run

SMALL = {"epochs": 1, "max_train_examples": 16, "max_eval_examples": 8, "max_seq_len": 32,
         "num_threads": 1}


def _seed_files(out):
    return {p.relative_to(out): p.stat().st_mtime_ns for p in sorted((out / "seeds").rglob("*.json"))}


def test_rerun_returns_existing_results_and_more_tasks_merge(tiny, prefect_harness):
    from flows.evaluate import evaluate

    glue = tiny["root"] / "glue_once"
    shutil.copytree(tiny["glue"], glue)
    write_task(glue, "RTE", n_train=12, n_dev=6)
    out = tiny["root"] / "once"
    common = dict(checkpoint=str(tiny["export"]), out=str(out), glue_dir=str(glue), seeds=1,
                  recipe=SMALL)
    first = evaluate(tasks="SST-2", **common)
    stamp = (out / "results.json").stat().st_mtime_ns
    again = evaluate(tasks="SST-2", **common)  # same checkpoint, request and data: nothing redone
    assert again == first and (out / "results.json").stat().st_mtime_ns == stamp

    merged = evaluate(tasks="RTE", **common)  # one more task: added beside the first
    assert set(merged["tasks"]) == {"SST-2", "RTE"}
    assert merged["tasks"]["SST-2"] == first["tasks"]["SST-2"]
    assert {s["run_id"] for s in merged["tasks"]["RTE"]["seeds"]} == {merged["run_id"]}
    assert report.read_results(out) == json.loads(json.dumps(merged))
    seeds = _seed_files(out)
    both = evaluate(tasks="SST-2,RTE", **common)  # covered by the merged results
    assert both == merged and _seed_files(out) == seeds

    rows = (glue / "RTE" / "dev.tsv").read_text().splitlines()
    (glue / "RTE" / "dev.tsv").write_text("\n".join(rows[:-1]) + "\n")  # the data changed
    changed = evaluate(tasks="SST-2,RTE", **common)
    assert changed["run_id"] != merged["run_id"]
    assert changed["tasks"]["RTE"]["num_eval"] == {"dev": len(rows) - 2}
    assert changed["tasks"]["SST-2"] == merged["tasks"]["SST-2"]  # its seeds were reused


def test_another_request_in_the_same_folder_is_refused(tiny, prefect_harness, capsys):
    from cli.evaluate import main
    from flows.evaluate import EvaluationConflict, evaluate

    out = tiny["root"] / "conflict"
    common = dict(checkpoint=str(tiny["export"]), out=str(out), glue_dir=str(tiny["glue"]),
                  tasks="SST-2", seeds=1)
    evaluate(recipe=SMALL, **common)
    stamp = (out / "results.json").stat().st_mtime_ns
    with pytest.raises(EvaluationConflict, match="another request"):
        evaluate(recipe={**SMALL, "lr": 1e-3}, **common)
    code = main(["--checkpoint", str(tiny["export"]), "--out", str(out), "--glue-dir",
                 str(tiny["glue"]), "--tasks", "SST-2", "--seeds", "2", "--epochs", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"evaluate: error: {out} holds results of another request") and "\n" not in err
    assert (out / "results.json").stat().st_mtime_ns == stamp


def test_gone_checkpoint_is_recorded_not_a_crash(tiny, prefect_harness):
    """A queued evaluation whose checkpoint was pruned (no pin) records the skip; one skipped by
    the trainer's policy returns the policy's reason."""
    from flows.evaluate import evaluate

    run = make_run(tiny["root"] / "gone", tiny["export"], [10, 20])
    shutil.rmtree(run / "checkpoints" / "step_00000010")
    kwargs = dict(glue_dir=str(tiny["glue"]), tasks="SST-2", seeds=1, recipe=SMALL)
    outcome = evaluate(checkpoint=str(run / "checkpoints" / "step_00000010"), **kwargs)
    assert outcome["status"] == "skipped" and "not pinned" in outcome["reason"]
    assert handoff.skipped(run) == {10: outcome["reason"]}
    again = evaluate(checkpoint=str(run / "checkpoints" / "step_00000010"), **kwargs)
    assert again == outcome and len(handoff.skipped_path(run).read_text().splitlines()) == 1

    handoff.record_skip(run, 30, "evaluation slower than checkpointing")
    policy = evaluate(checkpoint=str(run / "checkpoints" / "step_00000030"), **kwargs)
    assert policy["reason"] == "evaluation slower than checkpointing"
    assert not (run / "eval" / "step_00000030").exists()


def test_cli_run_dir_prints_progress_and_one_summary(tiny, prefect_harness):
    """``python -m cli.evaluate --checkpoint RUN`` as a user runs it, without --out: the newest
    checkpoint into RUN/eval/step_N; first what will run (the plan line, before the server),
    then progress per task and seed on stderr while it runs, each finished seed with the whole
    evaluation's ETA; the table once on stdout, with the report's path. The same command again
    answers from the results without a server (its Prefect URL now names a dead port)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from prefect.settings import PREFECT_API_URL

    from common.ports import free_port

    run = make_run(tiny["root"] / "cli", tiny["export"], [10, 20])
    repo = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-m", "cli.evaluate", "--checkpoint", str(run), "--glue-dir", str(tiny["glue"]),
            "--tasks", "SST-2", "--seeds", "2", "--epochs", "1", "--max-train-examples", "16",
            "--max-eval-examples", "8", "--max-seq-len", "32", "--threads", "1"]
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(repo)}
    p = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = run.resolve() / "eval" / "step_00000020"
    assert report.read_results(out)["step"] == 20
    what = f"evaluate: step 20 of run {run.resolve()} (2 layers, hidden 32, 0.0"
    first = p.stderr.splitlines()[0]
    assert first.startswith(what) and first.endswith(
        f"the small recipe): 1 task × 2 seeds (SST-2) -> {out}; the ETA follows the first fine-tuning steps"), first
    assert "SST-2 seed 0: " in p.stderr and "SST-2 seed 1: done" in p.stderr, p.stderr[-3000:]
    # seed 0's end: how much is done and the ETA for the rest; the last seed's end has no ETA
    assert re.search(r"SST-2 seed 0: done, 1 steps in \d+s; 1 of 2 \(1 task × 2 seeds\) done, "
                     r"ETA ~\d+(\.\d+)? (s|min|h) for the rest\n", p.stderr), p.stderr[-3000:]
    assert re.search(r"SST-2 seed 1: done, 1 steps in \d+s\n", p.stderr), p.stderr[-3000:]
    assert p.stdout.count("| SST-2 | accuracy |") == 1 and "| SST-2 | accuracy |" not in p.stderr
    assert p.stdout.rstrip().endswith(f"report: {out / 'report.html'}")
    again = subprocess.run(argv, cwd=repo, env={**env, "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == p.stdout, again.stderr[-3000:]
    assert again.stderr.strip().splitlines() == [
        first.split(" -> ")[0] + f": already evaluated in {out}"], again.stderr


def test_every_evaluation_takes_a_slot_of_one_global_limit(tiny, prefect_harness):
    """The limit the event runs, scans and CLI runs share exists after an evaluation ran through
    it, with 1 slot, and the slot was given back."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    from flows.evaluate import EVAL_LIMIT, evaluate

    evaluate(checkpoint=str(tiny["export"]), out=str(tiny["root"] / "slot"), glue_dir=str(tiny["glue"]),
             tasks="SST-2", seeds=1, recipe=SMALL)
    r = httpx.post(f"{PREFECT_API_URL.value()}/v2/concurrency_limits/filter", json={})
    r.raise_for_status()
    limits = {x["name"]: (x["limit"], x["active_slots"]) for x in r.json()}
    assert limits[EVAL_LIMIT] == (1, 0)


def test_not_a_model_and_a_missing_runs_folder_are_one_line(tiny, prefect_harness, capsys):
    from cli.evaluate import main
    from evaluation.pending import pending_checkpoints

    folder = tiny["root"] / "not_a_model"
    folder.mkdir()
    code = main(["--checkpoint", str(folder), "--glue-dir", str(tiny["glue"]), "--tasks", "SST-2",
                 "--out", str(tiny["root"] / "nm")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"evaluate: error: {folder}: not a checkpoint"), err[-3:]
    with pytest.raises(FileNotFoundError, match="runs folder .*nowhere: no such folder; set --runs"):
        pending_checkpoints(tiny["root"] / "nowhere")


def test_the_scan_of_a_missing_runs_folder_fails_with_the_cause_as_its_state_message(tiny, prefect_harness):
    """What a deployment's user sees (``--watch``, the UI): the flow run ends Failed, its state
    message is the one line naming the folder and what to set, and the run's own logs (sent to
    the server) hold it too; no traceback is needed to find the cause."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter
    from prefect.logging.handlers import APILogWorker

    from flows.evaluate_new_checkpoints import evaluate_new_checkpoints

    missing = tiny["root"] / "no_runs_here"
    state = evaluate_new_checkpoints(runs=str(missing), glue_dir=str(tiny["glue"]), tasks="SST-2",
                                     return_state=True)
    cause = (f"runs folder {missing}: no such folder; set --runs (the CLI) or the deployment's runs "
             "parameter (make serve: $ELECTRA_RUNS_DIR) to the folder holding your run directories")
    assert state.is_failed() and state.message == cause
    with get_client(sync_client=True) as client:
        run_id = state.state_details.flow_run_id
        assert client.read_flow_run(run_id).state.message == cause
        APILogWorker.drain_all(timeout=30)  # the run's log lines reach the server
        logs = client.read_logs(log_filter=LogFilter(flow_run_id={"any_": [run_id]}), limit=200, offset=0)
    assert any(log.message == cause for log in logs), [log.message for log in logs]
