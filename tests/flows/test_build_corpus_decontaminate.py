"""End to end: ``build-corpus --decontaminate`` on a generated corpus and generated GLUE and SQuAD files.

The real build (``cli.build_corpus.main``, Prefect's test harness, local Ray Data) runs three
times on the same output: once; again with the same inputs; again after the MRPC dev file was
edited to lose the planted sentence. Tested: the document holding a 25-word sentence of MRPC's
dev file is quarantined with reason ``decontaminate:MRPC`` and the file and words in its detail;
documents sharing only 8 of its words, or a whole sentence of a train file, are kept to the end;
``manifest.json`` lists the protected files with the sha256 of their bytes and the documents each
task removed; the protected set is built once per build (a counting wrapper around
``pipelines.decontaminate.protected.build`` in this, the driver, process): once, then never for
the published build, then once for the edited dev file, whose new hash changes the filter
stage's key and so reruns filtering and everything after it, but not ingestion.
"""
from __future__ import annotations

import hashlib
import io
import json
import random
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import zstandard

import cli.build_corpus as build_corpus_module
from cli.build_corpus import main
from pipelines.corpus_job import corpus_config
from pipelines import schema
from pipelines.config import FilterConfig
from pipelines.decontaminate import protected as protect
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
from pipelines.filters import normalize_text
from synthetic import prose
from tests.pipelines.decontaminate.test_protected import (MRPC_HEADER, ref_ngrams, ref_tokens, sentence,
                                                          vocabulary, write_squad, write_tsv)

# slow: a whole build through the flow for one planted sentence; pipelines/decontaminate's tests run on every change
pytestmark = pytest.mark.slow

CONFIG = {"tokenizer": {"vocab_size": 700, "min_frequency": 1}, "shard": {"min_shards_per_split": 1},
          "rejected": {"full_text": True}}
FLAGS = ["--seq-len", "64", "--validation-fraction", "0.1", "--seed", "7", "--keep-cache"]
NUM_DOCS = 40
# 25 words, planted whole in one document; 8 of them in another.
PLANTED = ("The committee announced on Tuesday that the old bridge across the northern river would be "
           "closed for repairs until the end of next summer season")
EIGHT = "the old bridge across the northern river would"
TRAIN = ("Farmers in the southern valley said that the late spring rain had helped the orchards recover "
         "after two dry years of poor harvests")  # 25 words of MRPC's train file: never protected


def _with_sentence(doc: str, extra: str) -> str:
    lines = doc.split("\n")
    lines[0] = f"{lines[0]} {extra}."
    return "\n".join(lines)


