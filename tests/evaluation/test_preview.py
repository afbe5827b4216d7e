"""What an evaluation says before it starts (``evaluation.preview``, ``sources.peek_checkpoint``),
the whole-evaluation ETA (``evaluation.eta``), and the missing-task line's suggestion."""
from __future__ import annotations

import json
import shutil

import pytest
from safetensors import safe_open

from common.config import ConfigError
from electra.checkpoint import run_layout as layout
from evaluation import eta
from evaluation.evaluation_job import EvaluationJob
from evaluation.preview import preview
from evaluation.recipe import FinetuneRecipe
from evaluation.sources import CheckpointError, peek_checkpoint
from evaluation.tasks import get_task

from .test_evaluation_runner import _task_folders
from .tiny_model import tiny_export, train_tokenizer


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("preview")
    return tiny_export(root / "hf", tokenizer_dir=train_tokenizer(root / "tok"))


def test_the_missing_task_line_suggests_the_tasks_the_folder_has(tmp_path):
    glue = tmp_path / "glue"
    _task_folders(glue, "SST-2", "QNLI")
    (glue / "cola").mkdir()  # a misspelt folder is not a task
    load = lambda **kw: EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), env={}, **kw)  # noqa: E731
    with pytest.raises(ConfigError) as default:
        load()
    assert str(default.value).startswith(f"--glue-dir={glue} lacks CoLA, MRPC, STS-B, RTE (the default --tasks; ")
    assert str(default.value).endswith("; it holds QNLI, SST-2: evaluate them with --tasks QNLI,SST-2, or point "
                                       "it at the official GLUE download (CoLA/, MRPC/, ...)")
    with pytest.raises(ConfigError, match=r"lacks RTE \(.*RTE: task folder missing.*; evaluate the tasks it has "
                                          r"with --tasks SST-2$"):
        load(tasks="SST-2,RTE")  # asked tasks present: those
    empty = tmp_path / "empty"
    (empty / "sst2").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"lacks CoLA \(.*\); it holds no GLUE task \(folders: sst2/\); point "
                                          r"it at the official GLUE download"):
        EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(empty), tasks="CoLA", env={})


def test_peek_reads_shapes_without_loading_and_refuses_what_resolve_would(tmp_path, export):
    disc = export / "discriminator"
    with safe_open(str(disc / "model.safetensors"), framework="np") as f:
        numel = sum(int(f.get_tensor(k).size) for k in f.keys())
    peek = peek_checkpoint(export)
    assert (peek.shape.layers, peek.shape.hidden, peek.shape.positions, peek.shape.parameters) == (2, 32, 128, numel)
    assert peek.step is None and peek.exported
    run = tmp_path / "run"
    step = layout.step_dir(run, 30)
    shutil.copytree(export, step / "hf")
    (step / "meta.json").write_text(json.dumps({"step": 30}))
    at_run = peek_checkpoint(run)
    assert (at_run.checkpoint, at_run.step, at_run.run_dir, at_run.shape) == (step.resolve(), 30, run.resolve(),
                                                                              peek.shape)
    gone = peek_checkpoint(layout.step_dir(run, 40))  # the runner records why it was not evaluated
    assert (gone.step, gone.shape) == (40, None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        peek_checkpoint(tmp_path / "empty")
    (tmp_path / "bad" / "discriminator").mkdir(parents=True)
    (tmp_path / "bad" / "discriminator" / "config.json").write_text("{")
    (tmp_path / "bad" / "discriminator" / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="config.json: unreadable model config"):
        peek_checkpoint(tmp_path / "bad")


def test_preview_line_and_recipe_checks(tmp_path, export):
    glue, squad = tmp_path / "glue", tmp_path / "squad"
    _task_folders(glue, "CoLA", "RTE")
    squad.mkdir()
    job = EvaluationJob.load(checkpoint=str(export), glue_dir=str(glue), tasks="CoLA,RTE", squad_dir=str(squad),
                             seeds=4, recipe={"lr": 1e-3}, env={})
    plan = preview(job)
    assert plan.recipe.num_seeds == 4 and plan.recipe.lr == 1e-3 and plan.recipe.size == "small"
    assert plan.line().startswith(f"{export.resolve()} (2 layers, hidden 32, 0.0")
    assert plan.line().endswith(" M parameters: the small recipe): 2 tasks × 4 seeds + SQuAD1.1 (CoLA, RTE, SQuAD1.1) "
                                f"-> {export.resolve() / 'eval'}; the ETA follows the first fine-tuning steps")
    bad = EvaluationJob.load(checkpoint=str(export), glue_dir=str(glue), tasks="CoLA", recipe={"batch_size": 0},
                             env={})
    with pytest.raises(ConfigError, match=r"^--batch-size 0: finetune recipe: batch_size and num_seeds > 0"):
        preview(bad)


def test_planned_steps_are_the_loops(monkeypatch):
    recipe = FinetuneRecipe(batch_size=4)
    assert eta.planned_steps(get_task("CoLA"), 10, recipe) == 3 * 3  # 3 epochs of ceil(10 / 4)
    assert eta.planned_steps(get_task("MRPC"), 10, recipe) == 3 * 5  # both orders: 20 rows
    assert eta.planned_steps(get_task("RTE"), 10, FinetuneRecipe(batch_size=4, max_train_examples=4,
                                                                 epochs=1.5)) == 2


def test_the_whole_evaluations_eta_from_the_pace_so_far(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(eta.time, "perf_counter", lambda: now[0])
    clock = eta.clock_for({"CoLA": 10, "RTE": 30}, [0, 1], "SQuAD1.1")
    clock.begin("CoLA seed 0")
    now[0] = 5.0  # 5 steps in 5 s: 75 steps to go
    assert clock.advance("CoLA seed 0", 5) == "all 2 tasks × 2 seeds: ETA ~75 s + SQuAD1.1"
    assert clock.advance("SQuAD1.1 seed 0", 3) is None  # not planned
    now[0] = 20.0  # 10 steps in 20 s: 70 steps at 2 s
    assert clock.finish("CoLA seed 0", 10) == "1 of 4 (2 tasks × 2 seeds) done, ETA ~2.3 min for the rest + SQuAD1.1"
    clock.skip("CoLA seed 1")  # saved by an earlier run
    now[0] = 60.0  # 40 steps in 60 s: 30 to go
    assert clock.finish("RTE seed 0", 30) == "3 of 4 (2 tasks × 2 seeds) done, ETA ~45 s for the rest + SQuAD1.1"
    assert clock.finish("RTE seed 1", 30) is None  # the last one
    assert eta.clock_for({}, [0], "SQuAD1.1") is None  # SQuAD alone: its steps are unknown before tokenising
    assert [eta.duration(s) for s in (0.2, 45, 750, 7500, 400000)] == ["1 s", "45 s", "12 min", "2.1 h", "4.6 days"]
