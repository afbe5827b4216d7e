"""The three CLIs succeed on a busy machine: build-corpus, training and evaluation, one after the
other as a user chains them, each beside four CPU-burning processes on two cores.

The failure this guards against: on a 2-core machine with a load of ~5, the build-corpus CLI
gave up after Prefect's default 20 s start-up timeout for its temporary server. No
``PREFECT_API_URL`` here, so each Prefect-driven CLI starts its own private server
(``flows.runtime``) under that load. Everything (burners and CLIs, and their children) is pinned
to two cores, so the load is the same on a bigger machine. Inputs are small: the point is the
start-up under load, not the work.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._procs import run_in_group

REPO = Path(__file__).resolve().parents[2]
BURNERS = 4
CORES = sorted(os.sched_getaffinity(0))[:2]


def _two_cores() -> None:
    os.sched_setaffinity(0, CORES)


def _env(tmp: Path) -> dict[str, str]:
    # No Prefect server, no settings the test session made (its analytics switch included): the
    # CLIs as a user with a fresh environment runs them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(HOME=str(tmp / "home"), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    (tmp / "home").mkdir(exist_ok=True)
    return env


def _cli(args: list[str], env: dict[str, str]) -> str:
    """Run one CLI pinned to the two cores (``taskset``: its children inherit it); its output."""
    cmd = ["taskset", "-c", ",".join(map(str, CORES)), sys.executable, *args]
    done = run_in_group(cmd, cwd=str(REPO), env=env, timeout=900)
    assert done.returncode == 0, f"{args[:2]} exited {done.returncode}:\n{done.output[-4000:]}"
    return done.output


@pytest.mark.slow
def test_build_train_evaluate_beside_four_cpu_burners(tmp_path):
    from synthetic import prose
    from tests.evaluation.glue_files import write_keyword_sst2

    raw = prose.write_corpus(tmp_path / "raw", num_docs=60, seed=3, bad_files=False)
    glue = tmp_path / "glue"
    write_keyword_sst2(glue, n_train=16, n_dev=8)
    corpus, run, env = tmp_path / "corpus", tmp_path / "run", _env(tmp_path)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_two_cores)
               for _ in range(BURNERS)]
    try:
        out = _cli(["-m", "cli.build_corpus", "--source", str(raw), "--out", str(corpus), "--vocab-size", "400",
                    "--seq-len", "32", "--validation-fraction", "0.1"], env)
        assert "Timed out" not in out and "telemetry" not in out.lower()
        manifest = json.loads((corpus / "manifest.json").read_text())
        assert manifest["splits"]["train"]["num_examples"] > 0

        _cli(["electra/train.py", "--config", "tiny", "--data", str(corpus), "--out", str(run),
              "--max-steps", "4", "--save-every", "4", "--micro-batch", "4",
              *[arg for kv in ("data.seq_len=32", "model.max_position_embeddings=64", "data.num_workers=0",
                               "optimizer.warmup_steps=1", "optimizer.total_steps=4",
                               "train.global_batch_size=4", "train.eval_every=1000")
                for arg in ("--set", kv)]], env)
        assert (run / "checkpoints" / "step_00000004" / "meta.json").exists()

        out = _cli(["-m", "cli.evaluate", "--checkpoint", str(run), "--glue-dir", str(glue), "--tasks", "SST-2",
                    "--seeds", "1", "--epochs", "1", "--max-train-examples", "16", "--max-eval-examples", "8",
                    "--max-seq-len", "32", "--threads", "1"], env)
        assert "| SST-2 | accuracy |" in out
        results = json.loads((run / "eval" / "step_00000004" / "results.json").read_text())
        assert results["step"] == 4 and list(results["tasks"]) == ["SST-2"]
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait()
