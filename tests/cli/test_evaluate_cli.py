"""``electra-evaluate`` and ``electra-evaluate-new`` as a newcomer meets them: the first line says
what will run before the Prefect server starts, and a GLUE folder lacking the asked tasks is one
line naming the ``--tasks`` it can do.

"Before the server" is shown without timing anything: ``PREFECT_API_URL`` names a port nobody
listens on, so ``flows.runtime`` refuses at its first health check with one ``RuntimeUnavailable``
line. What the CLI printed before that line came before any server; what it refuses with exit 2
instead of that line was checked before the server. No model is loaded, no server started: each
command takes the seconds its imports take. (The ETA lines of a real fine-tune, and a rerun that
answers without a server: ``tests/flows/test_evaluate_once.py``.)
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.ports import free_port
from tests.evaluation.glue_files import write_keyword_sst2
from tests.evaluation.tiny_model import tiny_export, train_tokenizer
from tests.flows._eval_data import make_run

REPO = Path(__file__).resolve().parents[2]
SHARED_SST2 = Path("/work/shared/data/glue/SST-2")  # the real GLUE files, where this machine has them


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("eval_cli")
    return tiny_export(root / "hf", tokenizer_dir=train_tokenizer(root / "tok"))


@pytest.fixture
def sst2_only(tmp_path) -> Path:
    """A GLUE folder holding SST-2 alone: the real files' first rows where the shared data is,
    else rows in the same format."""
    glue = tmp_path / "glue"
    if SHARED_SST2.is_dir():
        (glue / "SST-2").mkdir(parents=True)
        for split in ("train", "dev"):
            lines = (SHARED_SST2 / f"{split}.tsv").read_text().splitlines()[:21]
            (glue / "SST-2" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    else:
        write_keyword_sst2(glue, n_train=20, n_dev=10)
    return glue


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, against a Prefect server that is not there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_API_URL=f"http://127.0.0.1:{free_port()}/api", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def _server_refused(line: str, prog: str) -> bool:
    return line.startswith(f"{prog}: error: the Prefect server at PREFECT_API_URL=http://127.0.0.1:") \
        and "does not answer" in line


def test_the_first_line_says_what_will_run_before_the_server_starts(tmp_path, export, sst2_only):
    """A run folder: its newest checkpoint's step, the model's size and recipe, tasks × seeds and
    the folder, on stderr before the server's refusal; nothing written; no traceback."""
    run = make_run(tmp_path, export, [10, 20])
    p = _cli("cli.evaluate", "--checkpoint", str(run), "--glue-dir", str(sst2_only), "--tasks", "SST-2",
             "--seeds", "3")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 2, p.stderr[-3000:]
    out = run.resolve() / "eval" / "step_00000020"
    assert lines[0] == (f"evaluate: step 20 of run {run.resolve()} (2 layers, hidden 32, 0.024 M parameters: "
                        f"the small recipe): 1 task × 3 seeds (SST-2) -> {out}; the ETA follows the first "
                        "fine-tuning steps"), lines[0]
    assert _server_refused(lines[1], "evaluate"), lines[1]
    assert p.stdout == "" and "Traceback" not in p.stderr and not out.exists()


def test_the_scan_says_what_waits_before_the_server_starts(tmp_path, export, sst2_only):
    run = make_run(tmp_path, export, [10, 20])
    p = _cli("cli.evaluate_new_checkpoints", "--runs", str(run.parent), "--glue-dir", str(sst2_only),
             "--tasks", "SST-2", "--seeds", "2")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 2, p.stderr[-3000:]
    assert lines[0] == (f"evaluate-new-checkpoints: 2 checkpoint(s) without results under {run.parent} "
                        "(run1/step_00000020, run1/step_00000010; newest first in each run), each on "
                        "1 task × 2 seeds (SST-2)"), lines[0]
    assert _server_refused(lines[1], "evaluate-new-checkpoints"), lines[1]


@pytest.mark.parametrize("module,prog", [("cli.evaluate", "evaluate"),
                                         ("cli.evaluate_new_checkpoints", "evaluate-new-checkpoints")])
def test_a_glue_folder_holding_sst2_alone_suggests_tasks_sst2(tmp_path, export, sst2_only, module, prog):
    """The default tasks against a folder holding SST-2 only: one line naming the missing tasks,
    what the folder holds, ``--tasks SST-2`` and the official download; exit 2 before the
    server (the dead server's line never comes) and before any model loads (nothing written)."""
    where = ["--checkpoint", str(export), "--out", str(tmp_path / "out")] if prog == "evaluate" else \
        ["--runs", str(make_run(tmp_path, export, [10]).parent)]
    p = _cli(module, *where, "--glue-dir", str(sst2_only))
    assert p.returncode == 2 and p.stdout == "", p.stderr[-3000:]
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    line = p.stderr.strip()
    assert line.startswith(f"{prog}: error: --glue-dir={sst2_only} lacks CoLA, MRPC, STS-B, RTE (the default "
                           f"--tasks; {sst2_only / 'CoLA'}: task folder missing"), line
    assert line.endswith("; it holds SST-2: evaluate it with --tasks SST-2, or point it at the official GLUE "
                         "download (CoLA/, MRPC/, ...)"), line
    assert not (tmp_path / "out").exists()


def test_a_path_that_is_no_checkpoint_and_a_bad_recipe_value_are_refused_before_the_server(tmp_path, export,
                                                                                          sst2_only):
    """Both used to fail only inside the flow, after the server had started."""
    folder = tmp_path / "not_a_model"
    folder.mkdir()
    p = _cli("cli.evaluate", "--checkpoint", str(folder), "--glue-dir", str(sst2_only), "--tasks", "SST-2")
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"evaluate: error: {folder}: not a checkpoint; expected a discriminator folder (config.json + "
        "model.safetensors), an HF export (discriminator/), a step dir (meta.json) or a run dir "
        "(checkpoints/step_*/ or hf/discriminator/)"], p.stderr[-3000:]
    p = _cli("cli.evaluate", "--checkpoint", str(export), "--glue-dir", str(sst2_only), "--tasks", "SST-2",
             "--lr", "0", "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "evaluate: error: --lr 0.0: finetune recipe: lr > 0, layerwise_lr_decay in (0, 1]"], p.stderr[-3000:]
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_gone_before_its_evaluation_is_status_4_without_a_server(tmp_path, export, sst2_only):
    """The skip is recorded and said once (not also as a log line), with no server started."""
    run = make_run(tmp_path, export, [10])
    gone = run / "checkpoints" / "step_00000030"
    p = _cli("cli.evaluate", "--checkpoint", str(gone), "--glue-dir", str(sst2_only), "--tasks", "SST-2")
    assert p.returncode == 4 and p.stderr.strip().splitlines() == [
        f"{gone.resolve()} was not evaluated: checkpoint deleted before its evaluation (not pinned: run the "
        "trainer with train.keep_until_evaluated=true to keep it until evaluated)"], p.stderr[-3000:]
    assert '"step": 30' in (run / "eval" / "skipped.jsonl").read_text()
