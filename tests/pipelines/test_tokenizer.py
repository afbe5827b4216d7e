"""Tokenizer training, pretrained loading, transformers compatibility and the corpus sample."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from common import storage
from pipelines import schema
from pipelines.config import TokenizerConfig
from pipelines.synthetic import documents
from pipelines.tokenizer import load_pretrained, sample_texts, train_tokenizer

SPECIAL_IDS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
ACCENTED = ["Café Über naïve Élan façade. The River Crossed the Bridge.\nZoë watched it."] * 4


@pytest.fixture(scope="module")
def texts():
    return documents(150, seed=21) + ACCENTED


def _train(texts, tmp_path, name, **kw):
    out = tmp_path / name
    info = train_tokenizer(texts, TokenizerConfig(vocab_size=kw.pop("vocab_size", 600), **kw), str(out))
    return info, out


def _check_outputs(info, out: Path):
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert info.special_tokens == SPECIAL_IDS
    assert {t: tok.token_to_id(t) for t in schema.SPECIAL_TOKENS} == SPECIAL_IDS
    assert info.sha256 == hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
    assert info.path == schema.TOKENIZER_DIR  # the stage sets the corpus-relative folder
    assert info.vocab_size == tok.get_vocab_size()
    lines = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == info.vocab_size
    assert [tok.token_to_id(t) for t in lines] == list(range(len(lines)))
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 512
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*"))
    # The BERT post-processor is attached: pairs encode as [CLS] A [SEP] B [SEP].
    enc = tok.encode("the river", "the bridge")
    assert enc.ids[0] == 2 and enc.ids[-1] == 3 and enc.ids.count(3) == 2
    assert enc.type_ids == [0] * (enc.ids.index(3) + 1) + [1] * (len(enc.ids) - enc.ids.index(3) - 1)
    return tok, config


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_train_writes_files_and_is_deterministic(kind, texts, tmp_path):
    info, out = _train(texts, tmp_path, "a", kind=kind)
    tok, config = _check_outputs(info, out)
    assert info.kind == kind and 100 < info.vocab_size <= 600
    again, out2 = _train(texts, tmp_path, "b", kind=kind)
    assert again.sha256 == info.sha256
    assert (out2 / "tokenizer.json").read_bytes() == (out / "tokenizer.json").read_bytes()
    assert (out2 / "vocab.txt").read_bytes() == (out / "vocab.txt").read_bytes()
    if kind == "wordpiece":
        assert config["tokenizer_class"] == "BertTokenizerFast" and config["do_lower_case"] is True
        assert any(t.startswith("##") for t in tok.get_vocab())
        assert [t["content"] for t in json.loads(tok.to_str())["added_tokens"]] == list(SPECIAL_IDS)
    else:
        assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
        assert any(t.startswith("\u2581") for t in tok.get_vocab())


def test_real_vocab_size_is_recorded_on_a_tiny_corpus(tmp_path):
    info, out = _train(["the river and the bridge"] * 3, tmp_path, "tiny", vocab_size=30522)
    assert info.vocab_size < 200
    assert info.vocab_size == len((out / "vocab.txt").read_text().splitlines())


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_lowercase_and_strip_accents_switches(kind, texts, tmp_path):
    def tokens(**kw):
        _, out = _train(texts, tmp_path, f"{kind}-{kw['lowercase']}-{kw['strip_accents']}", kind=kind, **kw)
        tok = Tokenizer.from_file(str(out / "tokenizer.json"))
        return "".join(tok.encode("Café Über", add_special_tokens=False).tokens).replace("##", "")

    assert "cafe" in tokens(lowercase=True, strip_accents=True)
    assert "café" in tokens(lowercase=True, strip_accents=False)
    assert "Cafe" in tokens(lowercase=False, strip_accents=True)
    assert "Café" in tokens(lowercase=False, strip_accents=False)


@pytest.mark.parametrize("kind,lowercase", [("wordpiece", True), ("wordpiece", False), ("unigram", True)])
def test_transformers_autotokenizer_encodes_pairs_like_ours(kind, lowercase, texts, tmp_path):
    from transformers import AutoTokenizer

    _, out = _train(texts, tmp_path, "hf", kind=kind, lowercase=lowercase)
    ours = Tokenizer.from_file(str(out / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(out))
    for a, b in [("Café Über the river.", "Zoë watched it quietly!"), ("The Bridge", "x")]:
        enc, got = ours.encode(a, b), hf(a, b)
        assert got["input_ids"] == enc.ids
        assert got["token_type_ids"] == enc.type_ids
    assert hf.pad_token_id == 0 and hf.mask_token_id == 4 and hf.model_max_length == 512


def test_load_pretrained_tokenizer_json_and_vocab_txt(texts, tmp_path):
    info, out = _train(texts, tmp_path, "src", kind="wordpiece")
    copied = load_pretrained(str(out / "tokenizer.json"), TokenizerConfig(), str(tmp_path / "copy"))
    assert copied.kind == "pretrained" and copied.sha256 == info.sha256
    _check_outputs(copied, tmp_path / "copy")
    from_vocab = load_pretrained(str(out / "vocab.txt"), TokenizerConfig(), str(tmp_path / "fromvocab"))
    tok, _ = _check_outputs(from_vocab, tmp_path / "fromvocab")
    ref = Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in texts[:20]:
        assert tok.encode(text).ids == ref.encode(text).ids
    cased = load_pretrained(str(out / "vocab.txt"), TokenizerConfig(lowercase=False), str(tmp_path / "cased"))
    assert not cased.lowercase
    cased_tok = Tokenizer.from_file(str(tmp_path / "cased" / "tokenizer.json"))
    assert cased_tok.normalizer.normalize_str("River") == "River"
    # A tokenizer.json decides its own lower-casing, whatever the config says.
    recopied = load_pretrained(str(tmp_path / "cased" / "tokenizer.json"), TokenizerConfig(lowercase=True),
                               str(tmp_path / "recopied"))
    assert not recopied.lowercase
    config = json.loads((tmp_path / "recopied" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is False


def test_load_pretrained_rejects_bad_files(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    with pytest.raises(ValueError, match=r"vocab\.txt.*\[MASK\]"):
        load_pretrained(str(vocab), TokenizerConfig(), str(tmp_path / "out"))
    moved = tmp_path / "moved.txt"
    moved.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    with pytest.raises(ValueError, match=r"moved\.txt.*\[PAD\] has id 1"):
        load_pretrained(str(moved), TokenizerConfig(), str(tmp_path / "out"))
    dup = tmp_path / "dup.txt"
    dup.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nthe\n")
    with pytest.raises(ValueError, match=r"dup\.txt:7: duplicate"):
        load_pretrained(str(dup), TokenizerConfig(), str(tmp_path / "out"))
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer\.json"):
        load_pretrained(str(broken), TokenizerConfig(), str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="nothere"):
        load_pretrained(str(tmp_path / "nothere.json"), TokenizerConfig(), str(tmp_path / "out"))
    assert not (tmp_path / "out" / "tokenizer.json").exists()


def test_empty_sample_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no text"):
        train_tokenizer([], TokenizerConfig(), str(tmp_path))


def test_tokenizers_read_from_and_written_to_s3(texts, tmp_path, s3_server):
    """Any storage location: train into a bucket, load a pretrained one from it into another."""
    bucket = s3_server.bucket("tok")
    info = train_tokenizer(texts, TokenizerConfig(vocab_size=600), f"{bucket}/corpus/tokenizer/k1")
    local, local_out = _train(texts, tmp_path, "local")
    assert info == local  # byte-identical tokenizer.json, wherever it is written
    assert storage.listdir(f"{bucket}/corpus/tokenizer/k1") == sorted(schema.TOKENIZER_FILES)
    for name in schema.TOKENIZER_FILES:
        assert storage.read_bytes(f"{bucket}/corpus/tokenizer/k1/{name}") == (local_out / name).read_bytes()
    copied = load_pretrained(f"{bucket}/corpus/tokenizer/k1/vocab.txt", TokenizerConfig(), f"{bucket}/other")
    from_vocab = load_pretrained(str(local_out / "vocab.txt"), TokenizerConfig(), str(tmp_path / "fromvocab"))
    assert copied == from_vocab and copied.kind == "pretrained"
    with pytest.raises(FileNotFoundError, match=f"{bucket}/nothing.json"):
        load_pretrained(f"{bucket}/nothing.json", TokenizerConfig(), f"{bucket}/x")


def test_sample_texts_is_bounded_sorted_and_independent_of_blocks(ray_local):
    texts = documents(300, seed=4)
    rows = [{"uid": (i * 0x9E3779B1) % (1 << 62), "text": t, "id": f"s:{i}", "reason": ""}
            for i, t in enumerate(texts)]
    total = sum(len(t.encode()) for t in texts)
    budget = total // 3
    ds = ray_local.data.from_items(rows)
    sample = sample_texts(ds, budget, 1, total_bytes=total)
    size = sum(len(t.encode()) for t in sample)
    assert 0.8 * budget <= size <= budget
    by_text = {r["text"]: r["uid"] for r in rows}
    assert [by_text[t] for t in sample] == sorted(by_text[t] for t in sample)
    shuffled = ray_local.data.from_items(rows[::-1]).repartition(7)
    assert sample_texts(shuffled, budget, 1, total_bytes=total) == sample
    assert sample_texts(ds, budget, 2, total_bytes=total) != sample  # the seed picks the documents
    everything = sample_texts(ds, 10 * total, 1, total_bytes=total)
    assert sorted(everything) == sorted(texts)
    assert sample_texts(ds, 0, 1, total_bytes=total) == sample_texts(ds, budget, 1, total_bytes=0) == []
    # ``total_bytes`` only sets the keep rate: an overestimate keeps fewer, never more than the bound.
    fewer = sample_texts(ds, budget, 1, total_bytes=3 * total)
    assert set(fewer) <= set(texts) and sum(len(t.encode()) for t in fewer) <= budget
