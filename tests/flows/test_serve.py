"""`make serve` for real: a Prefect server, the deployments of prefect.yaml and a process worker;
then `prefect deployment run build-corpus/build-corpus` builds a corpus through them."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from pipelines import schema, synthetic

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_make_serve_runs_the_build_corpus_deployment(tmp_path):
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect_home"), "PREFECT_PORT": str(port),
           "PREFECT_API_URL": f"http://127.0.0.1:{port}/api", "ELECTRA_WORK_POOL": "electra-test"}
    log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen(["bash", "infra/serve.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.time() + 300
        while "serving deployments" not in (tmp_path / "serve.log").read_text():
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.time() < deadline, "make serve did not come up"
            time.sleep(1)
        text = (tmp_path / "serve.log").read_text()
        for name in ("build-corpus/build-corpus", "pretrain/pretrain", "evaluate/evaluate",
                     "evaluate-new-checkpoints/evaluate-new-checkpoints"):
            assert f"deployed {name}" in text
        raw = synthetic.write_corpus(tmp_path / "raw", num_docs=120, seed=2)
        out = tmp_path / "corpus"
        run = subprocess.run([str(ROOT / ".venv/bin/prefect"), "deployment", "run", "build-corpus/build-corpus",
                              "--param", f"source={raw}", "--param", f"out={out}", "--param", "vocab_size=800",
                              "--watch"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0 and "Completed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
        manifest = schema.Manifest.load(out)
        assert manifest.splits["train"].num_examples > 0
        assert all((out / s.path).is_file() for s in manifest.shards)
    finally:
        os.killpg(serve.pid, signal.SIGINT)  # Ctrl-C: the script stops the worker and the server
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
        log.close()
