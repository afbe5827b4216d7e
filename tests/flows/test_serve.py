"""`make serve` for real: a Prefect server, the deployments of prefect.yaml and a process worker.

Two things run through them: `prefect deployment run build-corpus/build-corpus` builds a corpus,
and a trainer run with ``PREFECT_API_URL`` set commits a checkpoint whose
``electra.checkpoint.committed`` event triggers the ``evaluate`` deployment exactly once.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.ports import free_port
from pipelines import schema
from synthetic import prose
from tests.electra._corpus import write_tiny_corpus
from tests.evaluation.glue_files import write_keyword_sst2

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(ROOT / ".venv/bin/prefect")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """serve.sh up (server, deployments, worker); yields (env, log path); Ctrl-C at the end."""
    tmp = tmp_path_factory.mktemp("serve")
    port = free_port()
    glue = tmp / "glue"  # the evaluate deployments read it from ELECTRA_GLUE_DIR
    write_keyword_sst2(glue, n_train=24, n_dev=12)
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect_home"), "PREFECT_PORT": str(port),
           "PREFECT_API_URL": f"http://127.0.0.1:{port}/api", "ELECTRA_WORK_POOL": "electra-test",
           "ELECTRA_GLUE_DIR": str(glue), "ELECTRA_RUNS_DIR": str(tmp / "runs"),  # made by serve.sh
           "PREFECT_WORKER_QUERY_SECONDS": "2"}  # queued runs picked up sooner (default 10 s)
    env.pop("ELECTRA_SQUAD_DIR", None)
    log_path = tmp / "serve.log"
    log = open(log_path, "w")
    # SIGINT at its default in the script, as in a terminal: a test run started in the background
    # (``cmd &``, nohup) ignores it and passes that on, and bash cannot trap a signal ignored on
    # entry, so Ctrl-C below would be lost and the teardown wait its full minute.
    serve = subprocess.Popen(["bash", "infra/serve.sh"], cwd=ROOT, env=env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 300
        while "serving deployments" not in log_path.read_text():
            assert serve.poll() is None, log_path.read_text()[-3000:]
            assert time.time() < deadline, "make serve did not come up"
            time.sleep(1)
        SERVE["process"] = serve
        yield env, log_path
    finally:
        if serve.poll() is None:  # the last test stops it with SIGTERM; else Ctrl-C here
            os.killpg(serve.pid, signal.SIGINT)  # the script stops the worker, then the server
            try:
                serve.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)
        log.close()


SERVE: dict = {}  # the fixture's serve.sh process, for the test that stops it


@pytest.mark.slow
def test_make_serve_runs_the_build_corpus_deployment(served, tmp_path):
    env, log_path = served
    text = log_path.read_text()
    for name in ("build-corpus/build-corpus", "pretrain/pretrain", "evaluate/evaluate",
                 "evaluate-new-checkpoints/evaluate-new-checkpoints"):
        assert f"deployed {name}" in text
    raw = prose.write_corpus(tmp_path / "raw", num_docs=120, seed=2)
    out = tmp_path / "corpus"
    run = subprocess.run([PREFECT, "deployment", "run", "build-corpus/build-corpus",
                          "--param", f"source={raw}", "--param", f"out={out}", "--param", "vocab_size=800",
                          "--watch"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "Completed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    manifest = schema.Manifest.load(out)
    assert manifest.splits["train"].num_examples > 0
    assert all((out / s.path).is_file() for s in manifest.shards)


SCAN = "evaluate-new-checkpoints/evaluate-new-checkpoints"
# A flow run's state, its logs and its deployment's parameters, as the server holds them.
SCAN_STATE = r"""
import json, sys, uuid
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter
with get_client(sync_client=True) as c:
    run = c.read_flow_run(uuid.UUID(sys.argv[1]))
    dep = c.read_deployment(run.deployment_id)
    # limit and offset given: the 3.8.8 client (and `prefect flow-run logs`) sends nulls its server rejects
    logs = c.read_logs(log_filter=LogFilter(flow_run_id={"any_": [run.id]}), limit=200, offset=0)
    print(json.dumps({"parameters": dep.parameters, "state": run.state.name, "message": run.state.message,
                      "logs": [log.message for log in logs]}))
