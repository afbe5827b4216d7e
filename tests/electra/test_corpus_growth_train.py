"""Training that follows its corpus, end to end (``electra.data.corpus_growth``): a corpus grows at
chosen steps (``tests/electra/_train_growing.py`` installs the next manifest after a step, as an
append committing then would), and the sample log, whose records name each example's generation,
shows what every epoch trained on.

Corpus: g0 35 train examples (4 steps of 8 per epoch), g1 14 more (49: 6 steps), g2 11 more (60:
7 steps). The reference grows by g1 after step 4 (the end of epoch 0) and by g2 after step 6 (mid
epoch 1), so epoch 0 = steps 1-4 on g0, epoch 1 = steps 5-10 on g0+g1, epoch 2 = steps 11-17 on
all three.
"""
from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from electra.checkpoint import run_layout as layout
from electra.checkpoint.hf_export import export_checkpoint
from electra.data.sample_log import sample_log_path
from tests.electra._growing_corpus import install, stage_manifest, write_growing_corpus
from tests.electra.test_train import COMMON, run, trajectory

pytestmark = pytest.mark.slow  # seven trainer launches

GENERATIONS = [dict(train_shards=(9, 7, 5, 11, 3), validation_shards=(6, 5)),
               dict(train_shards=(6, 8), validation_shards=(4,), seed=9),
               dict(train_shards=(5, 6), validation_shards=(3,), seed=11)]