def _write_inputs(root: Path) -> dict[str, Any]:
    rng, words = random.Random(4), vocabulary(seed=4)
    glue, squad = root / "glue_data", root / "squad" / "dev-v2.0.json"
    texts = write_tsv(glue / "CoLA" / "dev.tsv", [[f"src{i}", "1", "", sentence(rng, words, 15)] for i in range(4)])
    rows = [["1", "702876", "702977", PLANTED + ".", "The bridge will close for repairs, officials said."]]
    rows += [[str(i % 2), str(800 + i), str(900 + i), sentence(rng, words, 18), sentence(rng, words, 18)]
             for i in range(3)]
    texts += write_tsv(glue / "MRPC" / "dev.tsv", rows, MRPC_HEADER)
    texts += write_tsv(glue / "MRPC" / "test.tsv", [["0", "1", "2", sentence(rng, words, 20),
                                                     sentence(rng, words, 20)]], MRPC_HEADER)
    write_tsv(glue / "MRPC" / "train.tsv", [["1", "3", "4", TRAIN + ".", sentence(rng, words, 20)]], MRPC_HEADER)
    context = " ".join(sentence(rng, words, 20) for _ in range(3))
    texts += write_squad(squad, [(context, [(sentence(rng, words, 9), [context.split()[3]], False)])])
    protected = [glue / "CoLA" / "dev.tsv", glue / "MRPC" / "dev.tsv", glue / "MRPC" / "test.tsv", squad]

    docs = prose.documents(NUM_DOCS, seed=21)
    special = prose.documents(3, seed=99)
    planted = _with_sentence(special[0], PLANTED)
    eight = _with_sentence(special[1], EIGHT.capitalize() + " stay open")
    train = _with_sentence(special[2], TRAIN)
    assert ref_tokens(EIGHT) == ref_tokens(PLANTED)[6:14]
    docs[10:10] = [planted, eight, train]
    # The reference predicts what the build must do: only the planted document shares a window.
    grams = ref_ngrams(texts)
    assert [d for d in docs if ref_ngrams([d]) & grams] == [planted]
    raw = root / "raw"
    raw.mkdir()
    with open(raw / "docs.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    (root / "corpus.json").write_text(json.dumps(CONFIG))
    return {"raw": raw, "glue": glue, "squad": squad, "protected": protected, "planted": planted, "texts": texts,
            "eight": eight, "train": train, "config": root / "corpus.json"}


def _quarantine(out: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    # the quarantine's part lists the manifest names (not in manifest.json nor the flow's result)
    parsed = schema.Manifest.parse(json.dumps(manifest).encode(), "manifest")
    records = []
    for r in schema.read_rejected(str(out), parsed):
        blob = zstandard.ZstdDecompressor().stream_reader(io.BytesIO((out / r.path).read_bytes())).read()
        records += [{**json.loads(line), "stage": r.stage} for line in blob.decode().splitlines()]
    return records


def _kept(build: CorpusBuild) -> list[str]:
    """The texts the last document stage kept (keep_cache leaves them)."""
    return pq.read_table(build.cache("near_dedup") + "/data").column("text").to_pylist()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_local, prefect_harness) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("decontaminate")
    inp = _write_inputs(root)
    out = root / "corpus"
    argv = ["--source", str(inp["raw"]), "--out", str(out), "--config", str(inp["config"]), *FLAGS,
            "--decontaminate", str(inp["glue"]), "--decontaminate", str(inp["squad"])]
    cfg = corpus_config(config=str(inp["config"]), seq_len=64, validation_fraction=0.1, seed=7,
                        decontaminate=[str(inp["glue"]), str(inp["squad"])])
    calls: list[tuple[list[str], int]] = []
    real = protect.build

    def counting(paths: list[str], n: int):
        calls.append((list(paths), n))
        return real(paths, n)

    printed: list[str] = []

    def printing(*args: Any, **kwargs: Any) -> None:  # what main() prints to stdout, whoever swaps sys.stdout
        if kwargs.get("file") is None:
            printed.append(" ".join(map(str, args)))
        else:
            print(*args, **kwargs)

    def run() -> tuple[int, str, dict[str, Any], int]:
        before, printed[:] = len(calls), []
        rc = main(argv)
        return rc, "\n".join(printed), json.loads((out / schema.MANIFEST_NAME).read_text()), len(calls) - before

    facts: dict[str, Any] = {"inp": inp, "out": out}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(protect, "build", counting)
        mp.setattr(build_corpus_module, "print", printing, raising=False)
        first = CorpusBuild(CorpusJob([str(inp["raw"])], str(out), cfg))
        facts["plan1"] = first.plan()
        facts["rc1"], facts["stdout1"], facts["manifest1"], facts["calls1"] = run()
        facts["quarantine1"], facts["kept1"] = _quarantine(out, facts["manifest1"]), _kept(first)
        facts["bytes1"] = {str(p): p.read_bytes() for p in inp["protected"]}
        facts["calls_args"] = list(calls)
        facts["plan2"] = CorpusBuild(CorpusJob([str(inp["raw"])], str(out), cfg)).plan()
        facts["rc2"], facts["stdout2"], facts["manifest2"], facts["calls2"] = run()
        # The planted row goes from MRPC's dev file: its hash, and so the filter stage's key, change.
        dev = inp["glue"] / "MRPC" / "dev.tsv"
        dev.write_text("".join(line + "\n" for line in dev.read_text().splitlines() if "committee" not in line))
        edited = CorpusBuild(CorpusJob([str(inp["raw"])], str(out), cfg))
        facts["keys"], facts["edited_keys"], facts["plan3"] = first.keys, edited.keys, edited.plan()
        facts["rc3"], facts["stdout3"], facts["manifest3"], facts["calls3"] = run()
        facts["kept3"] = _kept(edited)
    return facts


def test_the_planted_dev_sentence_drops_its_document_with_the_tasks_reason(runs):
    assert runs["rc1"] == 0 and runs["calls1"] == 1
    planted = normalize_text(runs["inp"]["planted"], FilterConfig())
    mine = [r for r in runs["quarantine1"] if r["text"] == planted]
    assert len(mine) == 1, [r["reason"] for r in runs["quarantine1"] if "committee" in r["text"].lower()]
    (rec,) = mine
    assert rec["stage"] == "filter" and rec["reason"] == "decontaminate:MRPC"
    window = " ".join(ref_tokens(PLANTED)[:13])
    assert "dev.tsv" in rec["detail"] and f'"{window}"' in rec["detail"], rec["detail"]
    # Nothing in the corpus holds a 13-word window of a protected text (the reference's words).
    grams = ref_ngrams(runs["inp"]["texts"])
    assert len(runs["kept1"]) >= NUM_DOCS * 0.8 and not [k for k in runs["kept1"] if ref_ngrams([k]) & grams]
    # The only document decontamination dropped, and counted as such.
    assert [r["id"] for r in runs["quarantine1"] if r["reason"].startswith("decontaminate:")] == [rec["id"]]
    assert runs["manifest1"]["stats"]["filter"]["dropped"]["decontaminate:MRPC"] == 1
    assert runs["manifest1"]["stats"]["summary"]["dropped_by_reason"]["decontaminate:MRPC"] == 1


def test_eight_shared_words_and_a_train_sentence_do_not_drop(runs):
    kept = runs["kept1"]
    for name in ("eight", "train"):
        text = normalize_text(runs["inp"][name], FilterConfig())
        assert [r["reason"] for r in runs["quarantine1"] if r["text"] == text] == []
        # Kept to the end (C4 may only have rewritten its lines): its words are in the corpus.
        assert [k for k in kept if ref_tokens(k) == ref_tokens(text)], name


def test_manifest_lists_the_protected_files_and_the_documents_each_task_removed(runs):
    manifest = runs["manifest1"]
    decon = manifest["decontamination"]
    assert schema.Manifest.from_dict(manifest).decontamination == decon  # read back as written
    expected = []
    for path, task in zip(runs["inp"]["protected"], ["CoLA", "MRPC", "MRPC", "squad-v2.0"]):
        data = runs["bytes1"][str(path)]  # as they were for this build (MRPC's dev file is edited later)
        expected.append({"uri": str(path), "task": task, "sha256": hashlib.sha256(data).hexdigest(),
                         "bytes": len(data)})
    assert [{k: f[k] for k in ("uri", "task", "sha256", "bytes")} for f in decon["files"]] == expected
    assert decon["ngram"] == 13 and all(f["ngrams"] > 0 for f in decon["files"])
    assert decon["ngrams"] == len(ref_ngrams(runs["inp"]["texts"]))
    assert decon["removed"] == {"CoLA": 0, "MRPC": 1, "squad-v2.0": 0}
    assert manifest["config"]["decontaminate"] == {"paths": [str(runs["inp"]["glue"]), str(runs["inp"]["squad"])],
                                                   "ngram": 13}
    line = f"decontamination: {decon['ngrams']} 13-grams of 4 files; documents removed: CoLA 0, MRPC 1, squad-v2.0 0"
    assert line in runs["stdout1"].splitlines(), runs["stdout1"]


def test_the_manifest_sha256_is_of_the_bytes_the_build_read(runs):
    """The MRPC dev file was edited after the first build: the first manifest keeps the old hash,
    the third lists the new one, each equal to hashlib of the bytes at the time."""
    old, new = runs["manifest1"]["decontamination"]["files"][1], runs["manifest3"]["decontamination"]["files"][1]
    dev = runs["inp"]["glue"] / "MRPC" / "dev.tsv"
    assert new["uri"] == old["uri"] == str(dev)
    assert new["sha256"] == hashlib.sha256(dev.read_bytes()).hexdigest() != old["sha256"]
    assert new["bytes"] == dev.stat().st_size < old["bytes"]


def test_the_protected_set_is_built_once_per_build(runs):
    order = ["ingest", "filter", "exact_dedup", "near_dedup", "index", "tokenizer", "pack", "shard"]
    assert runs["plan1"] == order and runs["calls1"] == 1
    assert runs["calls_args"] == [([str(runs["inp"]["glue"]), str(runs["inp"]["squad"])], 13)]
    # Same inputs, published: nothing to run, nothing built, the same manifest.
    assert runs["plan2"] == [] and runs["rc2"] == 0 and runs["calls2"] == 0
    assert runs["manifest2"] == runs["manifest1"]
    # An edited dev file: a new filter key; ingestion is reused, filtering on reruns, built once.
    keys, edited = runs["keys"], runs["edited_keys"]
    assert edited["ingest"] == keys["ingest"] and all(edited[s] != keys[s] for s in order[1:])
    assert runs["plan3"] == order[1:] and runs["rc3"] == 0 and runs["calls3"] == 1


def test_after_the_edit_the_planted_document_is_kept(runs):
    decon = runs["manifest3"]["decontamination"]
    assert decon["removed"] == {"CoLA": 0, "MRPC": 0, "squad-v2.0": 0}
    assert not [r for r in runs["manifest3"]["stats"]["summary"]["dropped_by_reason"] if r.startswith("decontaminate")]
    planted = ref_tokens(normalize_text(runs["inp"]["planted"], FilterConfig()))
    assert [k for k in runs["kept3"] if ref_tokens(k) == planted]
    assert re.search(r"documents removed: CoLA 0, MRPC 0, squad-v2\.0 0$", runs["stdout3"], re.M), runs["stdout3"]
