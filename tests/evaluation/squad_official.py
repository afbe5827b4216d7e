"""The official SQuAD v1.1 and v2.0 evaluation scripts, re-implemented here for the tests.

Written from the published ``evaluate-v1.1.py`` / ``evaluate-v2.0.py`` (as vendored in ELECTRA's
``finetune/qa/squad_official_eval_v1.py`` and ``squad_official_eval.py``), NOT imported from the
project: the tests score the project's prediction files with these and compare. Both take the
official dataset JSON (``{"data": [{"paragraphs": [{"qas": ...}]}]}``) and ``{qid: text}``.
"""
from __future__ import annotations

import collections
import re
import string


def _normalize(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s, flags=re.UNICODE)
    return " ".join(s.split())


def _qas(dataset: list[dict]):
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


# ---- evaluate-v1.1.py ------------------------------------------------------------------------

def _f1_v1(prediction: str, ground_truth: str) -> float:
    p, g = _normalize(prediction).split(), _normalize(ground_truth).split()
    num_same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if num_same == 0:
        return 0
    precision, recall = 1.0 * num_same / len(p), 1.0 * num_same / len(g)
    return (2 * precision * recall) / (precision + recall)


def evaluate_v1(dataset: list[dict], predictions: dict[str, str]) -> dict[str, float]:
    f1 = exact_match = total = 0
    for qa in _qas(dataset):
        total += 1
        if qa["id"] not in predictions:
            continue  # the script prints a message and scores 0
        truths = [a["text"] for a in qa["answers"]]
        pred = predictions[qa["id"]]
        exact_match += max(float(_normalize(pred) == _normalize(t)) for t in truths)
        f1 += max(_f1_v1(pred, t) for t in truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


# ---- evaluate-v2.0.py ------------------------------------------------------------------------

def _tokens(s: str) -> list[str]:
    return _normalize(s).split() if s else []


def _exact_v2(gold: str, pred: str) -> int:
    return int(_normalize(gold) == _normalize(pred))


def _f1_v2(gold: str, pred: str) -> float:
    g, p = _tokens(gold), _tokens(pred)
    num_same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if len(g) == 0 or len(p) == 0:
        return int(g == p)
    if num_same == 0:
        return 0
    precision, recall = 1.0 * num_same / len(p), 1.0 * num_same / len(g)
    return (2 * precision * recall) / (precision + recall)


def _find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score, best_thresh = cur_score, na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def evaluate_v2(dataset: list[dict], preds: dict[str, str],
                na_probs: dict[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> dict[str, float]:
    qid_to_has_ans = {qa["id"]: bool(qa["answers"]) for qa in _qas(dataset)}
    if na_probs is None:
        na_probs = {k: 0.0 for k in preds}
    exact_raw, f1_raw = {}, {}
    for qa in _qas(dataset):
        golds = [a["text"] for a in qa["answers"] if _normalize(a["text"])] or [""]
        if qa["id"] not in preds:
            continue
        exact_raw[qa["id"]] = max(_exact_v2(a, preds[qa["id"]]) for a in golds)
        f1_raw[qa["id"]] = max(_f1_v2(a, preds[qa["id"]]) for a in golds)

    def thresholded(scores):
        return {q: float(not qid_to_has_ans[q]) if na_probs[q] > na_prob_thresh else s
                for q, s in scores.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    out = {"exact": 100.0 * sum(exact.values()) / len(exact),
           "f1": 100.0 * sum(f1.values()) / len(f1), "total": len(exact)}
    for name, keep in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, h in qid_to_has_ans.items() if h == keep]
        if qids:
            out[f"{name}_exact"] = 100.0 * sum(exact[q] for q in qids) / len(qids)
            out[f"{name}_f1"] = 100.0 * sum(f1[q] for q in qids) / len(qids)
    out["best_exact"], out["best_exact_thresh"] = _find_best_thresh(
        preds, exact_raw, na_probs, qid_to_has_ans)
    out["best_f1"], out["best_f1_thresh"] = _find_best_thresh(
        preds, f1_raw, na_probs, qid_to_has_ans)
    return out
