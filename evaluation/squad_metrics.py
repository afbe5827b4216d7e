"""SQuAD exact match and F1 as the official v1.1 / v2.0 evaluation scripts define them.

Normalisation (both versions): lower-case, drop ASCII punctuation, drop the articles a/an/the
(whole words), collapse whitespace. A prediction is scored against every gold answer and the
maximum counts. The two scripts differ only at the edges, and each version is scored by its own:

* v1.1: the gold texts are used as they are (none dropped); token F1 is 0 whenever the two
  token bags share nothing, an empty prediction against an empty gold included.
* v2.0: gold answers empty after normalisation are dropped; a question left with none (an
  unanswerable one) has the single gold answer ``""``, so only an empty prediction scores on it;
  token F1 between an empty and a non-empty string is 0, between two empty strings 1.

``version=None`` infers the rules: 2.0 when no-answer scores are given or a question has no gold
answer, else 1.1, so callers that do not pass a version still score a v1.1 file by the v1.1
rules; pass it explicitly to score answerable-only v2.0 questions (the rules then differ only on
texts that normalise to "").

Best no-answer threshold (2.0): given a no-answer score per question (the official script calls
it a probability; ELECTRA, and this project, pass the answerability logit), the threshold t that
maximises the total score when every question with ``na_prob > t`` is answered with ``""``. The
scan sorts questions by na_prob and walks the threshold up through them, exactly as the official
script does, so its results match the leaderboard's "best_exact"/"best_f1".
"""
from __future__ import annotations

import collections
import re
import string
from dataclasses import dataclass

# ELECTRA's SQuAD 2.0 cut (``qa_na_threshold``): a question is answered "no answer" when its
# answerability logit (the smallest over its windows) exceeds this.
NA_THRESHOLD = -2.75
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


def token_f1_v1(prediction: str, gold: str) -> float:
    """F1 of the official v1.1 script: no special case for empty token bags."""
    common = (collections.Counter(normalize_answer(prediction).split())
              & collections.Counter(normalize_answer(gold).split()))
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(normalize_answer(prediction).split())
    recall = same / len(normalize_answer(gold).split())
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
                   na_prob_thresh: float = 1.0, version: str | None = None) -> SquadScores:
    """Score ``{qid: prediction}`` against ``{qid: [gold texts]}`` (empty list = unanswerable).

    ``na_probs`` are the no-answer scores (the official script's ``na_prob`` file; ELECTRA
    writes its answerability logits there), a question with a score above ``na_prob_thresh`` is
    answered ``""``. A question missing from ``predictions`` is an error, not a silent zero.
    """
    missing = [q for q in golds if q not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} questions have no prediction, e.g. {missing[:3]}")
    if version is None:
        version = "2.0" if na_probs is not None or not all(golds.values()) else "1.1"
    if version == "1.1":
        return _evaluate_v1(golds, predictions)
    if version != "2.0":
        raise ValueError(f"unknown SQuAD version {version!r}; expected 1.1 or 2.0")
    raw_em = {q: max_over_golds(exact_match, predictions[q], g) for q, g in golds.items()}
    raw_f1 = {q: max_over_golds(token_f1, predictions[q], g) for q, g in golds.items()}
    # as the official script: a question with answers is answerable even if they normalise to ""
    has_ans = {q: bool(g) for q, g in golds.items()}
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


def _evaluate_v1(golds: dict[str, list[str]], predictions: dict[str, str]) -> SquadScores:
    empty = [q for q, g in golds.items() if not g]
    if empty:
        raise ValueError(f"SQuAD v1.1 rules: {len(empty)} questions have no gold answer, "
                         f"e.g. {empty[:3]}")
    em = [max(exact_match(predictions[q], g) for g in gs) for q, gs in golds.items()]
    f1 = [max(token_f1_v1(predictions[q], g) for g in gs) for q, gs in golds.items()]
    return SquadScores(exact=_mean(em) or 0.0, f1=_mean(f1) or 0.0, total=len(golds))


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
