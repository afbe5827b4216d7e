"""electra.distributed.batch_geometry: every preset's global batch split over 1, 2, 8 and 64 ranks as shipped, and the
unsplittable batch's error offering only ways out that the checks after it accept (new run and resume)."""
from __future__ import annotations

import json

import pytest

from common.config import ConfigError
from electra.distributed.batch_geometry import batch_geometry
from electra.config import load_config, preset_names
from electra.distributed.deepspeed_glue import deepspeed_config

RANKS = (1, 2, 8, 64)


def brute_force(global_batch: int, micro: int, world: int):
    """Every (micro, accum) with micro <= the preset's micro and micro x world x accum = global."""
    return [(m, global_batch // (m * world)) for m in range(1, micro + 1)
            if global_batch % (m * world) == 0]


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("world", RANKS)
def test_every_preset_splits_or_says_why_in_one_line(preset, world):
    cfg = load_config(preset)
    g, m = cfg.train.global_batch_size, cfg.train.micro_batch_size
    splits = brute_force(g, m, world)
    if not splits:  # tiny (16) and mini (32) have fewer examples per step than 64 ranks
        assert g < world or g % world
        with pytest.raises(ConfigError) as err:
            batch_geometry(g, m, world)
        message = str(err.value)
        assert "\n" not in message and f"{g}" in message and f"{world} ranks" in message
        return
    geo = batch_geometry(g, m, world)
    assert (geo.micro_batch, geo.accum) == max(splits)  # the largest micro batch that divides
    assert geo.micro_batch * world * geo.accum == g
    ds = deepspeed_config(load_config(preset, ["train.precision=fp32"] if preset in ("tiny", "mini") else []), world)
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == \
        (g, geo.micro_batch, geo.accum)


def test_the_gpu_presets_start_on_64_ranks_as_shipped():
    for preset in ("small", "base", "large"):
        cfg = load_config(preset)
        geo = batch_geometry(cfg.train.global_batch_size, cfg.train.micro_batch_size, 64)
        assert geo.global_batch == cfg.train.global_batch_size  # the paper's batch, never changed


def test_micro_batch_lowered_to_the_largest_divisor_and_logged(caplog):
    caplog.set_level("INFO")
    geo = batch_geometry(96, 32, 4)  # 24 per rank: 32 does not fit, 24 does
    assert (geo.micro_batch, geo.accum) == (24, 1)
    geo = batch_geometry(80, 16, 2)  # 40 per rank: 16 does not divide, 10 does
    assert (geo.micro_batch, geo.accum) == (10, 4)
    assert "train.micro_batch_size 16 -> 10" in caplog.text
    assert batch_geometry(16, 16, 2).micro_batch == 8  # the tiny preset on 2 ranks


# ---------------------------------------------------------------- the unsplittable batch: only ways out that work
def _suggested(message: str) -> tuple[list[int], list[int]]:
    """(world sizes, global batches) the message offers, read from its text."""
    import re

    worlds = re.search(r"(?:run|resume) on ([\d, or]+) ranks", message)
    batches = re.search(r"set train\.global_batch_size(?: to |=)([\d, or]+?)(?: \(| and |$)", message)
    numbers = lambda m: [int(x) for x in re.findall(r"\d+", m.group(1))] if m else []  # noqa: E731
    return numbers(worlds), numbers(batches)


def _starts(global_batch: int, micro: int, world: int) -> None:
    """What the run's start-up checks of the split: the geometry, then every rank's sample order."""
    from electra.data.sample_order import StreamPlan

    geo = batch_geometry(global_batch, micro, world)
    for rank in (0, world - 1):
        StreamPlan((), 32, global_batch, geo.micro_batch, rank=rank, world_size=world)


@pytest.mark.parametrize("global_batch,world", [(2048, 48), (128, 3), (16, 64), (96, 7), (2048, 3000)])
def test_a_new_run_is_offered_the_nearest_world_sizes_and_batches_that_start(global_batch, world):
    with pytest.raises(ConfigError) as err:
        batch_geometry(global_batch, 32, world)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"train.global_batch_size {global_batch} cannot be split "
                                                      f"over {world} ranks")
    worlds, batches = _suggested(message)
    divisors = [d for d in range(1, global_batch + 1) if global_batch % d == 0]
    assert worlds == [d for d in (max(d for d in divisors if d < world), min((d for d in divisors if d > world),
                                                                               default=None)) if d]
    assert batches == [b for b in ((global_batch // world) * world, (global_batch // world + 1) * world) if b]
    for w in worlds:
        _starts(global_batch, 32, w)
    for b in batches:
        _starts(b, 32, world)
    if (global_batch, world) == (2048, 48):  # the case of the issue, word for word
        assert message == ("train.global_batch_size 2048 cannot be split over 48 ranks (not a multiple); run on 32 "
                           "or 64 ranks (divisors of 2048) or set train.global_batch_size to 2016 or 2064 "
                           "(multiples of 48)")


def _checkpoint(tmp_path, *, world: int, stage: int, global_batch: int):
    from tests.electra.checkpoint.test_universal import fake_checkpoint

    step_dir = fake_checkpoint(tmp_path, world=world, stage=stage)
    meta = json.loads((step_dir / "meta.json").read_text())
    meta.pop("sha256", None)  # edited by hand: unsealed (read unchecked, as before seals)
    (step_dir / "meta.json").write_text(json.dumps({**meta, "global_batch_size": global_batch}))
    return step_dir


def _resume_accepts(step_dir, global_batch: int, world: int, stage: int) -> None:
    """The checks a resume meets after the split, as ``electra.run.plan.resolve`` runs them: the
    checkpoint's global batch kept, then ``plan_resume`` (world size, stage, precision)."""
    from electra.checkpoint import run_layout as layout
    from electra.checkpoint.universal import plan_resume

    assert layout.CheckpointMeta.read(step_dir).global_batch_size == global_batch
    plan_resume(step_dir, world_size=world, zero_stage=stage, precision="fp32")


@pytest.mark.parametrize("stage", [1, 3])
@pytest.mark.parametrize("asked", [2048, 2040])  # the checkpoint's batch, and another
def test_a_resume_is_offered_only_world_sizes_that_resume(tmp_path, stage, asked):
    """A run of 2,048 per step saved on 64 ranks, resumed on 48: no global batch but the checkpoint's
    is offered (a resume keeps it), and with ZeRO-3 no world size but the checkpoint's."""
    from electra.checkpoint.universal import ResumeRefused, resume_split

    step_dir = _checkpoint(tmp_path, world=64, stage=stage, global_batch=2048)
    resuming = resume_split(step_dir, zero_stage=stage)
    with pytest.raises(ConfigError) as err:
        batch_geometry(asked, 32, 48, resuming=resuming)
    message = str(err.value)
    assert "\n" not in message and "a resume keeps its checkpoint's global batch" in message
    worlds, batches = _suggested(message)
    assert batches == ([] if asked == 2048 else [2048])
    assert worlds == ([64] if stage == 3 else [32, 64])
    for w in worlds:
        _starts(2048, 32, w)
        batch_geometry(2048, 32, w, resuming=resuming)
        _resume_accepts(step_dir, 2048, w, stage)
    if stage == 3:  # why no other is offered: plan_resume refuses it
        with pytest.raises(ResumeRefused):
            _resume_accepts(step_dir, 2048, 32, stage)


@pytest.mark.parametrize("examples,world,tail", [
    (5, 1, "the largest global batch it fills is 5: train with --global-batch-size 5, or on more text"),
    (5, 2, "the largest global batch it fills on 2 ranks is 4: train with --global-batch-size 4, or on more text"),
    (1, 2, ", and has fewer than the 2 ranks: train on more text, or on 1 rank with --global-batch-size 1"),
])
def test_a_corpus_smaller_than_one_batch_names_the_largest_it_fills(examples, world, tail):
    from electra.distributed.batch_geometry import unfillable

    line = unfillable(examples, 16, world, "--data c")
    assert line.startswith(f"--data c: {examples} train example") and line.endswith(tail)
    assert "cannot fill one global batch of 16 (train.global_batch_size)" in line
