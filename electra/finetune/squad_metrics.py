"""SQuAD exact match and F1 as the official v1.1 / v2.0 evaluation scripts define them.

Normalisation: lower-case, drop ASCII punctuation, drop the articles a/an/the (whole words),
collapse whitespace. A prediction is scored against every gold answer and the maximum counts.
SQuAD 2.0: a question with no (non-empty after normalisation) gold answer has the single gold
answer ``""``, so only an empty prediction scores on it; token F1 between an empty and a
non-empty string is 0, between two empty strings 1.

Best no-answer threshold (2.0): given a no-answer probability per question, the threshold t that
maximises the total score when every question with ``na_prob > t`` is answered with ``""``. The
scan sorts questions by na_prob and walks the threshold up through them, exactly as the official
script does, so its results match the leaderboard's "best_exact"/"best_f1".
"""
from __future__ import annotations

import collections
import re
import string
from dataclasses import dataclass

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    pred_toks, gold_toks = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def gold_texts(answers: list[str]) -> list[str]:
    """Gold answers that survive normalisation, or ``[""]`` for an unanswerable question."""
    kept = [a for a in answers if normalize_answer(a)]
    return kept or [""]


def max_over_golds(metric, prediction: str, golds: list[str]) -> float:
    return max(metric(prediction, g) for g in gold_texts(golds))


@dataclass
class SquadScores:
    exact: float  # percent
    f1: float
    total: int
    has_ans_exact: float | None = None
    has_ans_f1: float | None = None
    no_ans_exact: float | None = None
    no_ans_f1: float | None = None
    best_exact: float | None = None
    best_exact_thresh: float | None = None
    best_f1: float | None = None
    best_f1_thresh: float | None = None


def _mean(values: list[float]) -> float | None:
    return 100.0 * sum(values) / len(values) if values else None


def squad_evaluate(golds: dict[str, list[str]], predictions: dict[str, str], *,
                   na_probs: dict[str, float] | None = None,
                   na_prob_thresh: float = 1.0) -> SquadScores:
    """Score ``{qid: prediction}`` against ``{qid: [gold texts]}`` (empty list = unanswerable).

    A question missing from ``predictions`` is an error, not a silent zero.
    """
    missing = [q for q in golds if q not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} questions have no prediction, e.g. {missing[:3]}")
    raw_em = {q: max_over_golds(exact_match, predictions[q], g) for q, g in golds.items()}
    raw_f1 = {q: max_over_golds(token_f1, predictions[q], g) for q, g in golds.items()}
    has_ans = {q: bool(gold_texts(g)[0]) for q, g in golds.items()}
    em, f1 = dict(raw_em), dict(raw_f1)
    if na_probs is not None:
        for q in golds:
            if na_probs[q] > na_prob_thresh:
                em[q] = f1[q] = float(not has_ans[q])
    scores = SquadScores(exact=_mean(list(em.values())) or 0.0,
                         f1=_mean(list(f1.values())) or 0.0, total=len(golds))
    if not all(has_ans.values()):
        answerable = [q for q in golds if has_ans[q]]
        unanswerable = [q for q in golds if not has_ans[q]]
        scores.has_ans_exact = _mean([em[q] for q in answerable])
        scores.has_ans_f1 = _mean([f1[q] for q in answerable])
        scores.no_ans_exact = _mean([em[q] for q in unanswerable])
        scores.no_ans_f1 = _mean([f1[q] for q in unanswerable])
    if na_probs is not None:
        scores.best_exact, scores.best_exact_thresh = best_threshold(
            predictions, raw_em, na_probs, has_ans)
        scores.best_f1, scores.best_f1_thresh = best_threshold(
            predictions, raw_f1, na_probs, has_ans)
    return scores


def best_threshold(predictions: dict[str, str], raw_scores: dict[str, float],
                   na_probs: dict[str, float], has_ans: dict[str, bool]) -> tuple[float, float]:
    """(best score in percent, threshold) over thresholds at the observed na_probs."""
    score = best = float(sum(1 for q in raw_scores if not has_ans[q]))  # all answered ""
    best_thresh = 0.0
    for q in sorted(raw_scores, key=lambda k: na_probs[k]):
        if has_ans[q]:
            score += raw_scores[q]
        elif predictions[q]:
            score -= 1.0
        if score > best:
            best, best_thresh = score, na_probs[q]
    return 100.0 * best / len(raw_scores), best_thresh