"""


@pytest.mark.slow
def test_the_hourly_scan_runs_as_shipped_and_a_missing_runs_folder_says_why(served, tmp_path):
    """As shipped, the scan's runs folder is ELECTRA_RUNS_DIR, absolute and created by make serve:
    a run with no parameters completes. A runs folder that does not exist fails the run with the
    cause and what to set as the run's state message (the UI, ``prefect flow-run inspect``) and in
    the run's logs on the server, not only in the worker's terminal.
    (``--watch`` of prefect 3.8.8 streams the run's events and stops at its final state.)"""
    env, _ = served
    runs = env["ELECTRA_RUNS_DIR"]
    assert Path(runs).is_dir()
    shipped = subprocess.run([PREFECT, "deployment", "run", SCAN, "--watch"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
    assert shipped.returncode == 0 and "Completed" in shipped.stdout, shipped.stdout[-3000:] + shipped.stderr[-3000:]
    nowhere = tmp_path / "nowhere"
    failed = subprocess.run([PREFECT, "deployment", "run", SCAN, "--param", f"runs={nowhere}", "--watch"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
    cause = f"runs folder {nowhere}: no such folder; set --runs (the CLI) or the deployment's runs parameter"
    run_id = failed.stdout.split("UUID:")[1].split()[0]
    p = subprocess.run([sys.executable, "-c", SCAN_STATE, run_id], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    state = json.loads(p.stdout.strip().splitlines()[-1])
    assert state["parameters"] == {"runs": runs}  # the shipped parameter: absolute, no template left
    assert state["state"] == "Failed" and state["message"].startswith(cause), state
    assert any(line.startswith(cause) for line in state["logs"]), state["logs"]


def test_make_serve_refuses_to_start_without_the_glue_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELECTRA_", "PREFECT_"))}
    for value in (None, str(tmp_path / "nowhere")):
        if value is not None:
            env["ELECTRA_GLUE_DIR"] = value
        p = subprocess.run(["bash", "infra/serve.sh"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2, p.stdout + p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("make serve: ELECTRA_GLUE_DIR=")


# Runs in a subprocess against the served API: sets the evaluate deployment's parameters (what a
# user does in prefect.yaml or the UI), waits for flow runs to finish, counts task runs.
CLIENT = r"""
import json, sys, time
from datetime import datetime, timezone
import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter
from prefect.client.schemas.sorting import FlowRunSort
from prefect.settings import PREFECT_API_URL
cmd, arg = sys.argv[1], json.loads(sys.argv[2])
with get_client(sync_client=True) as c:
    dep = c.read_deployment_by_name("evaluate/evaluate")
    if cmd == "configure":
        from prefect.client.schemas.actions import DeploymentUpdate
        c.update_deployment(dep.id, DeploymentUpdate(parameters={**dep.parameters, **arg}))
        dep = c.read_deployment_by_name("evaluate/evaluate")
        limit, options = dep.global_concurrency_limit, dep.concurrency_options
        print(json.dumps({"parameters": dep.parameters, "limit": limit.limit if limit else None,
                          "strategy": options.collision_strategy.value if options else None}))
    elif cmd == "wait":  # until at least n evaluate runs exist and every flow run is final
        deadline = time.time() + arg["timeout"]
        flt = DeploymentFilter(id={"any_": [dep.id]})
        while time.time() < deadline:
            mine = c.read_flow_runs(deployment_filter=flt, limit=50, sort=FlowRunSort.ID_DESC)
            now = datetime.now(timezone.utc)  # the hourly scan's future runs are not waited for
            every = [r for r in c.read_flow_runs(limit=200, sort=FlowRunSort.ID_DESC)
                     if not (r.state and r.state.name == "Scheduled" and r.expected_start_time > now)]
            if len(mine) >= arg["n"] and all(r.state and r.state.is_final() for r in mine + every):
                break
            time.sleep(2)
        runs = c.read_flow_runs(deployment_filter=flt, limit=50, sort=FlowRunSort.ID_DESC)
        print(json.dumps([{"state": r.state.type.value if r.state else None,
                           "parameters": r.parameters} for r in runs]))
    else:  # task runs by name; plain REST: the 3.8.8 client sends nulls its server rejects
        r = httpx.post(f"{PREFECT_API_URL.value()}/task_runs/filter",
                       json={"task_runs": {"name": {"any_": [arg["name"]]}}, "limit": 200})
        r.raise_for_status()
        print(json.dumps([{"flow_run_id": t["flow_run_id"], "state": t["state"]["type"]} for t in r.json()]))
"""


def _client(env, cmd: str, arg: dict) -> object:
    p = subprocess.run([sys.executable, "-c", CLIENT, cmd, json.dumps(arg)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=arg.get("timeout", 60) + 60)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_burst_of_commits_and_a_scan_evaluate_each_checkpoint_once(served, tmp_path):
    """Three checkpoints committed in a burst fire three events; a scan started at the same time
    competes for the same checkpoints. Each is fine-tuned exactly once (one SST-2 task run per
    checkpoint over the whole server), every evaluation through the one concurrency limit."""
    env, _ = served
    recipe = {"epochs": 1, "batch_size": 8, "max_seq_len": 32, "num_threads": 1}
    deployment = _client(env, "configure", {"tasks": "SST-2", "seeds": 1, "recipe": recipe})
    assert deployment["limit"] == 1 and deployment["strategy"] == "ENQUEUE"  # queue, never overlap
    assert "glue_dir" not in deployment["parameters"]  # from ELECTRA_GLUE_DIR, as shipped
    corpus = write_tiny_corpus(tmp_path / "corpus")
    runs = tmp_path / "runs"
    run_dir = runs / "r1"
    train = subprocess.run(
        [sys.executable, "electra/train.py", "--config", "electra/configs/tiny.json",
         "--data", str(corpus), "--out", str(run_dir), "--max-steps", "3", "--save-every", "1",
         "--micro-batch", "4", "--set", "train.global_batch_size=4", "--set", "train.eval_every=0",
         "--set", "data.seq_len=32", "--set", "model.max_position_embeddings=64"],
        cwd=ROOT, env={**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    steps = [run_dir / "checkpoints" / f"step_{n:08d}" for n in (1, 2, 3)]
    assert all((s / "meta.json").is_file() for s in steps)
    scan = subprocess.run(
        [PREFECT, "deployment", "run", "evaluate-new-checkpoints/evaluate-new-checkpoints",
         "--param", f"runs={runs}", "--param", "tasks=SST-2", "--param", "seeds=1",
         "--param", f"recipe={json.dumps(recipe)}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert scan.returncode == 0, scan.stdout[-3000:] + scan.stderr[-3000:]
    flow_runs = _client(env, "wait", {"n": 3, "timeout": 540})
    assert len(flow_runs) == 3, flow_runs  # one event, one run, per checkpoint
    assert all(r["state"] == "COMPLETED" for r in flow_runs), flow_runs
    assert sorted(r["parameters"]["checkpoint"] for r in flow_runs) == [str(s.resolve()) for s in steps]
    fine_tuned = _client(env, "task_runs", {"name": "SST-2"})
    assert len(fine_tuned) == 3 and all(t["state"] == "COMPLETED" for t in fine_tuned), fine_tuned
    for step in steps:
        out = run_dir / "eval" / step.name
        results = json.loads((out / "results.json").read_text())
        assert results["step"] == int(step.name[5:]) and list(results["tasks"]) == ["SST-2"]
        seed_runs = {json.loads(p.read_text())["result"]["run_id"] for p in (out / "seeds").rglob("seed*.json")}
        assert seed_runs == {results["run_id"]} and not results["failed"]
        assert not (out / "lease.json").exists()  # released


@pytest.mark.slow
def test_sigterm_stops_make_serve_cleanly_with_status_0(served):
    """SIGTERM (``docker stop``, systemd, ``kill``): the worker stops before the server, so it
    never meets a closed port (it printed a ConnectionRefusedError traceback), and the script
    exits 0 (make printed "Error 143" for a requested stop). Last in the file: it ends the server."""
    _, log_path = served
    serve = SERVE["process"]
    deadline = time.time() + 300  # stopped once the worker runs, as a user stops it
    while "Worker '" not in log_path.read_text() or "started!" not in log_path.read_text():
        assert serve.poll() is None and time.time() < deadline, log_path.read_text()[-3000:]
        time.sleep(1)
    before = len(log_path.read_text())
    os.killpg(serve.pid, signal.SIGTERM)
    assert serve.wait(timeout=60) == 0
    after = log_path.read_text()[before:]
    assert "Traceback" not in after and "ConnectionRefusedError" not in after, after[-3000:]
