"""SQuAD: official normalisation and scoring, reader, doc-stride windows, n-best extraction."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from evaluation import squad_data
from evaluation.squad_data import SquadDataError, SquadExample, featurize, read_squad
from evaluation.squad_metrics import exact_match, normalize_answer, squad_evaluate, token_f1

from .glue_files import squad_json
from .tiny_model import train_tokenizer


@pytest.mark.parametrize("raw,norm", [
    ("The Eiffel Tower", "eiffel tower"),          # article and case
    ("an apple, a pear!", "apple pear"),            # articles and punctuation
    ("  multiple\t spaces\n here ", "multiple spaces here"),
    ("Theater of theA", "theater of thea"),         # articles only as whole words
    ("U.S.-based", "usbased"),
    ("", ""),
])
def test_normalisation(raw, norm):
    assert normalize_answer(raw) == norm


def test_em_f1_hand_worked():
    assert exact_match("the Eiffel tower.", "Eiffel Tower") == 1.0
    # pred "big red barn", gold "red barn door": common 2, P = 2/3, R = 2/3 → F1 2/3
    assert token_f1("big red barn", "red barn door") == pytest.approx(2 / 3)
    assert token_f1("a", "the") == 1.0  # both empty after normalisation
    assert token_f1("", "paris") == 0.0
    assert token_f1("paris paris", "paris") == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_max_over_several_golds_and_unanswerable():
    golds = {"q1": ["Denver Broncos", "the Broncos"], "q2": [], "q3": ["1990"]}
    preds = {"q1": "Broncos", "q2": "", "q3": "in 1990s"}
    s = squad_evaluate(golds, preds)
    # q1: EM 1 against "the Broncos"; q2: empty vs unanswerable EM 1; q3: EM 0, F1 0
    assert s.exact == pytest.approx(200 / 3) and s.f1 == pytest.approx(200 / 3)
    assert s.has_ans_exact == 50.0 and s.no_ans_exact == 100.0
    assert squad_evaluate({"q": []}, {"q": "something"}).exact == 0.0
    with pytest.raises(ValueError, match="no prediction"):
        squad_evaluate({"q": ["x"], "r": ["y"]}, {"q": "x"})


def test_best_no_answer_threshold_hand_worked():
    golds = {"a": ["cat"], "b": [], "c": ["dog"], "d": []}
    preds = {"a": "cat", "b": "fish", "c": "dog", "d": "bird"}  # best non-null spans
    na = {"a": 0.1, "b": 0.9, "c": 0.3, "d": 0.2}
    # Answer everything with na <= t. t < 0.1: all "" → 2/4. t = 0.1: a right → 3/4.
    # t = 0.2: d wrong → 2/4. t = 0.3: c right → 3/4. t = 0.9: b wrong → 2/4. Best 75 at 0.1.
    s = squad_evaluate(golds, preds, na_probs=na, na_prob_thresh=0.5)
    assert (s.best_exact, s.best_exact_thresh) == (75.0, 0.1)
    assert s.exact == 75.0  # at 0.5: a, c right; b ("fish" at 0.9) → "" right; d wrong
    na2 = {"a": 0.1, "b": 0.9, "c": 0.15, "d": 0.2}
    assert squad_evaluate(golds, preds, na_probs=na2).best_f1_thresh == 0.15  # a, c → 100%


def test_reader_v1_and_v2(tmp_path):
    ex1 = read_squad(squad_json(tmp_path / "d1.json", version="1.1"), version="1.1")
    assert len(ex1) == 9 and ex1[1].answers[1].startswith("the Zeta")
    assert all(e.context[e.answer_start:].startswith(e.answers[0]) for e in ex1)
    ex2 = read_squad(squad_json(tmp_path / "d2.json", version="2.0", impossible_every=2),
                     version="2.0")
    assert sum(e.is_impossible for e in ex2) == 6 and all(not e.answers for e in ex2
                                                          if e.is_impossible)


def test_reader_errors(tmp_path):
    with pytest.raises(SquadDataError, match=r"file missing; expected the official SQuAD v2.0"):
        read_squad(tmp_path / "nope.json", version="2.0")
    bad = {"data": [{"paragraphs": [{"context": "abc def", "qas": [
        {"id": "x1", "question": "?", "answers": [{"text": "def"}]}]}]}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(SquadDataError, match=r"bad\.json: question x1 malformed"):
        read_squad(tmp_path / "bad.json", version="1.1")
    with pytest.raises(SquadDataError, match="unknown SQuAD version"):
        read_squad(tmp_path / "bad.json", version="3")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = train_tokenizer(tmp_path_factory.mktemp("tok"))
    return Tokenizer.from_file(str(path / "tokenizer.json"))


def _long_example(i: int, answer_word_index: int) -> SquadExample:
    words = [f"w{j % 7}" if j != answer_word_index else "Zeta-9" for j in range(60)]
    context = " ".join(words)
    start = context.index("Zeta-9")
    return SquadExample(qid=f"q{i}", question="which zeta?", context=context,
                        answers=("Zeta-9",), answer_start=start)


def test_doc_stride_windows_map_answers_back_to_characters(tokenizer):
    examples = [_long_example(0, 5), _long_example(1, 40), _long_example(2, 59)]
    feats = featurize(examples, tokenizer, max_len=32, doc_stride=8, max_query=4)
    assert max(len(r) for r in feats.input_ids) <= 32
    per_example = [feats.example_index.count(i) for i in range(3)]
    assert min(per_example) > 1  # long contexts are split into several windows
    found = {i: 0 for i in range(3)}
    for f in range(len(feats)):
        ex = examples[feats.example_index[f]]
        ids = feats.input_ids[f]
        assert ids[0] == tokenizer.token_to_id("[CLS]") and ids[-1] == tokenizer.token_to_id("[SEP]")
        assert len(feats.segment_ids[f]) == len(ids) and feats.segment_ids[f][-1] == 1
        s, e = feats.start_positions[f], feats.end_positions[f]
        assert feats.is_impossible[f] == 0  # answerable questions: every window (per question)
        if s == 0:  # this window lacks the answer: both ends point at [CLS]
            assert e == 0
            continue
        a, b = feats.offsets[f][s][0], feats.offsets[f][e][1]
        assert ex.context[a:b] == "Zeta-9"  # token span → exact characters of the original
        found[feats.example_index[f]] += 1
    assert all(found.values())
    # every context token is the max-context token of exactly one window
    for i in range(3):
        tokens = {}
        for f in range(len(feats)):
            if feats.example_index[f] == i:
                for off, best in zip(feats.offsets[f], feats.max_context[f]):
                    if off is not None:
                        tokens[off] = tokens.get(off, 0) + int(best)
        assert set(tokens.values()) == {1}


def test_answerability_label_is_the_questions_in_every_window(tokenizer):
    """As the original's featurize: the answerability label is the question's ``is_impossible``
    in every window; a window without the answer has start = end = 0 ([CLS])."""
    words = [f"w{j % 7}" for j in range(60)]
    words[30] = "Zeta-9"
    context = " ".join(words)
    c0 = context.index("Zeta-9")
    examples = [SquadExample(qid="yes", question="which zeta?", context=context,
                             answers=("Zeta-9",), answer_start=c0),
                SquadExample(qid="no", question="which zeta?", context=context, answers=(),
                             answer_start=None, is_impossible=True)]
    feats = featurize(examples, tokenizer, max_len=32, doc_stride=20, max_query=8, training=True)
    # the answer's tokens, found here from the context's own encoding (not by featurize)
    enc = tokenizer.encode(context, add_special_tokens=False)
    answer = [off for off in enc.offsets if off[0] < c0 + len("Zeta-9") and off[1] > c0]
    assert len(answer) == 3  # zeta - 9
    windows = {i: [f for f in range(len(feats)) if feats.example_index[f] == i] for i in (0, 1)}
    assert len(windows[0]) >= 3 and len(windows[0]) == len(windows[1])
    holding = [f for f in windows[0] if all(off in feats.offsets[f] for off in answer)]
    assert len(holding) == 1  # the answer lies in exactly one window
    for f in windows[0]:
        assert feats.is_impossible[f] == 0  # answerable, also where the window lacks it
        if f in holding:
            s, e = feats.start_positions[f], feats.end_positions[f]
            assert (feats.offsets[f][s], feats.offsets[f][e]) == (answer[0], answer[-1])
            assert context[feats.offsets[f][s][0]:feats.offsets[f][e][1]] == "Zeta-9"
        else:
            assert feats.start_positions[f] == feats.end_positions[f] == 0
    for f in windows[1]:
        assert feats.is_impossible[f] == 1
        assert feats.start_positions[f] == feats.end_positions[f] == 0


def test_postprocess_recovers_gold_text_from_logits(tokenizer):
    examples = [_long_example(0, 5), _long_example(1, 40)]
    feats = featurize(examples, tokenizer, max_len=32, doc_stride=8, max_query=4)
    width = max(len(r) for r in feats.input_ids)
    start = np.full((len(feats), width), -5.0)
    end = np.full((len(feats), width), -5.0)
    for f in range(len(feats)):
        if feats.start_positions[f]:  # the window holds the answer
            start[f, feats.start_positions[f]] = 5.0
            end[f, feats.end_positions[f]] = 5.0
        start[f, 0] = end[f, 0] = 9.0  # [CLS] is never an answer span
    na = np.full(len(feats), 3.0)
    na[0] = -2.0  # example 0: most confident window says "answerable"
    preds = squad_data.postprocess(examples, feats, start, end, na_logits=na)
    assert preds["q0"].text == preds["q1"].text == "Zeta-9"
    assert preds["q0"].na_prob == -2.0  # the no-answer logit: the smallest over windows
    assert preds["q1"].na_prob == 3.0
    # max answer length: a span longer than the limit is never chosen
    capped = squad_data.postprocess(examples, feats, start, end, max_answer_len=1)
    assert all(len(p.text.split()) <= 1 for p in capped.values())