FLAGS = ["--micro-batch", "4", "--save-every", "2", "--seed", "7", "--set", "train.global_batch_size=8",
         "--set", "train.eval_every=0", "--set", "data.log_samples=true", "--set", "data.num_workers=0",
         "--set", "train.keep_last=20"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return write_growing_corpus(tmp_path_factory.mktemp("growing") / "corpus", GENERATIONS)


def fresh_corpus(template, where: Path) -> Path:
    """A copy of the growing corpus at its first stage (each run grows its own)."""
    shutil.copytree(template, where)
    install(where, 0)
    return where


def train(corpus, out, max_steps, *extra, grow=()):
    hooks = [x for step, stage in grow for x in ("--grow", str(step), str(corpus), str(stage))]
    cmd = [sys.executable, "tests/electra/_train_growing.py", *hooks, *COMMON, "--data", str(corpus),
           "--out", str(out), "--max-steps", str(max_steps), *FLAGS, *extra]
    p = run(cmd, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


def samples(out, rank=0):
    """step -> [(generation, uid, ordinal), ...] of one rank (the sample log, read as its contract)."""
    records = map(json.loads, sample_log_path(out, rank).read_text().splitlines())
    return {r["step"]: [(g, *k) for g, k in zip(r["generation"], r["keys"], strict=True)] for r in records}


@pytest.fixture(scope="module")
def reference(template, tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    corpus = fresh_corpus(template, root / "corpus")
    log = train(corpus, root / "run", 12, grow=[(4, 1), (6, 2)])
    return root / "run", corpus, log


def test_a_new_generation_joins_from_the_next_epoch_on(reference):
    out, corpus, log = reference
    got = samples(out)
    assert sorted(got) == list(range(1, 13)) and all(len(v) == 8 for v in got.values())
    per_epoch = [Counter(g for s in steps for g, *_ in got[s]) for steps in (range(1, 5), range(5, 11), range(11, 13))]
    assert set(per_epoch[0]) == {"g0"}  # grown after step 4: nothing of g1 before
    # epoch 1 trains 48 of the 49 examples of g0 + g1 (one left over), nothing of g2 (appended mid-epoch)
    assert set(per_epoch[1]) == {"g0", "g1"} and per_epoch[1]["g1"] in (13, 14) and sum(per_epoch[1].values()) == 48
    assert set(per_epoch[2]) <= {"g0", "g1", "g2"}
    assert len({k for s in range(5, 11) for k in got[s]}) == 48  # each example of the epoch once
    joins = [line for line in log.splitlines() if "joins at epoch" in line]
    assert len(joins) == 2 and "generation g1 joins at epoch 1 (14 train examples)" in joins[0]
    assert "generation g2 joins at epoch 2 (11 train examples)" in joins[1] and str(corpus) in joins[1]
    meta = layout.CheckpointMeta.read(layout.step_dir(out, 12))
    assert meta.generations["epochs"] == [{"epoch": 0, "generations": [["g0"]]},
                                          {"epoch": 1, "generations": [["g0", "g1"]]},
                                          {"epoch": 2, "generations": [["g0", "g1", "g2"]]}]


def test_resume_after_the_corpus_grew_again_replays_the_same_batches(template, reference, tmp_path):
    corpus = fresh_corpus(template, tmp_path / "corpus")
    out = tmp_path / "run"
    train(corpus, out, 6, grow=[(4, 1)])  # stops mid epoch 1 (g0 + g1), then the corpus grows again
    assert layout.CheckpointMeta.read(layout.find_latest(out)).generations["started"] == 1
    install(corpus, 2)
    log = train(corpus, out, 12)
    assert "resumed from" in log and "generation g2 joins at epoch 2" in log
    assert samples(out) == samples(reference[0])  # epoch 1 replayed on g0 + g1, epoch 2 on all three
    assert trajectory(out) == trajectory(reference[0])  # and the same losses, bitwise


def test_follow_appends_false_pins_the_generations_the_run_started_with(template, tmp_path):
    corpus = fresh_corpus(template, tmp_path / "corpus")
    out = tmp_path / "run"
    log = train(corpus, out, 6, "--set", "data.follow_appends=false", grow=[(4, 1)])
    got = samples(out)
    assert {g for v in got.values() for g, *_ in v} == {"g0"} and "joins at epoch" not in log
    meta = layout.CheckpointMeta.read(layout.find_latest(out))
    assert meta.generations["epochs"] == [{"epoch": 0, "generations": [["g0"]]}] and not meta.generations["follow"]
    assert meta.data_position == {"epoch": 1, "step": 2}  # still 4 steps per epoch (35 examples)


def test_lineage_and_exports_name_the_generations_trained_on(reference, tmp_path):
    out, corpus, _ = reference
    lineage = json.loads((out / layout.LINEAGE).read_text())
    assert lineage == {"corpora": [{"location": str(corpus), "generations": ["g0", "g1", "g2"]}]}
    for model in ("discriminator", "generator"):
        assert json.loads((out / "hf" / model / "config.json").read_text())["electra_lineage"] == lineage
    early = export_checkpoint(layout.step_dir(out, 4), tmp_path / "hf4")  # trained on g0 only by then
    config = json.loads((early / "discriminator" / "config.json").read_text())
    assert config["electra_lineage"]["corpora"] == [{"location": str(corpus), "generations": ["g0"]}]


def test_a_resume_on_a_corpus_whose_recorded_generation_changed_is_one_line(template, reference, tmp_path):
    corpus = fresh_corpus(template, tmp_path / "corpus")
    out = tmp_path / "run"
    shutil.copytree(reference[0], out)  # the reference's checkpoints (epochs on g0..g2) ...
    for step in layout.step_dirs(out):
        meta = json.loads((step / layout.META).read_text())
        meta.pop("sha256", None)  # edited by hand: unsealed (read unchecked, as before seals)
        meta["generations"]["locations"] = [str(corpus)]
        (step / layout.META).write_text(json.dumps(meta))
    install(corpus, 2)
    d = json.loads((corpus / "manifest.json").read_text())
    d.pop("sha256", None)  # a hand edit: unsealed (a republish would seal it anew)
    d["shards"][-1]["sha256"] = "0" * 64  # ... but g2 was rewritten since
    (corpus / "manifest.json").write_text(json.dumps(d))
    p = run([sys.executable, "electra/train.py", *COMMON, "--data", str(corpus), "--out", str(out),
             "--max-steps", "14", *FLAGS], timeout=200)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    (line,) = [x for x in p.stderr.splitlines() if "error:" in x]
    assert "the corpus's shards differ from the checkpoint's" in line and str(corpus) in line


def test_two_ranks_follow_the_corpus_as_one(template, reference, tmp_path):
    """Rank 0 reads the manifest at each epoch start and the other rank takes its answer: the
    global batches (rank 0's examples, then rank 1's) are the one-rank reference's."""
    from common.ports import free_port

    corpus = fresh_corpus(template, tmp_path / "corpus")
    out = tmp_path / "run"
    hooks = [x for step, stage in ((4, 1), (6, 2)) for x in ("--grow", str(step), str(corpus), str(stage))]
    cmd = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", "2", "--master_port", str(free_port()),
           "tests/electra/_train_growing.py", *hooks, *COMMON, "--data", str(corpus), "--out", str(out),
           "--max-steps", "12", *FLAGS, "--micro-batch", "2"]
    p = run(cmd, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ranks = [samples(out, r) for r in (0, 1)]
    assert {s: ranks[0][s] + ranks[1][s] for s in ranks[0]} == samples(reference[0])
    assert (p.stdout + p.stderr).count("generation g1 joins at epoch 1") == 1  # said by rank 0 alone



def test_a_generation_that_vanished_mid_run_stops_the_run_in_one_line(template, tmp_path):
    corpus = fresh_corpus(template, tmp_path / "corpus")
    damaged = json.loads(stage_manifest(corpus, 1).read_text())  # g1 appended, but g0's first shard rewritten
    damaged.pop("sha256", None)  # a hand edit: unsealed (a republish would seal it anew)
    damaged["shards"][0]["sha256"] = "0" * 64
    stage_manifest(corpus, 9).write_text(json.dumps(damaged))
    cmd = [sys.executable, "tests/electra/_train_growing.py", "--grow", "4", str(corpus), "9", *COMMON,
           "--data", str(corpus), "--out", str(tmp_path / "run"), "--max-steps", "6", *FLAGS]
    p = run(cmd, timeout=200)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    (line,) = [x for x in p.stderr.splitlines() if "error:" in x]
    assert f"--data {corpus}: the shards of generation(s) ['g0'] changed" in line
    assert layout.CheckpointMeta.read(layout.find_latest(tmp_path / "run")).step == 4  # epoch 0 kept
