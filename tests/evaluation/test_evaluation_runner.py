"""The evaluation job and runner without Prefect: loading rules, default folders, and the phases
driven by plain Python (the flow tests in tests/flows drive the same phases through Prefect)."""
from __future__ import annotations

import json
import shutil

import pytest

from common.config import ConfigError
from electra.checkpoint import eval_handoff as handoff
from electra.checkpoint import run_layout as layout
from evaluation import eval_layout, report
from evaluation.evaluation_job import DEFAULT_TASKS, EvaluationJob
from evaluation.evaluation_runner import EvaluationConflict, EvaluationRunner, Unit, run_unit
from evaluation.glue_tasks import GlueDataError

from .glue_files import write_keyword_sst2
from .tiny_model import tiny_export, train_tokenizer

SMALL = {"epochs": 1, "max_train_examples": 16, "max_eval_examples": 8, "max_seq_len": 32,
         "num_threads": 1}


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("runner")
    return tiny_export(root / "hf", tokenizer_dir=train_tokenizer(root / "tok"))


def _run_dir(root, export, steps, *, pinned=()):
    run = root / "run"
    (run / "config.json").parent.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"train": {"keep_last": 1}}))
    for step in steps:
        d = layout.step_dir(run, step)
        shutil.copytree(export, d / "hf")
        if step in pinned:
            handoff.pin(d)
        (d / "meta.json").write_text(json.dumps({"step": step}))
    return run


def _task_folders(glue, *tasks):
    """Present train and dev files (contents are the runner's to read: the job checks presence)."""
    for task in tasks:
        (glue / task).mkdir(parents=True, exist_ok=True)
        for name in ("train.tsv", "dev.tsv"):
            (glue / task / name).write_text("")


def test_job_defaults_and_one_line_errors(tmp_path):
    glue = tmp_path / "glue"
    glue.mkdir()
    with pytest.raises(ConfigError, match=r"^\$ELECTRA_GLUE_DIR=.* lacks CoLA, MRPC, STS-B, RTE"):
        EvaluationJob.load(checkpoint=str(tmp_path), env={"ELECTRA_GLUE_DIR": str(glue)})
    _task_folders(glue, *DEFAULT_TASKS)
    with pytest.raises(ConfigError, match=r"lacks SST-2 .*--tasks CoLA"):
        EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), tasks="CoLA,SST-2", env={})
    _task_folders(glue, "SST-2")
    job = EvaluationJob.load(checkpoint=str(tmp_path), env={"ELECTRA_GLUE_DIR": str(glue)})
    assert job.glue_dir == str(glue) and [s.name for s in job.task_specs] == list(DEFAULT_TASKS)
    assert EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), tasks="sst2,SST-2",
                              env={}).task_specs[0].name == "SST-2"
    # threads change the speed, not the numbers: not part of the request
    a = EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), recipe={"num_threads": 1}, env={})
    assert a.request == EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), env={}).request
    with pytest.raises(ConfigError, match=r"^nothing to evaluate"):
        EvaluationJob.load(checkpoint=str(tmp_path), env={})
    with pytest.raises(ConfigError, match=r"^\$ELECTRA_GLUE_DIR=.*nowhere: no such folder"):
        EvaluationJob.load(checkpoint=str(tmp_path), env={"ELECTRA_GLUE_DIR": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match=r"^--glue-dir=.*nowhere: no such folder"):
        EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(tmp_path / "nowhere"), env={})
    with pytest.raises(GlueDataError, match="unknown GLUE task 'SST-3'"):
        EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), tasks="SST-3", env={})
    with pytest.raises(ConfigError, match="workers=0"):
        EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), workers=0, env={})
    with pytest.raises(ConfigError, match="unknown"):
        EvaluationJob.load(checkpoint=str(tmp_path), glue_dir=str(glue), colour="red", env={})
    with pytest.raises(ConfigError, match="no such file or folder"):
        EvaluationJob.load(checkpoint=str(tmp_path / "missing"), glue_dir=str(glue), env={})


def test_default_out_folders(tmp_path, export):
    run = _run_dir(tmp_path, export, [10, 20])
    assert eval_layout.default_out(run) == run / "eval" / "step_00000020"
    assert eval_layout.resolve_target(run) == layout.step_dir(run, 20)
    assert eval_layout.default_out(layout.step_dir(run, 10)) == run / "eval" / "step_00000010"
    shutil.copytree(export, run / "hf")
    assert eval_layout.default_out(run / "hf") == run / "eval" / "hf"
    assert eval_layout.default_out(export) == export / "eval"


