"""Length-bucketed batches, length-sorted prediction in the original order, precision choice."""
from __future__ import annotations

import logging
import math
import re

import numpy as np
import pytest
import torch

from common.config import ConfigError
from electra.config import ModelConfig
from evaluation.heads import FinetuneModel, SequenceHead, SpanHead
from evaluation.loop import epoch_batches, predict, resolve_precision, seed_everything, train
from evaluation.recipe import FinetuneRecipe
from electra.distributed.hardware import cpu_features
from electra.model.networks import ElectraEmbeddings, build_encoder

# lengths with a realistic spread (GLUE-like: many short rows, a long tail)
LENGTHS = [int(v) for v in np.random.default_rng(0).integers(3, 120, size=1001)]


def batches(seed: int, buckets: int, *, lengths=LENGTHS, batch_size: int = 16):
    return epoch_batches(lengths, batch_size=batch_size, buckets=buckets,
                         generator=torch.Generator().manual_seed(seed))


def padding(bs, lengths=LENGTHS) -> int:
    return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in bs)


@pytest.mark.parametrize("buckets", [1, 3, 8, 200])
def test_each_row_once_and_step_count_unchanged(buckets):
    bs = batches(0, buckets)
    rows = torch.cat(bs).tolist()
    assert sorted(rows) == list(range(len(LENGTHS)))
    assert len(bs) == math.ceil(len(LENGTHS) / 16)
    assert sorted(len(b) for b in bs) == [len(LENGTHS) % 16] + [16] * (len(bs) - 1)


def test_one_bucket_is_the_plain_permutation():
    plain = torch.randperm(len(LENGTHS), generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.cat(batches(7, 1)), plain)


def test_buckets_sort_rows_within_chunks_and_cut_padding():
    bs = batches(3, 8)
    # each batch is a slice of one length-sorted chunk: the chunks rebuild from the permutation
    plain = torch.randperm(len(LENGTHS), generator=torch.Generator().manual_seed(3))
    chunks = [set(plain[c: c + 128].tolist()) for c in range(0, len(LENGTHS), 128)]
    for b in bs:
        lens = [LENGTHS[i] for i in b]
        assert lens == sorted(lens)
        assert sum(set(b.tolist()) <= c for c in chunks) == 1
    assert padding(bs) < padding(batches(3, 1)) / 4


def test_bucketed_order_is_seeded():
    same = [torch.cat(batches(5, 8)).tolist() for _ in range(2)]
    assert same[0] == same[1]
    assert torch.cat(batches(6, 8)).tolist() != same[0]
    # the batch order is shuffled: the longest batch is not always last
    last_is_longest = [max(LENGTHS[i] for i in batches(s, 8)[-1]) == max(LENGTHS)
                       for s in range(8)]
    assert not all(last_is_longest)


def test_bad_bucket_count_is_an_error():
    with pytest.raises(ValueError, match="length_buckets 0"):
        batches(0, 0)
    with pytest.raises(ConfigError, match="length_buckets"):
        FinetuneRecipe.from_dict({"length_buckets": 0})
    with pytest.raises(ConfigError, match="precision"):
        FinetuneRecipe.from_dict({"precision": "fp16"})
    assert FinetuneRecipe.from_dict({"length_buckets": 1}).length_buckets == 1
    assert (FinetuneRecipe().precision, FinetuneRecipe().length_buckets) == ("auto", 50)


def test_resolve_precision_here():
    cpu = torch.device("cpu")
    feats = cpu_features()
    assert torch.backends.cpu.get_cpu_capability() in feats
    expected = "bf16" if feats & {"AMX_BF16", "AVX512_BF16"} else "fp32"
    assert resolve_precision(FinetuneRecipe(), cpu) == expected
    assert resolve_precision(FinetuneRecipe(precision="bf16"), cpu) == "bf16"
    assert resolve_precision(FinetuneRecipe(precision="fp32"), cpu) == "fp32"


def _model(head) -> FinetuneModel:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2,
                      intermediate_size=32, max_position_embeddings=64)
    return FinetuneModel(build_encoder(cfg, ElectraEmbeddings.from_config(cfg)), head).eval()


