"""Pretrained tokenizers from a Hugging Face model folder (pipelines.tokenizer_pretrained): the ids
transformers gives for the folder, the folder's own lower-casing, BERT's special-token ids, the
one-line refusals, and the identity that keys the tokenizer stage."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from common.config import ConfigError
from pipelines.config import CorpusConfig, TokenizerConfig
from pipelines.orchestration.stages import tokenizer_fingerprint
from pipelines.tokenizer import train_tokenizer
from pipelines.tokenizer_pretrained import load_pretrained
from pipelines.tokenizer_pretrained import open_pretrained
from synthetic.prose import documents
from tests.pipelines._hf_folders import BERT_SPECIAL_IDS, PAIRS, SENTENCES, bert_vocab, electra_folder, unigram_folder


def _hf(folder: Path, cls_name: str = "AutoTokenizer"):
    import transformers

    return getattr(transformers, cls_name).from_pretrained(str(folder), local_files_only=True)


def _assert_same_ids(ours: Tokenizer, hf) -> None:
    for text in SENTENCES:
        assert hf(text)["input_ids"] == ours.encode(text).ids, text
    for a, b in PAIRS:
        enc, got = ours.encode(a, b), hf(a, b, return_token_type_ids=True)
        assert (got["input_ids"], got["token_type_ids"]) == (enc.ids, enc.type_ids), (a, b)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.strip() == text
    return text


def _load(folder, tmp_path: Path, name: str = "out", **cfg):
    out = tmp_path / name
    return load_pretrained(str(folder), TokenizerConfig(**cfg), str(out)), out


@pytest.mark.parametrize("layout", ["saved", "released", "vocab-only"])
@pytest.mark.parametrize("do_lower_case,strip_accents", [(True, None), (False, None), (False, True)])
def test_model_folder_encodes_like_transformers(layout, do_lower_case, strip_accents, tmp_path):
    folder = electra_folder(tmp_path / "model", do_lower_case=do_lower_case, strip_accents=strip_accents,
                            layout=layout)
    info, out = _load(folder, tmp_path)
    assert (info.kind, info.vocab_size, info.lowercase) == ("pretrained", len(bert_vocab()), do_lower_case)
    assert info.special_tokens == BERT_SPECIAL_IDS  # the vocabulary's own ids, kept
    ours = Tokenizer.from_file(str(out / "tokenizer.json"))
    strip = do_lower_case if strip_accents is None else strip_accents
    assert ours.normalizer.normalize_str("Über") == {(True, True): "uber", (False, False): "Über",
                                                     (False, True): "Uber"}[(do_lower_case, strip)]
    for cls_name in ("ElectraTokenizerFast", "AutoTokenizer"):
        _assert_same_ids(ours, _hf(folder, cls_name))
    # The corpus's own tokenizer folder loads in transformers as before, with the same ids.
    assert (out / "vocab.txt").read_text(encoding="utf-8").splitlines() == bert_vocab()
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert (config["tokenizer_class"], config["do_lower_case"], config["strip_accents"]) == \
        ("BertTokenizerFast", do_lower_case, strip)
    for cls_name in ("ElectraTokenizerFast", "AutoTokenizer"):
        hf = _hf(out, cls_name)
        _assert_same_ids(ours, hf)
        ids = (hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id)
        assert ids == tuple(BERT_SPECIAL_IDS.values())


def test_trailing_slash_and_agreeing_flags_change_nothing(tmp_path):
    folder = electra_folder(tmp_path / "model", do_lower_case=False, layout="released")
    info, out = _load(folder, tmp_path, "a")
    again, out2 = _load(f"{folder}/", tmp_path, "b", lowercase=False, strip_accents=False)
    assert again == info
    assert (out / "tokenizer.json").read_bytes() == (out2 / "tokenizer.json").read_bytes()


def test_a_released_folder_without_tokenizer_config_is_uncased(tmp_path):
    """do_lower_case absent means BertTokenizer's default, True; never our config's defaults."""
    folder = electra_folder(tmp_path / "model", do_lower_case=False, layout="vocab-only")
    (folder / "tokenizer_config.json").unlink()
    info, out = _load(folder, tmp_path)
    assert info.lowercase is True
    _assert_same_ids(Tokenizer.from_file(str(out / "tokenizer.json")), _hf(folder, "ElectraTokenizerFast"))


@pytest.mark.parametrize("flags,key,wrong", [({"lowercase": True, "strip_accents": True}, "lowercase", "true"),
                                             ({"lowercase": False, "strip_accents": True}, "strip_accents", "true")])
def test_a_flag_against_the_folder_is_a_one_line_error(flags, key, wrong, tmp_path):
    folder = electra_folder(tmp_path / "model", do_lower_case=False, layout="released")
    with pytest.raises(ConfigError) as err:
        _load(folder, tmp_path, **flags)
    line = _one_line(err)
    assert line.startswith(f"tokenizer.{key}={wrong} contradicts {folder}/tokenizer_config.json "
                           f"(do_lower_case=false), which gives {key}=false")
    assert "drop --lowercase/--no-lowercase" in line
    assert not (tmp_path / "out").exists()
    # At planning, before any stage: the build's key needs the tokenizer's identity.
    cfg = CorpusConfig.from_dict({"tokenizer": {"pretrained": str(folder), **flags}})
    with pytest.raises(ConfigError, match=f"^tokenizer.{key}={wrong} contradicts"):
        tokenizer_fingerprint(cfg)


def test_a_folder_with_only_a_non_bert_tokenizer_json_is_used_as_it_is(tmp_path):
    folder = unigram_folder(tmp_path / "uni", lowercase=False)
    info, out = _load(folder, tmp_path)
    assert (info.kind, info.lowercase) == ("pretrained", False)
    assert info.special_tokens == dict(zip(BERT_SPECIAL_IDS, range(5)))  # its own ids, [PAD]=0
    ours = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert ours.normalizer.normalize_str("Über") == "Über"
    _assert_same_ids(ours, _hf(folder))
    _assert_same_ids(ours, _hf(out))
    assert not (out / "vocab.txt").exists()  # not a WordPiece: the BERT classes must refuse it
    with pytest.raises(ConfigError, match=r"^tokenizer\.lowercase=true contradicts .*uni/tokenizer\.json's normaliser"):
        _load(folder, tmp_path, "x", lowercase=True)


def test_a_folder_without_tokenizer_files_fails_in_one_line(tmp_path):
    folder = electra_folder(tmp_path / "model", layout="vocab-only")
    (folder / "vocab.txt").unlink()
    with pytest.raises(FileNotFoundError) as err:
        _load(folder, tmp_path)
    assert _one_line(err) == (f"{folder}: no pretrained tokenizer in this folder (looked for vocab.txt and "
                              "tokenizer.json, beside tokenizer_config.json; found neither)")
    cfg = CorpusConfig.from_dict({"tokenizer": {"pretrained": f"{folder}/"}})
    with pytest.raises(ConfigError, match=r"^tokenizer\.pretrained: .*found neither\)$"):
        tokenizer_fingerprint(cfg)
    with pytest.raises(ConfigError, match=r"^tokenizer\.pretrained: .*/nothere: pretrained tokenizer not found"):
        tokenizer_fingerprint(CorpusConfig.from_dict({"tokenizer": {"pretrained": str(tmp_path / "nothere")}}))
    assert not (tmp_path / "out").exists()


def _edit_config(folder: Path, **changes) -> None:
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_folder_at_odds_with_itself_is_refused_in_one_line(tmp_path):
    # tokenizer.json used as it is (no vocab.txt) with a BERT class whose flags say otherwise
    saved = electra_folder(tmp_path / "saved", do_lower_case=True)
    (saved / "vocab.txt").unlink()
    assert _load(saved, tmp_path, "ok")[0].lowercase  # transformers 5 saves no vocab.txt: fine as it is
    _edit_config(saved, do_lower_case=False)
    with pytest.raises(ValueError) as err:
        _load(saved, tmp_path)
    assert "tokenizer_config.json (tokenizer_class=\"BertTokenizer\", do_lower_case=false" in _one_line(err)
    assert "whose normaliser gives do_lower_case=true" in str(err.value)
    # a BERT class over a tokenizer.json that is not a BERT WordPiece
    uni = unigram_folder(tmp_path / "uni")
    _edit_config(uni, tokenizer_class="ElectraTokenizerFast")
    with pytest.raises(ValueError, match=r"names ElectraTokenizerFast, but .*tokenizer\.json is not a BERT WordPiece"):
        _load(uni, tmp_path)
    # vocab.txt and tokenizer.json with different vocabularies
    stale = electra_folder(tmp_path / "stale")
    (stale / "vocab.txt").write_text("".join(f"{t}\n" for t in bert_vocab()[:-1]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"stale: vocab\.txt and tokenizer\.json hold different vocabularies"):
        _load(stale, tmp_path)
    bad = electra_folder(tmp_path / "bad", layout="vocab-only")
    _edit_config(bad, do_lower_case="yes")
    with pytest.raises(ValueError, match=r'tokenizer_config\.json: do_lower_case="yes"; expected true or false$'):
        _load(bad, tmp_path)
    assert not (tmp_path / "out").exists()


def test_the_identity_covers_the_files_that_decide_the_tokenizer(tmp_path):
    folder = electra_folder(tmp_path / "model", layout="released")

    def fingerprint(location) -> dict:
        return tokenizer_fingerprint(CorpusConfig.from_dict({"tokenizer": {"pretrained": str(location)}}))

    first = fingerprint(folder)
    assert first["used"] == "vocab.txt" and set(first["files"]) == {"vocab.txt", "tokenizer.json",
                                                                    "tokenizer_config.json"}
    assert first["model_class"] == "BertTokenizer"  # no tokenizer_class: config.json's model type picks it
    (folder / "config.json").write_text('{"model_type": "electra", "hidden_size": 8}')  # only model_type counts
    shutil.copytree(folder, tmp_path / "moved")
    assert fingerprint(folder) == first == fingerprint(tmp_path / "moved")
    _edit_config(folder, do_lower_case=False)
    assert fingerprint(folder) != first
    (folder / "tokenizer.json").unlink()
    assert fingerprint(folder)["files"]["tokenizer.json"] is None
    # A single file keys by its content too, and a folder never keys like the file it holds.
    assert fingerprint(folder / "vocab.txt") == fingerprint(tmp_path / "moved" / "vocab.txt")
    assert fingerprint(folder / "vocab.txt") != fingerprint(folder)


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_a_corpus_tokenizer_folder_is_a_model_folder(kind, tmp_path):
    """The tokenizer/ folder a build writes (pipelines.tokenizer_files.hf_files) loads back as itself."""
    trained = tmp_path / "trained"
    info = train_tokenizer(documents(60, seed=2), TokenizerConfig(kind=kind, vocab_size=400, lowercase=False,
                                                                   strip_accents=False), str(trained))
    again, out = _load(trained, tmp_path)
    assert again.sha256 == info.sha256  # byte-identical: a WordPiece rebuilt from vocab.txt + config too
    assert (again.vocab_size, again.lowercase, again.special_tokens) == (info.vocab_size, False, info.special_tokens)
    ref, ours = Tokenizer.from_file(str(trained / "tokenizer.json")), Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in documents(20, seed=8) + SENTENCES:
        assert ours.encode(text).ids == ref.encode(text).ids
    used = open_pretrained(str(trained), TokenizerConfig()).used
    assert used == ("vocab.txt" if kind == "wordpiece" else "tokenizer.json")


def test_a_model_folder_in_a_bucket(tmp_path, s3_server):
    from common import storage

    folder = electra_folder(tmp_path / "model", do_lower_case=False, layout="released")
    bucket = s3_server.bucket("hfmodel")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "config.json"):
        storage.write_bytes(f"{bucket}/models/electra/{name}", (folder / name).read_bytes())
    local, _ = _load(folder, tmp_path, "local")
    for location in (f"{bucket}/models/electra", f"{bucket}/models/electra/"):
        assert load_pretrained(location, TokenizerConfig(), f"{bucket}/out") == local
    with pytest.raises(FileNotFoundError, match=r"models/nothing/: no pretrained tokenizer in this folder"):
        load_pretrained(f"{bucket}/models/nothing/", TokenizerConfig(), f"{bucket}/out2")
