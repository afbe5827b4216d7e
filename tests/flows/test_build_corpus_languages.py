"""build-corpus in another language, end to end through the CLI (Prefect's test harness, local Ray):

Chinese prose (tests/assets/languages: Debian Reference sections, grouped into pages) built with
the default (English) settings loses every document, and the CLI says so in one line with the
language and the fix; with ``--language zh`` the pages are kept (jieba words, the calibrated
profile), near-duplicates planted among them are removed, the tokenizer encodes them without
[UNK], and the manifest warns that the language-model block did not run for Chinese.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from cli.build_corpus import main
from pipelines import schema
from tests.pipelines._languages import documents
from tests.pipelines.language.test_dedup_by_script import mutate

CONFIG = {"shard": {"min_shards_per_split": 1}}
FLAGS = ["--seq-len", "128", "--validation-fraction", "0.1", "--seed", "7", "--vocab-size", "3000"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("languages")
    docs = documents("zh-cn") + documents("zh-tw")
    pages = ["\n\n".join(docs[i:i + 4]) for i in range(0, len(docs), 4)]
    rng = random.Random(3)
    near = [mutate(p, 0.02, seed=i) for i, p in enumerate(rng.sample(pages, 4))]
    with open(root / "zh.jsonl", "w") as f:
        for text in pages + near:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    (root / "corpus.json").write_text(json.dumps(CONFIG))
    return {"root": root, "pages": pages, "near": near}


def argv(inputs, out, *extra):
    return ["--source", str(inputs["root"] / "zh.jsonl"), "--out", str(out), "--config",
            str(inputs["root"] / "corpus.json"), *FLAGS, *extra]


def test_english_settings_on_chinese_say_why_in_one_line(inputs, ray_local, prefect_harness, capsys):
    out = inputs["root"] / "english"
    assert main(argv(inputs, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("build-corpus: error: filter kept 0 of ")
    assert "dropped documents' languages" in err[0] and "zh " in err[0]
    assert "fix: build with --language zh" in err[0]
    assert not (out / schema.MANIFEST_NAME).exists()


def test_language_zh_keeps_the_pages(inputs, ray_local, prefect_harness, capsys):
    out = inputs["root"] / "zh"
    assert main(argv(inputs, out, "--language", "zh")) == 0
    printed = capsys.readouterr().out
    manifest = schema.Manifest.load(str(out))
    stats = manifest.stats
    assert stats["filter"]["languages"] == {"zh": {"dropped": 0, "kept": len(inputs["pages"]) + 4}}
    assert stats["near_dedup"]["dropped"].get("dedup:near", 0) == 4  # the planted 2% copies
    assert any(w.startswith("language zh: lm_quality skipped") for w in manifest.warnings)
    assert "warning: language zh: lm_quality skipped" in printed
    tok = Tokenizer.from_file(str(out / manifest.tokenizer.path / "tokenizer.json"))
    ids = [i for p in inputs["pages"] for i in tok.encode(p).ids]
    assert ids.count(manifest.tokenizer.special_tokens["[UNK]"]) / len(ids) < 0.005
