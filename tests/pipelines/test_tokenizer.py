"""Tokenizer training, pretrained loading, transformers compatibility and the corpus sample."""
from __future__ import annotations

import hashlib
import json
import random
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from common import storage
from pipelines import schema
from common.config import ConfigError
from pipelines.config import CorpusConfig, TokenizerConfig
from synthetic.prose import documents
from pipelines.tokenizer import train_tokenizer
from pipelines.tokenizer_pretrained import load_pretrained
from pipelines.tokenizer_sample import chosen_texts, train_on_sample, write_sample

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
    if json.loads(tok.model.__getstate__())["type"] == "WordPiece":
        lines = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
        assert len(lines) == info.vocab_size
        assert [tok.token_to_id(t) for t in lines] == list(range(len(lines)))
    else:  # a vocab.txt would read as a WordPiece vocabulary (transformers' BERT classes, load_pretrained)
        assert not (out / "vocab.txt").exists()
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
    assert (out2 / "tokenizer_config.json").read_bytes() == (out / "tokenizer_config.json").read_bytes()
    if kind == "wordpiece":
        assert (out2 / "vocab.txt").read_bytes() == (out / "vocab.txt").read_bytes()
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
    # A tokenizer.json decides its own lower-casing; a flag set against it is a one-line error.
    recopied = load_pretrained(str(tmp_path / "cased" / "tokenizer.json"), TokenizerConfig(),
                               str(tmp_path / "recopied"))
    assert not recopied.lowercase
    with pytest.raises(ConfigError, match=r"^tokenizer\.lowercase=true contradicts .*cased/tokenizer\.json's "
                                          r"normaliser, which gives lowercase=false: .*drop --lowercase") as err:
        load_pretrained(str(tmp_path / "cased" / "tokenizer.json"), TokenizerConfig(lowercase=True),
                        str(tmp_path / "refused"))
    assert "\n" not in str(err.value) and not (tmp_path / "refused").exists()
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


def _sample(ray, rows, folder, budget, seed, total, blocks=1):
    from pipelines.engine import parts

    out = parts.write_documents(ray.data.from_items(rows).repartition(blocks), data=str(folder / "docs"),
                                rejected=str(folder / "rej"), prefix_chars=5, full_text=False)
    docs = parts.Parts(str(folder / "docs"), tuple(out["files"]))
    sample = write_sample(docs, max_bytes=budget, seed=seed, total_bytes=total, folder=str(folder / f"s{seed}"))
    return chosen_texts(sample, budget), sample


def test_the_sample_is_bounded_sorted_and_independent_of_blocks(ray_local, tmp_path):
    texts = documents(300, seed=4)
    rows = [{"uid": (i * 0x9E3779B1) % (1 << 62), "text": t, "id": f"s:{i}", "reason": "", "detail": ""}
            for i, t in enumerate(texts)]
    total = sum(len(t.encode()) for t in texts)
    budget = total // 3
    sample, written = _sample(ray_local, rows, tmp_path / "a", budget, 1, total)
    size = sum(len(t.encode()) for t in sample)
    assert 0.8 * budget <= size <= budget
    # what the read tasks wrote is a superset with 10% slack, not the whole corpus
    assert budget <= sum(len(t.encode()) for t in chosen_texts(written, 10 * total)) <= 0.5 * total
    by_text = {r["text"]: r["uid"] for r in rows}
    assert [by_text[t] for t in sample] == sorted(by_text[t] for t in sample)
    assert _sample(ray_local, rows[::-1], tmp_path / "b", budget, 1, total, blocks=7)[0] == sample
    assert _sample(ray_local, rows, tmp_path / "c", budget, 2, total)[0] != sample  # the seed picks them
    everything = _sample(ray_local, rows, tmp_path / "d", 10 * total, 1, total)[0]
    assert sorted(everything) == sorted(texts)
    assert _sample(ray_local, rows, tmp_path / "e", 0, 1, total)[0] == []
    assert _sample(ray_local, rows, tmp_path / "f", budget, 1, 0)[0] == []
    # ``total_bytes`` only sets the keep rate: an overestimate keeps fewer, never more than the bound.
    fewer = _sample(ray_local, rows, tmp_path / "g", budget, 1, 3 * total)[0]
    assert set(fewer) <= set(texts) and sum(len(t.encode()) for t in fewer) <= budget


