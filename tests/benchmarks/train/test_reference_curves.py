"""benchmarks/train/reference_curves.check: the band comparison on hand-made curves."""
from __future__ import annotations

from benchmarks.train import reference_curves as rc


def _asset() -> dict:
    train = [{"step": s, "gen_loss": 8.0 - s / 10, "disc_loss": 0.6, "disc_acc": 0.8, "disc_auc": 0.7}
             for s in (10, 20, 30)]
    return {"train": train, "band": {"metrics": {m: {"band": 0.05} for m in rc.METRICS}}}


def _points(**shift) -> list[dict]:
    return [{**p, **{m: p[m] + d for m, d in shift.items()}} for p in _asset()["train"]]


def test_within_band_and_each_kind_of_violation():
    asset = _asset()
    assert rc.check(_points(gen_loss=0.049, disc_auc=-0.049), asset) == []
    bad = rc.check(_points(disc_auc=-0.06), asset)
    assert len(bad) == 3 and all("disc_auc" in b and "band 0.0500" in b for b in bad)
    assert rc.check(_points()[:1] + [{**_points()[0], "step": 40}], asset) == [
        "step 40: not in the reference (it has [10, 20, 30])"]
    assert rc.check([{**_points()[0], "disc_auc": None}], asset) == ["step 10 disc_auc: None vs reference 0.7"]


def test_a_run_without_logged_steps_is_not_within_band():
    assert rc.check([], _asset()) == ["no logged train steps to compare (is the run's metrics.jsonl empty?)"]
