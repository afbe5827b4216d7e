"""SQuAD pre-check: every fault names the file, the JSON path and the question; good sets count."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.squad_data import read_squad
from evaluation.squad_finetune import SquadDataError, check_squad_data, squad_files

from .glue_files import squad_json


def _doc(tmp: Path, version: str, seed: int) -> dict:
    """Two articles of the generator's data (3 paragraphs x 3 questions each), distinct ids."""
    arts = []
    for n in range(2):
        art = json.loads(squad_json(tmp / f"g{seed}{n}.json", version=version, seed=seed + n,
                                    impossible_every=2 if version == "2.0" else 0).read_text())
        for para in art["data"][0]["paragraphs"]:
            for qa in para["qas"]:
                qa["id"] = f"a{n}-{qa['id']}"
        arts += art["data"]
    return {"version": f"v{version}" if version == "2.0" else version, "data": arts}


def _write(squad_dir: Path, version: str, *, train=None, dev=None, raw: bytes | None = None):
    """Valid train/dev files, with ``train``/``dev`` mutations applied (``raw``: dev bytes)."""
    docs = {"train": _doc(squad_dir, version, 0), "dev": _doc(squad_dir, version, 10)}
    for split, mutate in (("train", train), ("dev", dev)):
        if mutate is not None:
            mutate(docs[split])
    train_path, dev_path = squad_files(squad_dir, version)
    train_path.write_text(json.dumps(docs["train"], indent=1))
    if raw is not None:
        dev_path.write_bytes(raw)
    else:
        dev_path.write_text(json.dumps(docs["dev"], indent=1))
    return docs


def _qa(d: dict, a: int, p: int, q: int) -> dict:
    return d["data"][a]["paragraphs"][p]["qas"][q]


def _count_questions(doc: dict) -> int:
    return sum(len(p["qas"]) for art in doc["data"] for p in art["paragraphs"])


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_valid_sets_pass_with_counts(tmp_path, version):
    def shift(d):  # two training answers no longer where answer_start says: counted, not fatal
        _qa(d, 0, 1, 1)["answers"][0]["answer_start"] += 3
        _qa(d, 1, 2, 1)["answers"][0]["answer_start"] = 10_000  # past the end of the context

    docs = _write(tmp_path, version, train=shift)
    counts = check_squad_data(tmp_path, version)
    assert counts == {"train": _count_questions(docs["train"]), "dev": _count_questions(docs["dev"]),
                      "train_misaligned": 2}
    assert counts["train"] == 18
    train = read_squad(squad_files(tmp_path, version)[0], version=version)
    assert [e.qid for e in train if e.misaligned] == ["a0-p1q1", "a1-p2q1"]
    if version == "2.0":
        assert sum(e.is_impossible for e in train) == 2 * 6


def _set(obj_path, key, value):
    def mutate(d):
        node = d
        for k in obj_path:
            node = node[k]
        if value is _DEL:
            del node[key]
        else:
            node[key] = value
    return mutate


_DEL = object()
QA = ("data", 1, "paragraphs", 2, "qas", 1)  # question a1-p2q1 at data[1].paragraphs[2].qas[1]
QA_PATH = "data[1].paragraphs[2].qas[1]"

