"""SQuAD 1.1 / 2.0: JSON reader, doc-stride featurisation, n-best answer extraction.

Featurisation follows the original BERT/ELECTRA recipe: the question is cut to ``max_query``
(64) tokens; the context is tokenised once with character offsets (so any answer maps back to an
exact span of the ORIGINAL context, whatever the normaliser did) and cut into windows of
``max_len - len(question) - 3`` tokens whose starts advance by ``doc_stride`` (128) tokens. Each
window is one feature ``[CLS] question [SEP] window [SEP]``. A training feature whose window does
not contain the whole answer (or whose question is unanswerable) points at [CLS] (position 0).

Answerability labels (SQuAD 2.0) are per QUESTION, as the original's ``featurize``
(google-research/electra finetune/qa/qa_tasks.py) writes ``is_impossible`` of the example into
every window: all windows of an answerable question are labelled answerable (0), even a window
that lacks the answer and whose start/end therefore point at [CLS]; all windows of an
unanswerable question are labelled impossible (1). The span targets say "not in this window",
the classifier learns "the question has an answer in this document". Labelling a window without
the answer as impossible instead would repeat the span targets' "not here" and turn most windows
of a long answerable context into negatives; the no-answer score (the smallest logit over a
question's windows, below) and the original's -2.75 threshold were tuned under the per-question
labels, so those are what is trained here.

A token occurs in several windows; only the window where it has the most context on both sides
(``min(left, right) + 0.01 * length``, as in the original) may start an answer, so each answer is
judged where the model saw it best. Post-processing takes candidate spans per feature (plain
head, ``postprocess``: the ``n_best`` (20) start times the ``n_best`` end logits; paper head,
``postprocess_beam``: its beam of starts each with its best start-conditioned ends), keeps spans
inside the context with ``end >= start`` and at most ``max_answer_len`` (30) tokens starting at a
max-context token, and returns the best-scoring text per question plus, for 2.0,
the no-answer score: the smallest answerability logit over its windows (the window most sure
there is an answer decides), as the original's ``score_null``; it is a logit, not a probability,
and the original cuts it at -2.75.

Misaligned training answers: the original skips a training question whose answer text is not
where ``answer_start`` says, or cannot be found again after tokenisation, and so does
``featurize(training=True)``: such a question gives no window and is listed in
``SquadFeatures.skipped`` (``{qid, reason, detail}``), so it is counted, not fatal and not lost.
At evaluation the offsets do not matter (answers are scored as texts), so nothing is skipped.

Validation: ``read_squad`` is the one parser, used both by fine-tuning and by the up-front check
(``squad_finetune.check_squad_data``), so a fault in the dev file is reported before hours of
training, not after. It is a ``SquadDataError`` naming the file and where: line:column for
invalid JSON, else the JSON path (``data[3].paragraphs[2].qas[1]``) and the question id. Faults:
a missing key or wrong type at any level (``data``, ``paragraphs``, ``context``, ``qas``, ``id``,
``question``, ``answers``, an answer's ``text`` and integer ``answer_start``, a boolean
``is_impossible``), a negative ``answer_start``, a repeated question id, a question with no
answers not marked ``is_impossible``, an ``is_impossible`` question with answers, and a version
mismatch: the file's ``version`` field ("1.1" or "v2.0" in the official files) differing from the
one asked, or an ``is_impossible`` question read as v1.1. Only the misaligned answer above is
tolerated (counted, not fatal), as the original does.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class SquadDataError(ValueError):
    """Bad SQuAD input; the message names the file and the question id."""


@dataclass(frozen=True)
class SquadExample:
    qid: str
    question: str
    context: str
    answers: tuple[str, ...]  # gold texts (empty for unanswerable)
    answer_start: int | None  # character offset of the first answer (training target)
    is_impossible: bool = False
    misaligned: str = ""  # why the first answer is not at answer_start ("" when it is)


@dataclass
class SquadFeatures:
    """Parallel lists, one entry per window."""

    input_ids: list[list[int]] = field(default_factory=list)
    segment_ids: list[list[int]] = field(default_factory=list)
    example_index: list[int] = field(default_factory=list)
    offsets: list[list[tuple[int, int] | None]] = field(default_factory=list)  # None: not context
    max_context: list[list[bool]] = field(default_factory=list)
    start_positions: list[int] = field(default_factory=list)
    end_positions: list[int] = field(default_factory=list)
    is_impossible: list[int] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {qid, reason, detail}, training only

    def __len__(self) -> int:
        return len(self.input_ids)


def read_squad(path: str | Path, *, version: str) -> list[SquadExample]:
    """Read and fully validate an official SQuAD JSON file (see "Validation" in the module doc).

    Any structural fault is a ``SquadDataError`` naming the file, the JSON path and the question
    id; an answer that is not at its ``answer_start`` is kept with ``misaligned`` set (training
    skips it).
    """
    path = Path(path)
    if version not in ("1.1", "2.0"):
        raise SquadDataError(f"unknown SQuAD version {version!r}; expected 1.1 or 2.0")
    if not path.is_file():
        raise SquadDataError(f"{path}: file missing; expected the official SQuAD v{version} JSON "
                             f"(train-v{version}.json / dev-v{version}.json)")
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise SquadDataError(f"{path}: unreadable ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise SquadDataError(f"{path}: byte {exc.start}: not UTF-8 ({exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise SquadDataError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON ({exc.msg})") from exc
    return _Reader(path, version).document(doc)


_KIND = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true/false"}


class _Reader:
    """One pass over a parsed file; every message names the file and the JSON path."""

    def __init__(self, path: Path, version: str):
        self.path, self.version = path, version
        self.seen: dict[str, str] = {}  # question id -> JSON path of its first occurrence
        self.examples: list[SquadExample] = []

    def fail(self, where: str, detail: str, qid: str | None = None) -> SquadDataError:
        who = f"question {qid} malformed at" if qid is not None else "malformed at"
        return SquadDataError(f"{self.path}: {who} {where or 'top level'}: {detail}")

    def field(self, obj: dict, key: str, kind: type, where: str, qid: str | None = None):
        if key not in obj:
            raise self.fail(where, f"missing {key!r}", qid)
        value = obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(f"{where}.{key}" if where else key, f"{key!r} must be {_KIND[kind]}, "
                            f"got {type(value).__name__} {value!r:.40}", qid)
        return value

    def node(self, value, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        return value

    def document(self, doc) -> list[SquadExample]:
        doc = self.node(doc, "")
        declared = doc.get("version")
        if declared is not None and str(declared).removeprefix("v") != self.version:
            raise SquadDataError(f"{self.path}: the file says version {declared!r} but SQuAD "
                                 f"v{self.version} was asked")
        for a, article in enumerate(self.field(doc, "data", list, "")):
            where = f"data[{a}]"
            for p, para in enumerate(self.field(self.node(article, where), "paragraphs", list,
                                                where)):
                pw = f"{where}.paragraphs[{p}]"
                context = self.field(self.node(para, pw), "context", str, pw)
                for q, qa in enumerate(self.field(para, "qas", list, pw)):
                    self.question(self.node(qa, f"{pw}.qas[{q}]"), context, f"{pw}.qas[{q}]")
        return self.examples

    def question(self, qa: dict, context: str, where: str) -> None:
        qid = self.field(qa, "id", str, where)
        if qid in self.seen:
            raise SquadDataError(f"{self.path}: question {qid} at {where} repeats the id of "
                                 f"{self.seen[qid]}")
        self.seen[qid] = where
        question = self.field(qa, "question", str, where, qid)
        answers = self.field(qa, "answers", list, where, qid)
        impossible = self.field(qa, "is_impossible", bool, where, qid) if "is_impossible" in qa \
            else False
        for k, ans in enumerate(answers):
            aw = f"{where}.answers[{k}]"
            if not isinstance(ans, dict):
                raise self.fail(aw, f"expected an object, got {type(ans).__name__}", qid)
            self.field(ans, "text", str, aw, qid)
            if self.field(ans, "answer_start", int, aw, qid) < 0:
                raise self.fail(f"{aw}.answer_start", "negative answer_start", qid)
        if impossible and self.version == "1.1":
            raise SquadDataError(f"{self.path}: question {qid} at {where} is_impossible: a SQuAD "
                                 "v2.0 question in a file read as v1.1")
        if impossible and answers:
            raise self.fail(where, f"is_impossible but has {len(answers)} answers", qid)
        if not impossible and not answers:
            raise self.fail(where, "no answers and not marked is_impossible", qid)
        start, misaligned = None, ""
        if answers:
            start, text = answers[0]["answer_start"], answers[0]["text"]
            if context[start:start + len(text)] != text:
                misaligned = (f"{self.path}: question {qid}: answer {text!r} not found at "
                              f"answer_start {start} of its context ({where})")
        self.examples.append(SquadExample(
            qid=qid, question=question, context=context, answers=tuple(a["text"] for a in answers),
            answer_start=start, is_impossible=impossible, misaligned=misaligned))


def _special(tokenizer, token: str) -> int:
    idx = tokenizer.token_to_id(token)
    if idx is None:
        raise ValueError(f"tokenizer has no {token} token")
    return idx


def featurize(examples: list[SquadExample], tokenizer, *, max_len: int = 512,
              doc_stride: int = 128, max_query: int = 64, training: bool = False) -> SquadFeatures:
    """Doc-stride windows for every example (``tokenizer``: a ``tokenizers.Tokenizer``).

    ``training``: answerable questions whose answer is misaligned get no window and are listed
    in ``skipped`` instead.
    """
    cls_id, sep_id = _special(tokenizer, "[CLS]"), _special(tokenizer, "[SEP]")
    tokenizer.no_truncation()
    tokenizer.no_padding()
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tokenizer.encode_batch([e.context for e in examples], add_special_tokens=False)
    feats = SquadFeatures()
    for i, (ex, q, c) in enumerate(zip(examples, questions, contexts)):
        q_ids = q.ids[:max_query]
        window = max_len - len(q_ids) - 3
        if window <= 0:
            raise ValueError(f"max_len {max_len} leaves no room for the context")
        tok_start, tok_end = _answer_tokens(ex, c.offsets)
        if training and not ex.is_impossible and ex.answers:
            reason = ("answer_offset_mismatch" if ex.misaligned
                      else "answer_not_tokenised" if tok_start is None else "")
            if reason:
                feats.skipped.append({"qid": ex.qid, "reason": reason, "detail": ex.misaligned
                                      or f"question {ex.qid}: answer {ex.answers[0]!r} covers "
                                         "no token of the context"})
                continue
        starts = _window_starts(len(c.ids), window, doc_stride)
        for w0 in starts:
            w1 = min(w0 + window, len(c.ids))
            prefix = [cls_id, *q_ids, sep_id]
            feats.input_ids.append(prefix + c.ids[w0:w1] + [sep_id])
            feats.segment_ids.append([0] * len(prefix) + [1] * (w1 - w0 + 1))
            feats.example_index.append(i)
            feats.offsets.append([None] * len(prefix) + list(c.offsets[w0:w1]) + [None])
            feats.max_context.append([False] * len(prefix)
                                     + [_is_max_context(starts, window, len(c.ids), w0, t)
                                        for t in range(w0, w1)] + [False])
            inside = tok_start is not None and w0 <= tok_start and tok_end < w1
            feats.start_positions.append(tok_start - w0 + len(prefix) if inside else 0)
            feats.end_positions.append(tok_end - w0 + len(prefix) if inside else 0)
            # the question's label in every window (module docstring), not "inside"
            feats.is_impossible.append(int(ex.is_impossible))
    return feats


def _window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    starts, s = [0], 0
    while s + window < n_tokens:
        s += min(window, stride)
        starts.append(s)
    return starts


def _is_max_context(starts: list[int], window: int, n_tokens: int, w0: int, t: int) -> bool:
    best, best_score = None, -1.0
    for s in starts:
        e = min(s + window, n_tokens)
        if s <= t < e:
            score = min(t - s, e - 1 - t) + 0.01 * (e - s)
            if score > best_score:
                best, best_score = s, score
    return best == w0


def _answer_tokens(ex: SquadExample, offsets) -> tuple[int | None, int | None]:
    """First and last context token overlapping the first gold answer's characters."""
    if ex.is_impossible or ex.answer_start is None or ex.misaligned:
        return None, None
    c0, c1 = ex.answer_start, ex.answer_start + len(ex.answers[0])
    toks = [t for t, (a, b) in enumerate(offsets) if a < c1 and b > c0]
    if not toks:
        return None, None  # answer is only whitespace/untokenised characters
    return toks[0], toks[-1]