def test_training_runs_in_a_task_on_the_written_sample(ray_local, tmp_path):
    """The task's tokenizer equals one trained in-process on the same chosen texts."""
    texts = documents(120, seed=9)
    rows = [{"uid": 1000 + i, "text": t, "id": f"s:{i}", "reason": "", "detail": ""} for i, t in enumerate(texts)]
    total = sum(len(t.encode()) for t in texts)
    chosen, sample = _sample(ray_local, rows, tmp_path, total // 2, 3, total)
    cfg = TokenizerConfig(vocab_size=300, sample_bytes=total // 2)
    info, used = train_on_sample(sample, cfg, str(tmp_path / "task"))
    assert used == sum(len(t.encode()) for t in chosen)
    assert info == train_tokenizer(chosen, cfg, str(tmp_path / "here"))
    assert (tmp_path / "task" / "tokenizer.json").read_bytes() == (tmp_path / "here" / "tokenizer.json").read_bytes()


# ---------------------------------------------------------------- vocabulary hygiene (issue 10)
def _bert_isolates(ch: str) -> bool:
    """BERT's BasicTokenizer (google-research/bert tokenization.py), written out independently:
    whitespace, punctuation (ASCII symbol ranges and Unicode P*) and CJK ideographs are always a
    word of their own."""
    cp = ord(ch)
    if ch.isspace() or 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    if unicodedata.category(ch).startswith("P"):
        return True
    return any(lo <= cp <= hi for lo, hi in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                             (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF),
                                             (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def _mixed_corpus() -> list[str]:
    """English documents and CJK paragraphs (common and rare ideographs, CJK punctuation)."""
    rng = random.Random(3)
    common = [chr(0x4E00 + i) for i in range(300)]
    rare = [chr(0x6000 + i) for i in range(800)]  # most appear once or twice: ties at any cut
    cjk = []
    for _ in range(150):
        s = "".join(rng.choice(common) if rng.random() < 0.9 else rng.choice(rare) for _ in range(rng.randint(20, 120)))
        cjk.append(f"{s[:len(s) // 2]}，{s[len(s) // 2:]}。")
    return documents(120, seed=5) + ACCENTED + cjk


def test_wordpiece_has_no_entry_the_pipeline_cannot_produce(tmp_path):
    texts = _mixed_corpus()
    _, out = _train(texts, tmp_path, "mixed", vocab_size=1500, limit_alphabet=None)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    vocab = [t for t in tok.get_vocab() if t not in SPECIAL_IDS]
    continuations = [t[2:] for t in vocab if t.startswith("##")]
    assert continuations and not [x for x in continuations if any(_bert_isolates(c) for c in x)]
    assert sum(1 for t in vocab if len(t) == 1 and 0x4E00 <= ord(t) <= 0x9FFF) > 500  # CJK is in, as words
    # Most entries are used on the sample. The others are merge intermediates and single
    # characters that longer entries always cover there, and ##c of characters that only start
    # words in it: each of them comes out of some word (a witness is searched for).
    used = {t for e in tok.encode_batch(texts, add_special_tokens=False) for t in e.tokens}
    heads = [t for t in vocab if len(t) == 1 and not _bert_isolates(t)]
    unused = [t for t in vocab if t not in used]
    assert len(unused) < len(vocab) / 3
    for entry in unused:
        if entry.startswith("##"):
            assert any(tok.encode(h + entry[2:], add_special_tokens=False).tokens == [h, entry] for h in heads), entry
        else:
            assert tok.encode(entry, add_special_tokens=False).tokens == [entry]


def test_unigram_pieces_are_normalised_word_substrings(tmp_path):
    _, out = _train(_mixed_corpus(), tmp_path, "mixed-uni", kind="unigram", vocab_size=1500, limit_alphabet=None)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    pieces = [t for t in tok.get_vocab() if t not in SPECIAL_IDS]
    for piece in pieces:
        assert not any(c.isspace() for c in piece) and "\u2581" not in piece[1:], piece
        assert unicodedata.normalize("NFKC", piece) == piece and piece.lower() == piece, piece


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_limit_alphabet_keeps_the_most_frequent_characters(kind, tmp_path):
    texts = _mixed_corpus()
    # character_coverage 0: the limit alone (tests/pipelines/test_tokenizer_scripts.py: both rules)
    info, out = _train(texts, tmp_path, "lim", kind=kind, vocab_size=1500, limit_alphabet=200, character_coverage=0)
    again, _ = _train(texts, tmp_path, "lim2", kind=kind, vocab_size=1500, limit_alphabet=200, character_coverage=0)
    assert again.sha256 == info.sha256  # the cut falls among equally rare ideographs
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    counts = Counter(c for t in texts for c in tok.normalizer.normalize_str(t) if not c.isspace())
    ranked = sorted(counts, key=lambda c: (-counts[c], c))
    kept, dropped = set(ranked[:200]), ranked[200:]
    chars = {c for t in tok.get_vocab() if t not in SPECIAL_IDS for c in t.removeprefix("##")} - {"\u2581"}
    assert chars <= kept and dropped
    for c in dropped[:50] + dropped[-50:]:
        assert tok.encode(c, add_special_tokens=False).ids[-1] == SPECIAL_IDS["[UNK]"]
    frequent = "".join(c for c in ranked[:20] if not _bert_isolates(c))
    assert SPECIAL_IDS["[UNK]"] not in tok.encode(frequent, add_special_tokens=False).ids
    with pytest.raises(ConfigError, match="limit_alphabet"):
        CorpusConfig.from_dict({"tokenizer": {"limit_alphabet": 0}})
    with pytest.raises(ConfigError, match="character_coverage"):
        CorpusConfig.from_dict({"tokenizer": {"character_coverage": 1.5}})


HF_CLASSES = ("AutoTokenizer", "PreTrainedTokenizerFast", "BertTokenizerFast", "BertTokenizer",
              "ElectraTokenizerFast", "ElectraTokenizer")
PAIRS = [("Café Über the river.", "Zoë watched it quietly!"), ("The [MASK] Bridge", "x"),
         ("\u4e00\u4e01 river \u6001", "[SEP] and [CLS]")]


def check_hf_class(folder: Path, cls_name: str) -> str:
    """Load ``folder`` through transformers' ``cls_name``: the same ids and segments as our
    tokenizer.json on pairs with special tokens, or a loud error while the config names the
    class to use. Returns "same" or "refused"."""
    import transformers

    ours = Tokenizer.from_file(str(folder / "tokenizer.json"))
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        return "absent"
    config = json.loads((folder / "tokenizer_config.json").read_text())
    try:
        hf = cls.from_pretrained(str(folder), local_files_only=True)
    except TypeError:  # from the guard value (tokenizer_files.NOT_BERT), which names the classes to use
        assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
        assert "AutoTokenizer or PreTrainedTokenizerFast" in config["tokenize_chinese_chars"]
        return "refused"
    for a, b in PAIRS:
        enc, got = ours.encode(a, b), hf(a, b)
        assert got["input_ids"] == enc.ids and got["token_type_ids"] == enc.type_ids, (cls_name, a, b)
        assert hf(a)["input_ids"] == ours.encode(a).ids
    assert hf.pad_token_id == 0 and hf.mask_token_id == 4
    return "same"


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_every_transformers_class_loads_the_same_ids_or_refuses(kind, tmp_path):
    _, out = _train(_mixed_corpus(), tmp_path, "hfall", kind=kind, vocab_size=1500)
    got = {name: check_hf_class(out, name) for name in HF_CLASSES}
    generic = {"AutoTokenizer": "same", "PreTrainedTokenizerFast": "same"}
    bert = "same" if kind == "wordpiece" else "refused"
    assert got == {**generic, **{n: bert for n in HF_CLASSES if n not in generic}}
    # A vocab.txt is a WordPiece vocabulary to load_pretrained as well: only WordPiece writes one.
    assert (out / "vocab.txt").exists() == (kind == "wordpiece")