CASES = {  # name: (version, split, mutation, substrings the message must contain)
    "no data": ("1.1", "train", _set((), "data", _DEL), ["top level: missing 'data'"]),
    "data not list": ("1.1", "dev", _set((), "data", {}), ["data: 'data' must be a list"]),
    "paragraphs type": ("1.1", "dev", _set(("data", 1), "paragraphs", {"x": 1}),
                        ["data[1].paragraphs: 'paragraphs' must be a list, got dict"]),
    "no context": ("2.0", "train", _set(("data", 1, "paragraphs", 2), "context", _DEL),
                   ["data[1].paragraphs[2]: missing 'context'"]),
    "no qas": ("1.1", "dev", _set(("data", 0, "paragraphs", 1), "qas", _DEL),
               ["data[0].paragraphs[1]: missing 'qas'"]),
    "no id": ("1.1", "dev", _set(QA, "id", _DEL), [f"{QA_PATH}: missing 'id'"]),
    "no question": ("2.0", "dev", _set(QA, "question", _DEL),
                    [f"question a1-p2q1 malformed at {QA_PATH}: missing 'question'"]),
    "answers type": ("1.1", "train", _set(QA, "answers", "Zeta"),
                     [f"a1-p2q1 malformed at {QA_PATH}.answers: 'answers' must be a list"]),
    "answer_start str": ("1.1", "dev", _set(QA + ("answers", 0), "answer_start", "12"),
                         [f"a1-p2q1 malformed at {QA_PATH}.answers[0].answer_start: "
                          "'answer_start' must be an integer, got str '12'"]),
    "answer_start float": ("2.0", "train", _set(QA + ("answers", 1), "answer_start", 12.0),
                           [f"{QA_PATH}.answers[1].answer_start", "a1-p2q1", "got float"]),
    "answer_start negative": ("1.1", "train", _set(QA + ("answers", 0), "answer_start", -1),
                              [f"{QA_PATH}.answers[0].answer_start: negative", "a1-p2q1"]),
    "answer text missing": ("1.1", "dev", _set(QA + ("answers", 0), "text", _DEL),
                            [f"a1-p2q1 malformed at {QA_PATH}.answers[0]: missing 'text'"]),
    "duplicate id": ("2.0", "dev", _set(QA, "id", "a0-p0q1"),
                     [f"question a0-p0q1 at {QA_PATH} repeats the id of "
                      "data[0].paragraphs[0].qas[1]"]),
    "v1.1 dev no answers": ("1.1", "dev", _set(QA, "answers", []),
                            [f"a1-p2q1 malformed at {QA_PATH}: no answers and not marked "
                             "is_impossible"]),
    "v2.0 answerable without answers": ("2.0", "train", _set(QA, "answers", []),
                                        [f"a1-p2q1 malformed at {QA_PATH}: no answers"]),
    "is_impossible type": ("2.0", "train", _set(QA, "is_impossible", "false"),
                           [f"{QA_PATH}.is_impossible: 'is_impossible' must be true/false"]),
    "impossible with answers": ("2.0", "dev", _set(QA, "is_impossible", True),
                                [f"a1-p2q1 malformed at {QA_PATH}: is_impossible but has 2 "
                                 "answers"]),
    "v2.0 question in v1.1": ("1.1", "dev", lambda d: _qa(d, 1, 2, 1).update(
        answers=[], is_impossible=True), [f"question a1-p2q1 at {QA_PATH} is_impossible: a "
                                          "SQuAD v2.0 question in a file read as v1.1"]),
    "version field": ("1.1", "train", _set((), "version", "v2.0"),
                      ["the file says version 'v2.0' but SQuAD v1.1 was asked"]),
    "article not object": ("2.0", "dev", lambda d: d["data"].append([1]),
                           ["malformed at data[2]: expected an object, got list"]),
}


@pytest.mark.parametrize("name", CASES)
def test_each_fault_names_file_and_path(tmp_path, name):
    version, split, mutate, expected = CASES[name]
    _write(tmp_path, version, **{split: mutate})
    bad = squad_files(tmp_path, version)[0 if split == "train" else 1]
    with pytest.raises(SquadDataError) as err:
        check_squad_data(tmp_path, version)
    msg = str(err.value)
    assert msg.startswith(f"{bad}: ")
    for part in expected:
        assert part in msg
    assert isinstance(err.value, ValueError)


def _cut_json(tmp_path: Path) -> tuple[bytes, int, int]:
    """Dev bytes cut mid-file, and the line:column where the JSON ends, counted by hand."""
    text = json.dumps(_doc(tmp_path, "1.1", 5), indent=1)
    cut = text[: text.index("\n", len(text) // 2)]  # a whole line: the JSON ends at the cut
    return cut.encode(), cut.count("\n") + 1, len(cut) - cut.rfind("\n")


def test_invalid_json_names_line_and_column(tmp_path):
    raw = b'{\n "version": "1.1",\n "data": [\n  {"paragraphs": [}\n ]\n}\n'
    _write(tmp_path, "1.1", raw=raw)
    dev = squad_files(tmp_path, "1.1")[1]
    # line 4 is '  {"paragraphs": [}': the "}" that cannot start a value is its 19th character
    with pytest.raises(SquadDataError, match=rf"^{dev}:4:19: invalid JSON"):
        check_squad_data(tmp_path, "1.1")
    raw, line, col = _cut_json(tmp_path)
    _write(tmp_path, "1.1", raw=raw)
    with pytest.raises(SquadDataError, match=rf"^{dev}:{line}:{col}: invalid JSON"):
        check_squad_data(tmp_path, "1.1")


def test_unreadable_and_missing_files(tmp_path):
    _write(tmp_path, "2.0", raw=b'{"data": "\xff"}')
    dev = squad_files(tmp_path, "2.0")[1]
    with pytest.raises(SquadDataError, match=rf"^{dev}: byte 10: not UTF-8"):
        check_squad_data(tmp_path, "2.0")
    dev.unlink()
    with pytest.raises(SquadDataError, match=rf"^{dev}: file missing"):
        check_squad_data(tmp_path, "2.0")


def test_reader_and_check_agree(tmp_path):
    """One parser: the fine-tuning reader raises the very error the pre-check raised."""
    _write(tmp_path, "2.0", dev=_set(QA, "answers", []))
    with pytest.raises(SquadDataError) as pre:
        check_squad_data(tmp_path, "2.0")
    with pytest.raises(SquadDataError) as late:
        read_squad(squad_files(tmp_path, "2.0")[1], version="2.0")
    assert str(pre.value) == str(late.value)
    assert str(pre.value).count(QA_PATH) == 1
