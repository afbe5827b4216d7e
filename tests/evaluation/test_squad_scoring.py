"""SQuAD scores of the project against the official v1.1 / v2.0 scripts (re-implemented in
``squad_official.py``), on random predictions with the edge cases where the two versions differ;
misaligned training answers skipped and counted."""
from __future__ import annotations

import json
import random

import pytest
from tokenizers import Tokenizer

from evaluation.squad_data import featurize, read_squad
from evaluation.squad_metrics import squad_evaluate

from .squad_official import evaluate_v1, evaluate_v2
from .tiny_model import train_tokenizer

# Answers and predictions chosen so that the v1.1 and v2.0 rules disagree: texts that normalise
# to "" ("the", "."), articles, punctuation, case, partial overlaps.
TEXTS = ["Denver Broncos", "the Broncos", "broncos!", "the", ".", "", "a cat", "cat dog",
         "Dog", "an apple pie", "pie", "x y z", "X Y"]


def _dataset(rng: random.Random, n: int, *, unanswerable: bool) -> list[dict]:
    qas = []
    for i in range(n):
        k = 0 if unanswerable and i % 4 == 0 else rng.randint(1, 3)
        qas.append({"id": f"q{i}", "question": "?", "is_impossible": k == 0,
                    "answers": [{"text": rng.choice(TEXTS), "answer_start": 0} for _ in range(k)]})
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def _golds(dataset: list[dict]) -> dict[str, list[str]]:
    return {qa["id"]: [a["text"] for a in qa["answers"]]
            for p in dataset[0]["paragraphs"] for qa in p["qas"]}


@pytest.mark.parametrize("seed", range(5))
def test_v11_rules_match_the_official_v11_script(seed):
    rng = random.Random(seed)
    dataset = _dataset(rng, 60, unanswerable=False)
    preds = {q: rng.choice(TEXTS) for q in _golds(dataset)}
    official = evaluate_v1(dataset, preds)
    ours = squad_evaluate(_golds(dataset), preds, version="1.1")
    assert ours.exact == pytest.approx(official["exact_match"])
    assert ours.f1 == pytest.approx(official["f1"])
    # the version is inferred (1.1) when no no-answer scores are given and every question has one
    assert squad_evaluate(_golds(dataset), preds).f1 == pytest.approx(official["f1"])


def test_v11_and_v20_rules_differ_where_the_scripts_do():
    dataset = [{"paragraphs": [{"qas": [{"id": "q", "answers": [{"text": "the"}]}]}]}]
    # v1.1: F1 of "" against "the" is 0 (no common token); v2.0: both empty, F1 1
    assert evaluate_v1(dataset, {"q": ""})["f1"] == 0.0
    assert evaluate_v2(dataset, {"q": ""})["f1"] == 100.0
    assert squad_evaluate({"q": ["the"]}, {"q": ""}, version="1.1").f1 == 0.0
    assert squad_evaluate({"q": ["the"]}, {"q": ""}, version="2.0").f1 == 100.0
    with pytest.raises(ValueError, match="no gold answer"):
        squad_evaluate({"q": []}, {"q": ""}, version="1.1")


@pytest.mark.parametrize("seed", range(5))
def test_v20_rules_and_thresholds_match_the_official_v20_script(seed):
    rng = random.Random(100 + seed)
    dataset = _dataset(rng, 80, unanswerable=True)
    golds = _golds(dataset)
    preds = {q: rng.choice(TEXTS) for q in golds}
    # logits as ELECTRA writes them, with ties (the scan must only cut between distinct values)
    na = {q: rng.choice([-6.0, -4.5, -2.75, -1.0, 0.5, 3.0]) + rng.choice([0.0, 0.25])
          for q in golds}
    official = evaluate_v2(dataset, preds, na, na_prob_thresh=-2.75)
    ours = squad_evaluate(golds, preds, na_probs=na, na_prob_thresh=-2.75, version="2.0")
    assert (ours.exact, ours.f1) == pytest.approx((official["exact"], official["f1"]))
    assert (ours.has_ans_exact, ours.has_ans_f1, ours.no_ans_exact, ours.no_ans_f1) == \
        pytest.approx((official["HasAns_exact"], official["HasAns_f1"], official["NoAns_exact"],
                       official["NoAns_f1"]))
    assert (ours.best_exact, ours.best_exact_thresh, ours.best_f1, ours.best_f1_thresh) == \
        pytest.approx((official["best_exact"], official["best_exact_thresh"],
                       official["best_f1"], official["best_f1_thresh"]))
    # no scores given: the official script answers everything (na 0, threshold 1.0)
    plain = evaluate_v2(dataset, preds)
    assert squad_evaluate(golds, preds, version="2.0").f1 == pytest.approx(plain["f1"])


# ---- misaligned training answers ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = train_tokenizer(tmp_path_factory.mktemp("tok"))
    return Tokenizer.from_file(str(path / "tokenizer.json"))


def test_misaligned_training_answers_are_skipped_and_counted(tmp_path, tokenizer):
    context = "alpha beta gamma delta epsilon"
    qas = [{"id": "ok", "question": "which?", "answers": [{"text": "gamma", "answer_start": 11}]},
           {"id": "shifted", "question": "which?",
            "answers": [{"text": "gamma", "answer_start": 3}]},  # not at its offset
           {"id": "space", "question": "which?", "answers": [{"text": " ", "answer_start": 5}]},
           {"id": "none", "question": "which?", "answers": [], "is_impossible": True}]
    path = tmp_path / "train-v2.0.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}))
    examples = read_squad(path, version="2.0")  # misalignment is not fatal
    assert [e.qid for e in examples] == ["ok", "shifted", "space", "none"]
    feats = featurize(examples, tokenizer, max_len=64, training=True)
    assert [(s["qid"], s["reason"]) for s in feats.skipped] == [
        ("shifted", "answer_offset_mismatch"), ("space", "answer_not_tokenised")]
    assert "train-v2.0.json: question shifted: answer 'gamma' not found at answer_start 3" in \
        feats.skipped[0]["detail"]
    kept = {examples[i].qid for i in feats.example_index}
    assert kept == {"ok", "none"}  # one window each, the unanswerable one pointing at [CLS]
    f = feats.example_index.index(0)
    start, end = feats.start_positions[f], feats.end_positions[f]
    assert context[feats.offsets[f][start][0]:feats.offsets[f][end][1]] == "gamma"
    # evaluation keeps every question (answers are scored as texts)
    assert featurize(examples, tokenizer, max_len=64).skipped == []
    assert len(set(featurize(examples, tokenizer, max_len=64).example_index)) == 4
