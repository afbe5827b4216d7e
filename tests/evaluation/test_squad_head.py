"""The paper's SQuAD head: beam search against a brute-force search over all (start, end) pairs;
SQuAD 2.0 end to end (generated official-format data, unanswerable questions, a misaligned
training answer) scored against the official v2.0 script re-implemented in ``squad_official``."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from evaluation.finetune import recipe_for_model
from evaluation.heads import PaperSpanHead, span_loss
from evaluation.predictions import read_predictions
from evaluation.squad_data import SquadExample, SquadFeatures, postprocess_beam
from evaluation.squad_finetune import finetune_squad

from .glue_files import squad_json
from .squad_official import evaluate_v1, evaluate_v2
from .tiny_model import tiny_export, train_tokenizer

T, H, B = 11, 8, 3


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, H, generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 8:] = 0  # padding
    segments = torch.zeros(B, T, dtype=torch.long)
    segments[:, 4:] = 1  # [CLS] q q [SEP] | context ... [SEP]
    segments[1, 8:] = 0
    return hidden, mask, segments


def _head(seed: int, beam: int) -> PaperSpanHead:
    torch.manual_seed(seed)
    head = PaperSpanHead(H, answerability=True, beam=beam, inner=16)
    for p in head.parameters():  # larger than the 0.02 init, so the scores are well separated
        torch.nn.init.normal_(p, std=0.7)
    return head


def _brute_force(head, hidden, mask, segments) -> np.ndarray:
    """[B, T, T] log p(start = s) + log p(end = e | start = s) from the TRAINING path
    (end logits conditioned on a given start), one start at a time."""
    head.train()
    out = head(hidden, mask, segment_ids=segments)
    start_lp = torch.log_softmax(out.logits[..., 0], -1)
    pairs = torch.empty(B, T, T)
    for s in range(T):
        end_lp = torch.log_softmax(out.end_given_start(torch.full((B,), s)), -1)
        pairs[:, s, :] = start_lp[:, s, None] + end_lp
    return pairs.detach().numpy()


@pytest.mark.parametrize("seed", range(3))
def test_full_beam_equals_brute_force_over_all_pairs(seed):
    hidden, mask, segments = _inputs(seed)
    head = _head(seed, beam=T)
    pairs = _brute_force(head, hidden, mask, segments)
    head.eval()
    s_lp, s_idx, e_lp, e_idx = (t.detach().numpy() for t in
                                head(hidden, mask, segment_ids=segments).beam)
    beam_scores = s_lp[:, :, None] + e_lp  # [B, k, k]
    for b in range(B):
        assert sorted(beam_scores[b].ravel()) == pytest.approx(sorted(pairs[b].ravel()), abs=1e-4)
        i, j = np.unravel_index(beam_scores[b].argmax(), beam_scores[b].shape)
        assert (s_idx[b, i], e_idx[b, i, j]) == np.unravel_index(pairs[b].argmax(), (T, T))
        # question tokens and padding never start or end a likely span
        allowed = {0} | {t for t in range(T) if segments[b, t] == 1 and mask[b, t] == 1}
        assert set(s_idx[b, :len(allowed)]) == allowed


@pytest.mark.parametrize("seed", range(3))
def test_narrow_beam_is_the_brute_force_restricted_to_the_top_starts(seed):
    hidden, mask, segments = _inputs(seed)
    head = _head(seed, beam=3)
    pairs = _brute_force(head, hidden, mask, segments)
    head.eval()
    s_lp, s_idx, e_lp, e_idx = (t.detach().numpy() for t in
                                head(hidden, mask, segment_ids=segments).beam)
    for b in range(B):
        start_lp = torch.logsumexp(torch.from_numpy(pairs[b]), -1).numpy()  # log p(start)
        top = np.argsort(-start_lp)[:3]
        assert list(s_idx[b]) == list(top)
        for i, s in enumerate(top):  # each start's 3 best ends, best first
            assert list(e_idx[b, i]) == list(np.argsort(-pairs[b, s])[:3])
            best3 = np.sort(pairs[b, s])[::-1][:3]
            assert s_lp[b, i] + e_lp[b, i] == pytest.approx(best3, abs=1e-4)


def test_chunked_end_logits_equal_the_whole_beam_at_once(monkeypatch):
    from evaluation import heads

    hidden, mask, segments = _inputs(5)
    head = _head(5, beam=T).eval()
    whole = head(hidden, mask, segment_ids=segments).beam
    monkeypatch.setattr(heads, "_CHUNK_ELEMENTS", 1)  # one start at a time
    for a, b in zip(whole, head(hidden, mask, segment_ids=segments).beam):
        assert torch.allclose(a.float(), b.float(), atol=1e-5)


def test_postprocess_beam_matches_brute_force_over_valid_spans():
    """With the full beam the chosen span is the best VALID pair: inside the context, start at a
    max-context token, end >= start, at most ``max_answer_len`` tokens."""
    hidden, mask, segments = _inputs(7)
    head = _head(7, beam=T)
    pairs = _brute_force(head, hidden, mask, segments)
    head.eval()
    beam = [t.detach().numpy() for t in head(hidden, mask, segment_ids=segments).beam]
    context = "".join(chr(ord("a") + i) for i in range(T))
    feats = SquadFeatures()
    examples = []
    for b in range(B):
        n = int(mask[b].sum())
        feats.input_ids.append([1] * n)
        feats.example_index.append(b)
        feats.offsets.append([(t, t + 1) if 4 <= t < n - 1 else None for t in range(n)])
        feats.max_context.append([t % 3 != 0 for t in range(n)])
        examples.append(SquadExample(qid=f"q{b}", question="?", context=context, answers=(),
                                     answer_start=None))
    preds = postprocess_beam(examples, feats, *beam, max_answer_len=3)
    for b in range(B):
        n = len(feats.input_ids[b])
        valid = [(pairs[b, s, e], s, e) for s in range(n) for e in range(n)
                 if feats.offsets[b][s] and feats.offsets[b][e] and feats.max_context[b][s]
                 and s <= e < s + 3]
        score, s, e = max(valid)
        assert preds[f"q{b}"].text == context[s:e + 1]
        assert preds[f"q{b}"].score == pytest.approx(score, abs=1e-4)


def test_training_loss_conditions_the_end_on_the_gold_start():
    hidden, mask, segments = _inputs(3)
    head = _head(3, beam=T)
    head.train()
    out = head(hidden, mask, segment_ids=segments)
    starts, ends = torch.tensor([5, 0, 6]), torch.tensor([7, 0, 6])
    impossible = torch.tensor([0, 1, 0])
    pairs = torch.from_numpy(_brute_force(head, hidden, mask, segments))
    nll = -pairs[torch.arange(B), starts, ends].mean()  # -(log p(s) + log p(e | s))
    bce = torch.nn.functional.binary_cross_entropy_with_logits(out.na_logits, impossible.float())
    loss = span_loss(out, starts, ends, impossible, answerable_weight=0.5)
    assert loss.item() == pytest.approx((nll / 2 + 0.5 * bce).item(), rel=1e-5)


# ---- end to end -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("sq")
    export = tiny_export(root / "hf", tokenizer_dir=train_tokenizer(root / "tok"))
    train = squad_json(root / "v2" / "train-v2.0.json", version="2.0", n_paragraphs=4,
                       impossible_every=3)
    data = json.loads(train.read_text())
    data["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 1  # misaligned
    train.write_text(json.dumps(data))
    squad_json(root / "v2" / "dev-v2.0.json", version="2.0", n_paragraphs=3, seed=1,
               impossible_every=3)
    squad_json(root / "v1" / "train-v1.1.json", version="1.1", n_paragraphs=2)
    squad_json(root / "v1" / "dev-v1.1.json", version="1.1", n_paragraphs=2, seed=1)
    return root, export / "discriminator"


FAST = {"epochs": 2, "batch_size": 8, "lr": 6e-3, "num_threads": 1, "num_seeds": 1,
        "squad_max_len": 40, "squad_doc_stride": 16, "squad_max_query": 8}


def test_squad20_paper_head_end_to_end(tiny):
    root, model = tiny
    rec = recipe_for_model(model, **FAST)
    assert (rec.squad_head, rec.squad_beam, rec.squad_na_threshold) == ("paper", 20, -2.75)
    res = finetune_squad(model_dir=model, squad_dir=root / "v2", version="2.0", recipe=rec,
                         out_dir=root / "out2")
    (seed,) = res.seeds
    rows = read_predictions(root / "out2" / seed.predictions)
    dev = json.loads((root / "v2" / "dev-v2.0.json").read_text())["data"]
    assert sorted(r["id"] for r in rows) == sorted(qa["id"] for p in dev[0]["paragraphs"]
                                                   for qa in p["qas"])
    assert all(r["prediction"] == ("" if r["na_prob"] > -2.75 else r["best_text"]) for r in rows)
    # the official script, fed the best non-null answers and the no-answer logits (as ELECTRA
    # writes its predictions and null-odds files), gives the recorded scores at -2.75 and best
    official = evaluate_v2(dev, {r["id"]: r["best_text"] for r in rows},
                           {r["id"]: r["na_prob"] for r in rows}, na_prob_thresh=-2.75)
    for key in ("exact", "f1", "best_exact", "best_f1", "best_f1_thresh"):
        assert seed.metrics[key] == pytest.approx(official[key], abs=1e-6), key
    # the thresholded file alone scores the same at -2.75
    assert evaluate_v2(dev, {r["id"]: r["prediction"] for r in rows})["f1"] == \
        pytest.approx(seed.metrics["f1"])
    assert seed.metrics["skipped_misaligned"] == 1
    skipped = read_predictions(root / "out2" / "predictions" / "SQuAD2.0" / "skipped_train.jsonl")
    assert [(s["qid"], s["reason"]) for s in skipped] == [("p0q1", "answer_offset_mismatch")]


def test_squad11_plain_head_scored_by_v11_rules(tiny):
    root, model = tiny
    rec = recipe_for_model(model, **FAST, squad_head="plain")
    res = finetune_squad(model_dir=model, squad_dir=root / "v1", version="1.1", recipe=rec,
                         out_dir=root / "out1")
    (seed,) = res.seeds
    rows = read_predictions(root / "out1" / seed.predictions)
    assert all(r["prediction"] == r["best_text"] for r in rows)  # no threshold in 1.1
    dev = json.loads((root / "v1" / "dev-v1.1.json").read_text())["data"]
    official = evaluate_v1(dev, {r["id"]: r["prediction"] for r in rows})
    assert (seed.metrics["exact"], seed.metrics["f1"]) == \
        pytest.approx((official["exact_match"], official["f1"]))
    assert "skipped_misaligned" not in seed.metrics