@dataclass
class SquadPrediction:
    text: str  # best non-null answer
    score: float
    na_prob: float  # the no-answer logit (min over windows); 0 for SQuAD 1.1


# One window's candidate spans: [(score, start, end)] in the window's token positions.
Candidates = list[tuple[float, int, int]]


def postprocess(examples: list[SquadExample], feats: SquadFeatures, start_logits: np.ndarray,
                end_logits: np.ndarray, *, na_logits: np.ndarray | None = None,
                n_best: int = 20, max_answer_len: int = 30) -> dict[str, SquadPrediction]:
    """Best answer per question from a plain head's logits (padded arrays [F, T] are fine).

    Candidates: the ``n_best`` starts times the ``n_best`` ends, scored start + end logit.
    """
    def cands(f: int) -> Candidates:
        n = len(feats.input_ids[f])
        s_log, e_log = start_logits[f][:n], end_logits[f][:n]
        top_s, top_e = np.argsort(-s_log)[:n_best], np.argsort(-e_log)[:n_best]
        return [(float(s_log[s] + e_log[e]), int(s), int(e)) for s in top_s for e in top_e]
    return _select(examples, feats, cands, na_logits, max_answer_len)


def postprocess_beam(examples: list[SquadExample], feats: SquadFeatures, start_lp: np.ndarray,
                     start_idx: np.ndarray, end_lp: np.ndarray, end_idx: np.ndarray, *,
                     na_logits: np.ndarray | None = None,
                     max_answer_len: int = 30) -> dict[str, SquadPrediction]:
    """Best answer per question from the paper head's beam ([F, k] starts, [F, k, k] ends).

    Candidates: start ``i`` of the beam with each of its ``k`` ends, scored by the sum of the
    start and (start-conditioned) end log-probabilities, as the original's joint prediction.
    """
    def cands(f: int) -> Candidates:
        k = start_idx.shape[1]
        return [(float(start_lp[f, i] + end_lp[f, i, j]), int(start_idx[f, i]),
                 int(end_idx[f, i, j])) for i in range(k) for j in range(end_idx.shape[2])]
    return _select(examples, feats, cands, na_logits, max_answer_len)


