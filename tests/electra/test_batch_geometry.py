"""electra.batch_geometry: every preset's global batch split over 1, 2, 8 and 64 ranks as shipped."""
from __future__ import annotations

import pytest

from common.config import ConfigError
from electra.batch_geometry import batch_geometry
from electra.config import load_config, preset_names
from electra.distributed import deepspeed_config

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