def _rows(n: int = 23):
    rng = np.random.default_rng(1)
    rows = [[2] + rng.integers(5, 60, size=int(k)).tolist() + [3]
            for k in rng.integers(1, 40, size=n)]
    segs = [[0] * (len(r) // 2) + [1] * (len(r) - len(r) // 2) for r in rows]
    return rows, segs


@pytest.mark.parametrize("span", [False, True])
def test_predict_restores_the_original_order(span):
    head = SpanHead(16, answerability=True) if span else SequenceHead(16, 3)
    model, (rows, segs) = _model(head), _rows()
    recipe = FinetuneRecipe(eval_batch_size=5, precision="fp32")
    logits, na = predict(model, rows=rows, segs=segs, recipe=recipe)
    for i, (r, s) in enumerate(zip(rows, segs)):  # row by row: no padding, no sorting
        one, one_na = predict(model, rows=[r], segs=[s], recipe=recipe)
        assert logits[i].shape == one[0].shape
        np.testing.assert_allclose(logits[i], one[0], rtol=1e-4, atol=1e-5)
        if span:
            assert na[i] == pytest.approx(one_na[0], rel=1e-4, abs=1e-5)
    assert (na is None) == (not span)


def test_train_is_seeded_with_buckets_and_reports_precision():
    rows, segs = _rows(40)
    targets = torch.tensor([len(r) % 2 for r in rows])

    def run(seed: int):
        seed_everything(seed)  # dropout, as finetune_glue does per seed
        model = _model(SequenceHead(16, 2)).train()
        stats = train(model, rows=rows, segs=segs, recipe=FinetuneRecipe(
            batch_size=8, lr=1e-3, length_buckets=3, precision="fp32", device="cpu"),
            loss_fn=lambda out, idx, dev: torch.nn.functional.cross_entropy(
                out.logits, targets[idx].to(dev)), epochs=1.5, seed=seed)
        return stats, [p.detach().clone() for p in model.parameters()]

    (a, pa), (b, pb), (c, _) = run(0), run(0), run(1)
    assert (a.steps, a.precision) == (8, "fp32")  # ceil(1.5 * 5) steps, as without buckets
    assert a.losses == b.losses and all(torch.equal(x, y) for x, y in zip(pa, pb))
    assert a.losses != c.losses


def _train_logged(caplog, **kw):
    rows, segs = _rows(40)
    targets = torch.tensor([len(r) % 2 for r in rows])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="evaluation.progress"):
        stats = train(_model(SequenceHead(16, 2)), rows=rows, segs=segs, recipe=FinetuneRecipe(
            batch_size=8, lr=1e-3, precision="fp32", device="cpu"), epochs=1.5, seed=0,
            loss_fn=lambda out, idx, dev: torch.nn.functional.cross_entropy(
                out.logits, targets[idx].to(dev)), **kw)
    lines = [r.getMessage() for r in caplog.records if r.name == "evaluation.progress"]
    assert all(r.levelno == logging.INFO for r in caplog.records)
    return stats, lines


def test_progress_lines_every_step(caplog, capsys):
    stats, lines = _train_logged(caplog, label="SST-2 seed 0", progress_seconds=0)
    assert lines[0] == "SST-2 seed 0: 8 steps, 1.5 epochs"  # ceil(1.5 * 40 / 8)
    body = lines[1:-1]
    assert len(lines) == 8 + 2 and len(body) == 8
    parsed = [re.fullmatch(r"SST-2 seed 0: step (\d+)/8 \(epoch (\d)/2\), loss ([\d.]+), "
                           r"[\d.]+ steps/s, ETA (\d+m)?\d+s", line) for line in body]
    assert all(parsed), body
    assert [int(m[1]) for m in parsed] == list(range(1, 9))
    assert [int(m[2]) for m in parsed] == [1] * 5 + [2] * 3
    # the loss is the epoch's running mean: at each epoch's last step, the epoch's mean loss
    assert float(parsed[4][3]) == pytest.approx(stats.losses[0], abs=6e-5)
    assert float(parsed[7][3]) == pytest.approx(stats.losses[1], abs=6e-5)
    assert re.fullmatch(r"SST-2 seed 0: done, 8 steps in (\d+m)?\d+s", lines[-1])
    assert capsys.readouterr().out == ""  # logging only, no print


def test_progress_lines_are_rate_limited(caplog):
    # an hour between lines: only the first and the last line of a run of seconds
    _, lines = _train_logged(caplog, progress_seconds=3600)
    assert lines == ["fine-tuning: 8 steps, 1.5 epochs", lines[-1]]
    assert lines[-1].startswith("fine-tuning: done, 8 steps in ")


def test_planned_runs_end_their_lines_with_the_whole_evaluations_eta(caplog):
    """With the runner's clock active (``evaluation.eta``), a planned run's step lines carry the
    ETA of everything planned, and its end how much is done and the ETA for the rest."""
    from evaluation import eta

    eta.activate(eta.clock_for({"SST-2": 8}, [0, 1], None))
    try:
        _, lines = _train_logged(caplog, label="SST-2 seed 0", progress_seconds=0)
    finally:
        eta.activate(None)
    assert all(re.fullmatch(r"SST-2 seed 0: step \d/8 .*, ETA (\d+m)?\d+s; all 1 task × 2 seeds: ETA ~\d+ s", line)
               for line in lines[1:-1]), lines
    assert re.fullmatch(r"SST-2 seed 0: done, 8 steps in (\d+m)?\d+s; 1 of 2 \(1 task × 2 seeds\) done, "
                        r"ETA ~\d+ s for the rest", lines[-1]), lines[-1]