def test_phases_in_plain_python_release_the_pin_and_prune(tmp_path, export):
    """check → claim → resolve → plan → run_unit → publish, no Prefect: the pinned checkpoint
    is claimed, evaluated, released, and the run pruned to keep_last (1)."""
    glue = tmp_path / "glue"
    write_keyword_sst2(glue, n_train=16, n_dev=8)
    rte = "index\tsentence1\tsentence2\tlabel\n"
    (glue / "RTE").mkdir()
    (glue / "RTE" / "train.tsv").write_text(rte + "0\ta b\tc\tentailment\n1\tcut row\n")
    (glue / "RTE" / "dev.tsv").write_text(rte + "0\ta b\tc\tentailment\n")
    run = _run_dir(tmp_path, export, [10, 20], pinned=(10, 20))
    job = EvaluationJob.load(checkpoint=str(layout.step_dir(run, 10)), glue_dir=str(glue),
                             tasks="SST-2,RTE", seeds=2, recipe=SMALL, env={})
    runner = EvaluationRunner(job)
    assert runner.check() is None and runner.claim() is None
    assert handoff.is_claimed(layout.step_dir(run, 10))
    runner.resolve()
    assert runner.plan() == [Unit("SST-2")]  # RTE's train file is malformed: its task fails alone
    assert list(runner.failed) == ["RTE"] and "train.tsv:3: malformed row" in runner.failed["RTE"]
    results = runner.publish({Unit("SST-2"): run_unit(runner.context, Unit("SST-2"))})
    assert list(results["tasks"]) == ["SST-2"] and list(results["failed"]) == ["RTE"]
    assert report.read_results(job.out_dir) == json.loads(json.dumps(results))
    assert [d.name for d in layout.step_dirs(run)] == ["step_00000020"]  # released, pruned
    assert handoff.pending(run) == [layout.step_dir(run, 20)]

    # the same request on another checkpoint folder is a fresh evaluation; another request in
    # this folder is refused; a checkpoint pruned without a record is recorded once
    with pytest.raises(EvaluationConflict, match="another request"):
        EvaluationRunner(EvaluationJob.load(checkpoint=str(layout.step_dir(run, 10)), out=str(job.out_dir),
                                            glue_dir=str(glue), tasks="SST-2", seeds=3, env={})).check()
    gone = EvaluationRunner(EvaluationJob.load(checkpoint=str(layout.step_dir(run, 30)),
                                               glue_dir=str(glue), tasks="SST-2", env={})).run()
    assert gone["status"] == "skipped" and handoff.skipped(run) == {30: gone["reason"]}


def test_policy_skip_before_the_claim_is_returned_not_evaluated(tmp_path, export):
    glue = tmp_path / "glue"
    write_keyword_sst2(glue, n_train=16, n_dev=8)
    run = _run_dir(tmp_path, export, [10, 20, 30, 40], pinned=(10, 20, 30, 40))
    job = EvaluationJob.load(checkpoint=str(layout.step_dir(run, 10)), glue_dir=str(glue),
                             tasks="SST-2", seeds=1, recipe=SMALL, env={})
    runner = EvaluationRunner(job)
    assert runner.check() is None  # still on disk and pinned...
    assert handoff.apply_policy(run, max_pending=3, keep_every=0, save_every=10) == [10]
    skipped = runner.claim()  # ...but skipped by the trainer before the evaluation claimed it
    assert skipped["status"] == "skipped" and "eval_max_pending=3" in skipped["reason"]
    assert not job.out_dir.exists()


def test_checkpoint_pruned_during_its_export_is_recorded(tmp_path, export, monkeypatch):
    """A run without pins prunes the checkpoint while the evaluation exports it (fault injected
    inside the export): the evaluation returns the skip and records it, it does not fail."""
    import evaluation.evaluation_runner as er

    glue = tmp_path / "glue"
    write_keyword_sst2(glue, n_train=16, n_dev=8)
    run = _run_dir(tmp_path, export, [10, 20])
    step = layout.step_dir(run, 10)

    def pruned_mid_export(path, *, export_dir):
        shutil.rmtree(step)  # what the trainer's keep_last does at that moment
        raise OSError(f"{step}/mp_rank_00_model_states.pt: no such file")

    monkeypatch.setattr(er, "resolve_checkpoint", pruned_mid_export)
    outcome = EvaluationRunner(EvaluationJob.load(checkpoint=str(step), glue_dir=str(glue),
                                                  tasks="SST-2", recipe=SMALL, env={})).run()
    assert outcome["status"] == "skipped" and "not pinned" in outcome["reason"]
    assert handoff.skipped(run) == {10: outcome["reason"]}
    assert not eval_layout.is_finished(run / "eval" / "step_00000010")


def test_hand_off_only_from_the_runs_own_folder_and_leaked_pins_are_released(tmp_path, export):
    """A run folder is resolved to its newest checkpoint once (a later commit does not move the
    evaluation); an evaluation into another --out leaves the trainer's pin alone; a pin left by
    a run that died between results.json and the release is released by the next check."""
    glue = tmp_path / "glue"
    write_keyword_sst2(glue, n_train=16, n_dev=8)
    run = _run_dir(tmp_path, export, [10], pinned=(10,))
    job = EvaluationJob.load(checkpoint=str(run), glue_dir=str(glue), tasks="SST-2", seeds=1,
                             recipe=SMALL, env={})
    shutil.copytree(export, layout.step_dir(run, 20) / "hf")
    (layout.step_dir(run, 20) / "meta.json").write_text(json.dumps({"step": 20}))
    assert job.target == layout.step_dir(run, 10) and job.out_dir == run / "eval" / "step_00000010"

    elsewhere = EvaluationJob.load(checkpoint=str(layout.step_dir(run, 10)), out=str(tmp_path / "x"),
                                   glue_dir=str(glue), tasks="SST-2", seeds=1, recipe=SMALL, env={})
    assert EvaluationRunner(elsewhere).run()["tasks"]["SST-2"]
    assert handoff.pending(run) == [layout.step_dir(run, 10)] and not handoff.is_claimed(layout.step_dir(run, 10))

    EvaluationRunner(job).run()  # its own folder: claimed, evaluated, released, pruned to keep_last
    assert [d.name for d in layout.step_dirs(run)] == ["step_00000020"]
    handoff.pin(layout.step_dir(run, 20))  # as if a run evaluated 20 and died before releasing
    report.write_results(run / "eval" / "step_00000020", {
        **report.read_results(job.out_dir), "checkpoint": str(layout.step_dir(run, 20))})
    again = EvaluationJob.load(checkpoint=str(layout.step_dir(run, 20)), glue_dir=str(glue),
                               tasks="SST-2", seeds=1, recipe=SMALL, env={})
    assert EvaluationRunner(again).check() is not None and handoff.pending(run) == []