def _select(examples, feats: SquadFeatures, cands, na_logits, max_answer_len: int
            ) -> dict[str, SquadPrediction]:
    best: dict[int, SquadPrediction] = {}
    min_na: dict[int, float] = {}
    for f in range(len(feats)):
        i = feats.example_index[f]
        if na_logits is not None:
            min_na[i] = min(min_na.get(i, math.inf), float(na_logits[f]))
        cand = _best_valid(feats, f, cands(f), max_answer_len)
        if cand is not None and (i not in best or cand[0] > best[i].score):
            a, b = feats.offsets[f][cand[1]][0], feats.offsets[f][cand[2]][1]
            best[i] = SquadPrediction(text=examples[i].context[a:b], score=cand[0], na_prob=0.0)
    out = {}
    for i, ex in enumerate(examples):
        pred = best.get(i, SquadPrediction(text="", score=-math.inf, na_prob=0.0))
        if i in min_na:
            pred.na_prob = min_na[i]
        out[ex.qid] = pred
    return out


def _best_valid(feats: SquadFeatures, f: int, cands: Candidates, max_answer_len: int
                ) -> tuple[float, int, int] | None:
    """The best span that starts at a max-context token and lies inside the context."""
    offsets, max_ctx, n = feats.offsets[f], feats.max_context[f], len(feats.input_ids[f])
    best = None
    for score, s, e in cands:
        if s >= n or e >= n or offsets[s] is None or offsets[e] is None or not max_ctx[s]:
            continue
        if e < s or e - s + 1 > max_answer_len:
            continue
        if best is None or score > best[0]:
            best = (score, s, e)
    return best
