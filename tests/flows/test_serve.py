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

from electra.distributed import free_port
from pipelines import schema
from synthetic import prose
from tests.electra._corpus import write_tiny_corpus
from tests.electra.finetune.glue_files import write_keyword_sst2

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(ROOT / ".venv/bin/prefect")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """serve.sh up (server, deployments, worker); yields (env, log path); Ctrl-C at the end."""
    tmp = tmp_path_factory.mktemp("serve")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect_home"), "PREFECT_PORT": str(port),
           "PREFECT_API_URL": f"http://127.0.0.1:{port}/api", "ELECTRA_WORK_POOL": "electra-test"}
    log_path = tmp / "serve.log"
    log = open(log_path, "w")
    serve = subprocess.Popen(["bash", "infra/serve.sh"], cwd=ROOT, env=env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 300
        while "serving deployments" not in log_path.read_text():
            assert serve.poll() is None, log_path.read_text()[-3000:]
            assert time.time() < deadline, "make serve did not come up"
            time.sleep(1)
        yield env, log_path
    finally:
        os.killpg(serve.pid, signal.SIGINT)  # Ctrl-C: the script stops the worker and the server
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
        log.close()


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


# Runs in a subprocess against the served API: sets the evaluate deployment's parameters (what a
# user does in prefect.yaml or the UI), or waits for its event-triggered flow runs.
CLIENT = r"""
import json, sys, time
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter
from prefect.client.schemas.sorting import FlowRunSort
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
    else:  # wait until the first triggered run is final, then report every run of the deployment
        deadline = time.time() + arg["timeout"]
        flt = DeploymentFilter(id={"any_": [dep.id]})
        while time.time() < deadline:
            runs = c.read_flow_runs(deployment_filter=flt, limit=50, sort=FlowRunSort.ID_DESC)
            if runs and all(r.state and r.state.is_final() for r in runs):
                break
            time.sleep(2)
        runs = c.read_flow_runs(deployment_filter=flt, limit=50, sort=FlowRunSort.ID_DESC)
        print(json.dumps([{"state": r.state.type.value if r.state else None,
                           "parameters": r.parameters} for r in runs]))
"""


def _client(env, cmd: str, arg: dict) -> object:
    p = subprocess.run([sys.executable, "-c", CLIENT, cmd, json.dumps(arg)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=arg.get("timeout", 60) + 60)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_committed_checkpoint_triggers_one_evaluation(served, tmp_path):
    env, _ = served
    glue = tmp_path / "glue"
    write_keyword_sst2(glue, n_train=24, n_dev=12)
    deployment = _client(env, "configure", {
        "glue_dir": str(glue), "tasks": "SST-2", "seeds": 1,
        "recipe": {"epochs": 1, "batch_size": 8, "max_seq_len": 32, "num_threads": 1}})
    assert deployment["limit"] == 1 and deployment["strategy"] == "ENQUEUE"  # queue, never overlap
    corpus = write_tiny_corpus(tmp_path / "corpus")
    run_dir = tmp_path / "runs" / "r1"
    train = subprocess.run(
        [sys.executable, "electra/train.py", "--config", "electra/configs/tiny.json",
         "--data", str(corpus), "--out", str(run_dir), "--max-steps", "2", "--save-every", "2",
         "--micro-batch", "4", "--set", "train.global_batch_size=4", "--set", "train.eval_every=0",
         "--set", "data.seq_len=32", "--set", "model.max_position_embeddings=64"],
        cwd=ROOT, env={**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    step = run_dir / "checkpoints" / "step_00000002"
    assert (step / "meta.json").is_file()
    runs = _client(env, "wait", {"timeout": 420})
    assert len(runs) == 1, runs  # one event, one evaluation
    assert runs[0]["state"] == "COMPLETED", runs
    assert runs[0]["parameters"]["checkpoint"] == str(step.resolve())
    results = json.loads((run_dir / "eval" / "step_00000002" / "results.json").read_text())
    assert results["step"] == 2 and list(results["tasks"]) == ["SST-2"] and not results["failed"]
    assert not (run_dir / "eval" / "step_00000002" / "lease.json").exists()  # released
