"""The protected set (``pipelines.decontaminate.protected``) and its config section.

Tested: discovery of GLUE task folders, folders of them, SQuAD JSON files and folders of them
(train files never protected, a missing or empty path one ``ConfigError`` line naming it); the
set's contents against an independent reference (tuples of 13 words of the texts the generator
wrote, not parsed back from the files); ``record()`` and ``fingerprint`` against ``hashlib`` of
the file bytes; that the set holds hashes and no text; the filter stage's key (an edited dev file
changes it, an edited train file does not); ``DecontaminateConfig`` and
``corpus_config(decontaminate=...)``.

The generators here (``eval_tree``, ``ref_*``) are shared with ``test_check`` and the end-to-end
build test. Every evaluation file is generated in ``tmp_path`` in the real formats: GLUE TSVs
with their header rows (CoLA's dev file has none, as the real one), SQuAD v2.0 JSON.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import random
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common.config import ConfigError
from cli._errors import user_error
from pipelines.corpus_job import corpus_config
from pipelines.config import CorpusConfig, DecontaminateConfig
from pipelines.decontaminate.protected import ProtectedFile, build, discover, fingerprint
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.stages import STAGES, filter_fingerprint

N = 13

# ----------------------------------------------------------------------------- generators
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def vocabulary(size: int = 400, seed: int = 0) -> list[str]:
    """Made-up lower-case words (so a reference token is the word itself)."""
    rng, words = random.Random(seed), set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))))
    return sorted(words)


def sentence(rng: random.Random, words: list[str], n: int) -> str:
    text = " ".join(rng.choice(words) for _ in range(n))
    return text[0].upper() + text[1:] + rng.choice((".", "?", "!"))


def write_tsv(path: Path, rows: list[list[str]], header: list[str] | None = None) -> list[str]:
    """A GLUE-format TSV; returns every cell in file order (what the reader must take as texts)."""
    lines = ([header] if header else []) + rows
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(cells) + "\n" for cells in lines), encoding="utf-8")
    return [cell for cells in lines for cell in cells]


def write_squad(path: Path, paragraphs: list[tuple[str, list[tuple[str, list[str], bool]]]],
                version: str | None = "v2.0") -> list[str]:
    """A SQuAD-format JSON of one article; paragraphs are (context, [(question, answers,
    impossible)]); an impossible question's answers go to ``plausible_answers`` as in v2.0.
    Returns the texts in reading order: context, then each question and its answers."""
    texts, paras = [], []
    for p, (context, qas) in enumerate(paragraphs):
        texts.append(context)
        items = []
        for q, (question, answers, impossible) in enumerate(qas):
            texts += [question, *answers]
            spans = [{"text": a, "answer_start": max(0, context.find(a))} for a in answers]
            item = {"question": question, "id": f"q{p}-{q}", "is_impossible": impossible,
                    "answers": [] if impossible else spans}
            if impossible:
                item["plausible_answers"] = spans
            items.append(item)
        paras.append({"context": context, "qas": items})
    doc: dict[str, Any] = {"data": [{"title": "Generated", "paragraphs": paras}]}
    if version is not None:
        doc["version"] = version
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return texts


MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
MNLI_HEADER = ["index", "sentence1", "sentence2", "gold_label"]


def eval_tree(root: Path, seed: int = 0) -> dict[str, Any]:
    """``root/glue_data/{CoLA,MNLI,MRPC,WNLI}`` and ``root/squad``, with train files everywhere.

    Returns ``files``: ``(path, task, texts)`` of every dev/test file in discovery order (tasks
    sorted, then file names); ``pairs``: MRPC dev's (sentence1, sentence2); ``shared``: a
    sentence in both CoLA's test and MRPC's dev files; ``train``: sentences only train files hold;
    ``words``: the vocabulary (unrelated text is drawn from it too).
    """
    rng, words = random.Random(seed), vocabulary(seed=seed)
    g, files = root / "glue_data", []

    def s(lo: int = 14, hi: int = 30) -> str:
        return sentence(rng, words, rng.randint(lo, hi))

    shared = s(20, 20)
    train = [s(25, 25) for _ in range(4)]
    # CoLA: dev without a header (source, label, original label, sentence); test with one.
    cola_dev = [[f"src{i}", str(i % 2), "", s(5, 30)] for i in range(8)]
    files.append((g / "CoLA" / "dev.tsv", "CoLA", write_tsv(g / "CoLA" / "dev.tsv", cola_dev)))
    cola_test = [[str(i), s(5, 30)] for i in range(6)] + [["6", shared]]
    cola_test = write_tsv(g / "CoLA" / "test.tsv", cola_test, ["index", "sentence"])
    files.append((g / "CoLA" / "test.tsv", "CoLA", cola_test))
    write_tsv(g / "CoLA" / "train.tsv", [["src", "1", "", train[0]]])
    for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
        rows = [[str(i), s(), s(), "neutral"] for i in range(5)]
        files.append((g / "MNLI" / name, "MNLI", write_tsv(g / "MNLI" / name, rows, MNLI_HEADER)))
    write_tsv(g / "MNLI" / "train.tsv", [["0", train[1], s(), "neutral"]], MNLI_HEADER)
    pairs = [(s(), s()) for _ in range(6)] + [(shared, s())]
    mrpc_dev = [[str(i % 2), str(1000 + i), str(2000 + i), a, b] for i, (a, b) in enumerate(pairs)]
    files.append((g / "MRPC" / "dev.tsv", "MRPC", write_tsv(g / "MRPC" / "dev.tsv", mrpc_dev, MRPC_HEADER)))
    mrpc_test = [[str(i), str(3000 + i), str(4000 + i), s(), s()] for i in range(5)]
    files.append((g / "MRPC" / "test.tsv", "MRPC", write_tsv(g / "MRPC" / "test.tsv", mrpc_test, MRPC_HEADER)))
    write_tsv(g / "MRPC" / "train.tsv", [["1", "1", "2", train[2], s()]], MRPC_HEADER)
    write_tsv(g / "WNLI" / "train.tsv", [["0", train[3], s(), "1"]], MNLI_HEADER)  # no dev/test: no task
    (g / "README.txt").write_text("GLUE tasks, generated for the tests.\n")
    paragraphs = []
    for _ in range(3):
        context = " ".join(s() for _ in range(3))
        cw = context.split()
        answer = " ".join(cw[4:7])  # short: an answer alone never makes a window
        paragraphs.append((context, [(s(6, 14), [answer], False), (s(6, 14), [" ".join(cw[8:10])], True)]))
    squad = root / "squad" / "dev-v2.0.json"
    files.append((squad, "squad-v2.0", write_squad(squad, paragraphs)))
    write_squad(root / "squad" / "train-v2.0.json", [(train[0] + " " + s(), [(s(8, 8), [], True)])])
    return {"files": files, "pairs": pairs, "shared": shared, "train": train, "words": words,
            "glue": g, "squad": squad}


# ----------------------------------------------------------------------------- the reference
def ref_tokens(text: str) -> list[str]:
    """Written for the tests: NFKC, lower case, runs of letters and digits."""
    return re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).lower())


def ref_ngrams(texts: list[str], n: int = N) -> set[tuple[str, ...]]:
    out = set()
    for text in texts:
        t = ref_tokens(text)
        out.update(tuple(t[i:i + n]) for i in range(len(t) - n + 1))
    return out


def ref_owners(files: list[tuple[Path, str, list[str]]], n: int = N) -> dict[tuple[str, ...], int]:
    """Each protected n-gram -> index of the first file (in order) that holds it."""
    owner: dict[tuple[str, ...], int] = {}
    for i, (_, _, texts) in enumerate(files):
        for gram in ref_ngrams(texts, n):
            owner.setdefault(gram, i)
    return owner


@pytest.fixture
def tree(tmp_path) -> dict[str, Any]:
    return eval_tree(tmp_path)


def paths_of(tree: dict[str, Any]) -> list[str]:
    return [str(tree["glue"]), str(tree["squad"])]


# ----------------------------------------------------------------------------- discovery
def test_discovery_of_task_folders_folders_of_them_and_squad_files(tree, tmp_path):
    g, expected = tree["glue"], [ProtectedFile(str(p), t, "glue") for p, t, _ in tree["files"][:-1]]
    assert discover([str(g)]) == expected
    assert discover([str(g) + "/"]) == expected
    mrpc = [f for f in expected if f.task == "MRPC"]
    assert [Path(f.uri).name for f in mrpc] == ["dev.tsv", "test.tsv"]
    assert discover([str(g / "MRPC")]) == discover([str(g / "MRPC") + "/"]) == mrpc
    assert discover([str(g / "MRPC" / "dev.tsv")]) == mrpc[:1]  # a single TSV: task of its folder
    squad = ProtectedFile(str(tree["squad"]), "", "squad")
    assert discover([str(tree["squad"])]) == [squad]
    assert discover([str(tmp_path / "squad")]) == [squad]  # a folder holding dev*.json (and train*.json)
    # Paths in the order given, then discovery order within each.
    assert discover([str(tree["squad"]), str(g / "MRPC")]) == [squad, *mrpc]
    found = discover(paths_of(tree))
    assert [f.uri for f in found] == [str(p) for p, _, _ in tree["files"]]
    assert not [f for f in found if Path(f.uri).name.startswith("train")]
    # The task of a SQuAD file is its "version"; of a GLUE file, its folder.
    assert [f["task"] for f in build(paths_of(tree), N).files] == [t for _, t, _ in tree["files"]]
    write_squad(tmp_path / "v1" / "dev-v1.1.json", [("Some context here.", [])], version="1.1")
    assert build([str(tmp_path / "v1")], N).files[0]["task"] == "squad-v1.1"


def test_a_relative_tsv_path_is_named_after_its_folder(tree, monkeypatch):
    """``--decontaminate dev.tsv`` run inside ``glue_data/MRPC``: task MRPC, as with a full path."""
    monkeypatch.chdir(tree["glue"] / "MRPC")
    assert [f.task for f in discover(["dev.tsv"])] == ["MRPC"]
    assert [f.task for f in discover(["./dev.tsv"])] == ["MRPC"]
    monkeypatch.chdir(tree["glue"])
    assert [f.task for f in discover(["MRPC/dev.tsv", "MRPC"])] == ["MRPC"] * 3


def test_train_files_are_never_protected(tree):
    ps = build(paths_of(tree), N)
    assert all("train" not in Path(f["uri"]).name for f in ps.files)
    protected = set().union(*(ref_ngrams(texts) for _, _, texts in tree["files"]))
    train = ref_ngrams(tree["train"])
    assert train and not train & protected
    assert len(ps.hashes) == len(protected)  # nothing of the train files got in


def _missing(tmp: Path, name: str) -> Path:
    return tmp / name


def _only_train(tmp: Path) -> Path:
    write_tsv(tmp / "RTE" / "train.tsv", [["0", "a sentence", "another", "entailment"]], MNLI_HEADER)
    (tmp / "RTE" / "README.md").write_text("no dev set here\n")
    return tmp / "RTE"


def _tasks_with_only_train(tmp: Path) -> Path:
    for task in ("RTE", "QNLI"):
        write_tsv(tmp / "glue" / task / "train.tsv", [["0", "a sentence", "another", "entailment"]])
    return tmp / "glue"


def _empty(tmp: Path) -> Path:
    (tmp / "empty").mkdir()
    return tmp / "empty"


@pytest.mark.parametrize("make", [
    lambda t: _missing(t, "nope"), lambda t: _missing(t, "nope/dev.tsv"), lambda t: _missing(t, "dev-v2.0.json"),
    _only_train, _tasks_with_only_train, _empty,
], ids=["missing-folder", "missing-tsv", "missing-json", "only-train", "tasks-with-only-train", "empty"])
def test_missing_or_empty_path_is_one_config_error_line_naming_it(tmp_path, tree, make):
    bad = str(make(tmp_path))
    good = str(tree["glue"] / "MRPC")
    for call in (lambda: discover([good, bad]), lambda: build([bad], N), lambda: fingerprint([bad])):
        with pytest.raises(ConfigError) as err:
            call()
        line = str(err.value)
        assert bad in line and "\n" not in line and line.startswith("decontaminate.paths: ")
        assert user_error(err.value) == line  # what build-corpus prints
    # Found when the build is planned, before any stage runs.
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"text": "one document"}) + "\n")
    cfg = CorpusConfig.from_dict({"decontaminate": {"paths": [bad]}})
    with pytest.raises(ConfigError, match=re.escape(bad)):
        CorpusBuild(CorpusJob([str(raw)], str(tmp_path / "out"), cfg))


def test_a_json_file_that_is_not_squad_is_a_config_error_naming_it(tmp_path):
    bad = tmp_path / "qa" / "dev.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"rows": [{"question": "q"}]}))
    with pytest.raises(ConfigError, match=rf"{re.escape(str(bad))} is not a SQuAD JSON file") as err:
        build([str(tmp_path / "qa")], N)
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- the set
def test_record_lists_files_with_their_sha256_and_counts(tree):
    ps = build(paths_of(tree), N)
    files = []
    for path, task, texts in tree["files"]:
        data = path.read_bytes()
        files.append({"uri": str(path), "task": task, "sha256": hashlib.sha256(data).hexdigest(),
                      "bytes": len(data), "texts": len(texts),
                      "with_ngram": sum(len(ref_tokens(t)) >= N for t in texts), "ngrams": len(ref_ngrams(texts))})
    union = set().union(*(ref_ngrams(texts) for _, _, texts in tree["files"]))
    assert ps.record() == {"ngram": N, "ngrams": len(union), "files": files}
    assert json.loads(json.dumps(ps.record())) == ps.record()  # goes into manifest.json as is
    assert fingerprint(paths_of(tree)) == [(f["uri"], f["sha256"]) for f in files]
    # Every TSV cell is a text: the header's and the label's too (they make no window).
    cola_dev, mrpc_dev = files[0], files[4]
    assert cola_dev["texts"] == 8 * 4 and mrpc_dev["texts"] == (1 + 7) * 5


def test_set_is_sorted_unique_hashes_owned_by_the_first_file_and_holds_no_text(tree):
    ps = build(paths_of(tree), N)
    owners = ref_owners(tree["files"])
    assert ps.n == N and ps.hashes.dtype == np.uint64 and len(ps.hashes) == len(owners) > 100
    assert bool(np.all(ps.hashes[1:] > ps.hashes[:-1]))
    assert len(ps.source) == len(ps.hashes) and np.issubdtype(ps.source.dtype, np.integer)
    # How many n-grams each file owns: the shared sentence's belong to CoLA's test file, not MRPC's dev.
    owned = np.bincount(ps.source, minlength=len(tree["files"])).tolist()
    assert owned == [list(owners.values()).count(i) for i in range(len(tree["files"]))]
    shared = ref_ngrams([tree["shared"]])
    assert {owners[g] for g in shared} == {1} and len(shared) == 20 - N + 1
    # What travels to the workers: 8 + 4 bytes per n-gram and the file records, never the words.
    blob = pickle.dumps(ps)
    assert len(blob) < 12 * len(ps.hashes) + 4096
    for _, _, texts in tree["files"]:
        for text in texts:
            t = ref_tokens(text)
            if len(t) >= N:
                assert " ".join(t[:2]).encode() not in blob and t[0].encode() not in blob


def test_ngram_length_is_the_configured_one(tree):
    for n in (5, 8, 20):
        ps = build(paths_of(tree), n)
        union = set().union(*(ref_ngrams(texts, n) for _, _, texts in tree["files"]))
        assert ps.n == n and len(ps.hashes) == len(union)
        assert [f["ngrams"] for f in ps.files] == [len(ref_ngrams(texts, n)) for _, _, texts in tree["files"]]


def test_punctuation_case_bom_and_crlf_in_a_file_change_nothing(tmp_path, tree):
    """The same texts written with a BOM, CRLF line ends, other case and punctuation give the
    same set (only the sha256 differs)."""
    src = tree["glue"] / "MRPC" / "dev.tsv"
    text = src.read_text(encoding="utf-8")
    odd = "\ufeff" + text.upper().replace(" ", " -- ").replace("\n", "\r\n")
    (tmp_path / "x" / "MRPC").mkdir(parents=True)
    (tmp_path / "x" / "MRPC" / "dev.tsv").write_bytes(odd.encode("utf-8"))
    a, b = build([str(src)], N), build([str(tmp_path / "x" / "MRPC")], N)
    assert np.array_equal(a.hashes, b.hashes) and len(b.hashes) > 0
    assert a.files[0]["sha256"] != b.files[0]["sha256"]
    assert b.files[0]["ngrams"] == a.files[0]["ngrams"] and b.files[0]["texts"] == a.files[0]["texts"]


# ----------------------------------------------------------------------------- the stage key
def test_filter_key_covers_the_protected_files_bytes(tree, tmp_path):
    raw = tmp_path / "raw" / "a.jsonl"
    raw.parent.mkdir()
    raw.write_text(json.dumps({"text": "a document"}) + "\n")
    out = str(tmp_path / "out")
    cfg = CorpusConfig.from_dict({"decontaminate": {"paths": paths_of(tree)}})
    assert filter_fingerprint(cfg) == {"decontaminate": fingerprint(paths_of(tree))}
    assert filter_fingerprint(CorpusConfig()) == ""

    def keys(c: CorpusConfig = cfg) -> dict[str, str]:
        return CorpusBuild(CorpusJob([str(raw)], out, c)).keys

    before = keys()
    later = [s.name for s in STAGES][1:]  # every stage after ingest reads the filter's output
    dev = tree["glue"] / "MRPC" / "dev.tsv"
    dev.write_bytes(dev.read_bytes() + b"1\t9\t9\tone more pair\tof sentences\n")
    edited = keys()
    assert edited["ingest"] == before["ingest"]
    assert all(edited[s] != before[s] for s in later)
    train = tree["glue"] / "MRPC" / "train.tsv"
    train.write_bytes(train.read_bytes() + b"0\t1\t2\ta train pair\tchanges nothing\n")
    assert keys() == edited
    assert keys(CorpusConfig.from_dict({"decontaminate": {"paths": paths_of(tree), "ngram": 8}}))["filter"] \
        != edited["filter"]
    assert keys(CorpusConfig())["filter"] != edited["filter"]


# ----------------------------------------------------------------------------- config
def test_decontaminate_config_defaults_and_checks():
    assert CorpusConfig().decontaminate == DecontaminateConfig(paths=[], ngram=13)
    assert CorpusConfig.from_dict({"decontaminate": {"ngram": 5}}).decontaminate.ngram == 5
    with pytest.raises(ConfigError, match=r"^corpus config\.decontaminate: ngram must be >= 5"):
        CorpusConfig.from_dict({"decontaminate": {"ngram": 4}})
    with pytest.raises(ConfigError, match=r"decontaminate: unknown key\(s\) \['path'\]; "
                                          r"known keys: \['ngram', 'paths'\]"):
        CorpusConfig.from_dict({"decontaminate": {"path": ["glue_data"]}})
    with pytest.raises(ConfigError, match=r"decontaminate\.paths: expected a list"):
        CorpusConfig.from_dict({"decontaminate": {"paths": "glue_data"}})
    with pytest.raises(ConfigError, match=r"decontaminate\.ngram: expected int"):
        CorpusConfig.from_dict({"decontaminate": {"ngram": 13.5}})
    cfg = CorpusConfig.from_dict({"decontaminate": {"paths": ["a", "b"], "ngram": 8}})
    assert CorpusConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_decontaminate_flag_adds_to_the_config_files_paths(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"decontaminate": {"paths": ["c"], "ngram": 8}}))
    cfg = corpus_config(config=str(path), decontaminate=["a", "b"])
    assert (cfg.decontaminate.paths, cfg.decontaminate.ngram) == (["c", "a", "b"], 8)
    assert corpus_config(config=str(path)).decontaminate.paths == ["c"]
    assert corpus_config(decontaminate=["a"]).decontaminate == DecontaminateConfig(paths=["a"], ngram=13)
    assert corpus_config(config={"decontaminate": {"ngram": 21}}, decontaminate=["a"]).decontaminate == \
        DecontaminateConfig(paths=["a"], ngram=21)
    cfg = corpus_config(config=str(path), overrides=['decontaminate.paths=["o"]'], decontaminate=["a"])
    assert cfg.decontaminate.paths == ["o", "a"]


def test_decontaminate_flag_neither_mutates_nor_accumulates_in_a_config_mapping():
    """``build_corpus(config={...}, decontaminate=[...])`` twice in one process is the same build."""
    config = {"decontaminate": {"paths": ["c"]}}
    first = corpus_config(config=config, decontaminate=["a"])
    second = corpus_config(config=config, decontaminate=["a"])
    assert first.decontaminate.paths == second.decontaminate.paths == ["c", "a"]
    assert config == {"decontaminate": {"paths": ["c"]}}
