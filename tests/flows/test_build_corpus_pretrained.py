"""End to end: ``build-corpus --tokenizer FOLDER`` with a Hugging Face model folder (a cased
ELECTRA-style download made with transformers, BERT's special-token ids).

The CLI (``cli.build_corpus.main``, Prefect's test harness, local Ray Data) builds a small
corpus with it: the manifest records the folder's lower-casing and the vocabulary's own special
ids, and the shards' examples are framed by them. ``--lowercase`` against the folder's
``do_lower_case=false`` fails in one line before any stage runs.
"""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from cli.build_corpus import main
from pipelines import schema
from synthetic import prose
from tests.pipelines._hf_folders import BERT_SPECIAL_IDS, bert_vocab, electra_folder

CONFIG = {"shard": {"min_shards_per_split": 1}}
FLAGS = ["--seq-len", "64", "--validation-fraction", "0.1", "--seed", "7"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pretrained")
    raw = root / "raw"
    raw.mkdir()
    with open(raw / "docs.jsonl", "w") as f:
        for doc in prose.documents(40, seed=5):
            f.write(json.dumps({"text": doc}) + "\n")
    (root / "corpus.json").write_text(json.dumps(CONFIG))
    model = electra_folder(root / "electra-small-cased", do_lower_case=False, layout="released")
    return {"root": root, "raw": raw, "config": root / "corpus.json", "model": model}


def _argv(inputs: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return ["--source", str(inputs["raw"]), "--out", str(out), "--config", str(inputs["config"]),
            "--tokenizer", f"{inputs['model']}/", *FLAGS, *extra]


def test_a_model_folder_tokenizes_the_corpus(inputs, ray_local, prefect_harness):
    out = inputs["root"] / "corpus"
    assert main(_argv(inputs, out)) == 0
    manifest = schema.Manifest.load(str(out))
    tok = manifest.tokenizer
    assert (tok.kind, tok.lowercase, tok.vocab_size) == ("pretrained", False, len(bert_vocab()))
    assert tok.special_tokens == BERT_SPECIAL_IDS
    assert (out / tok.path / "vocab.txt").read_text(encoding="utf-8").splitlines() == bert_vocab()
    examples = 0
    for shard in manifest.shards:
        with tarfile.open(out / shard.path) as tar:
            arrays = {m.name.split(".", 1)[1]: np.load(io.BytesIO(tar.extractfile(m).read()))
                      for m in tar.getmembers()}  # one chunk per shard at this size
        ids, layout = arrays["tokens.npy"], arrays["layout.npy"]
        start = 0
        for length, b_start in layout.tolist():
            ex = ids[start:start + length].tolist()
            start += length
            assert ex[0] == 101 and ex[-1] == 102 and ex[b_start - 1] == 102
            assert 0 not in ex and 1 not in ex[1:-1]  # no [PAD], no [unused0]
        examples += len(layout)
    assert examples == sum(s.num_examples for s in manifest.splits.values()) > 0


def test_lowercase_against_the_folder_fails_before_any_work(inputs, ray_local, prefect_harness, capsys):
    out = inputs["root"] / "refused"
    assert main(_argv(inputs, out, "--lowercase")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("build-corpus: error: tokenizer.lowercase=true contradicts ")
    assert "tokenizer_config.json (do_lower_case=false), which gives lowercase=false" in err[0]
    assert "drop --lowercase/--no-lowercase" in err[0]
    assert not (out / schema.MANIFEST_NAME).exists() and not (out / schema.WORK_DIR).exists()
