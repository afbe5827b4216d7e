"""The tokenizer's coverage: its [UNK] share and bytes per token on a bounded sample, a warning above
1%, an error above ``tokenizer.max_unk_share`` (``pipelines.tokenizer_coverage``).

End to end (``CorpusBuild``, real Ray Data) on a small generated corpus: a model folder whose
tokenizer has only the 5 special tokens, made by transformers exactly as the issue's user made it
(``BertTokenizerFast(vocab_file=...)`` ignores the file; ``save_pretrained`` writes what is left),
fails in one line naming the folder and the share, and builds once the threshold allows it; a
vocabulary that misses a script warns once; a trained tokenizer does not warn. Every measured
share is checked against a count made here with ``tokenizers`` over the whole corpus.
"""
from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path

import pyarrow as pa
import pytest
from tokenizers import Tokenizer

from cli._errors import user_error
from common.config import ConfigError
from pipelines import schema
from pipelines.config import CorpusConfig, TokenizerConfig
from pipelines.corpus_job import CorpusJob
from pipelines.engine.part_list import PartList
from pipelines.engine.parts import Parts, write_parquet
from pipelines.orchestration.runner import CorpusBuild
from pipelines.orchestration.summary import closing_lines
from pipelines.tokenizer_coverage import MEASURE_BYTES, Coverage, UncoveredText, count, review
from pipelines.tokenizer_sample import measure_sample, write_sample
from synthetic import prose
from tests.pipelines._hf_folders import electra_folder, write_vocab

CFG = {"filter": {"blocks": []}, "dedup": {"near": False}, "shard": {"min_shards_per_split": 1},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7},
       "tokenizer": {"vocab_size": 600, "min_frequency": 1}}
GREEK = "αλφα βητα γαμμα δελτα εψιλον ζητα ητα θητα ιωτα καππα λαμδα μυ νυ ξι ομικρον πι ρω σιγμα".split()


def five_token_folder(folder: Path) -> Path:
    """What transformers 5 saves for ``BertTokenizerFast(vocab_file=...)``: the file is ignored,
    the tokenizer holds the 5 special tokens."""
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast(vocab_file=str(write_vocab(folder.parent / f"{folder.name}-vocab.txt")))
    assert len(tok) == 5  # the premise: transformers ignored the vocabulary
    tok.save_pretrained(str(folder))
    return folder


def with_greek(docs: list[str], words: int, seed: int) -> list[str]:
    """Each document with a line of ``words`` Greek words (none of them in ``bert_vocab``)."""
    rng = random.Random(seed)
    return [f"{d}\n{' '.join(rng.choice(GREEK) for _ in range(words))}" for d in docs]


def write_raw(folder: Path, docs: list[str]) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    return folder


def build(raw: Path, out: Path, **tokenizer) -> CorpusBuild:
    cfg = json.loads(json.dumps(CFG))
    cfg["tokenizer"].update(tokenizer)
    return CorpusBuild(CorpusJob([str(raw)], str(out), CorpusConfig.from_dict(cfg)))


def independent_count(tokenizer_json: Path, docs: list[str]) -> tuple[int, int, int]:
    """(UTF-8 bytes, tokens, [UNK] tokens) of ``docs``, each non-empty line encoded without
    special tokens by ``tokenizers`` itself."""
    tok = Tokenizer.from_file(str(tokenizer_json))
    unk = tok.token_to_id("[UNK]")
    lines = [line for d in docs for line in d.splitlines() if line.strip()]  # as pack reads a document
    ids = [i for e in tok.encode_batch(lines, add_special_tokens=False) for i in e.ids]
    return sum(len(d.encode()) for d in docs), len(ids), ids.count(unk)


def check_measured(manifest: schema.Manifest, docs: list[str], tokenizer_json: Path) -> None:
    """The tokenizer stage measured the whole (small) corpus: its figures are the independent count's."""
    nbytes, tokens, unk = independent_count(tokenizer_json, docs)
    stats = manifest.stats["tokenizer"]
    sample = stats["coverage_sample"]
    got = (sample["texts"], sample["bytes"], sample["tokens"], sample["unk_tokens"])
    assert got == (len(docs), nbytes, tokens, unk)
    assert stats["unk_share"] == pytest.approx(unk / tokens, abs=1e-6)
    assert stats["bytes_per_token"] == pytest.approx(nbytes / tokens, abs=1e-3)
    summary = manifest.stats["summary"]
    assert summary["unk_share"]["sample"] == stats["unk_share"]
    assert summary["text_bytes_per_token"] == stats["bytes_per_token"]
    # The pack stage's exact count: the examples hold the text's tokens but those packing cuts off
    # (ELECTRA's packer drops what overshoots an example: 8% of them at this seq_len).
    splits = manifest.stats["pack"]["splits"]
    assert set(summary["unk_share"]) == {"sample", *splits}
    kept = sum(s["text_tokens"] for s in splits.values())
    assert 0 < kept <= tokens
    assert unk - (tokens - kept) <= sum(s["unk_tokens"] for s in splits.values()) <= unk
    for split, s in splits.items():
        assert summary["unk_share"][split] == pytest.approx(s["unk_tokens"] / s["text_tokens"], abs=1e-6)


# ----------------------------------------------------------------------------- end to end
def test_a_five_token_tokenizer_fails_in_one_line_and_builds_when_allowed(tmp_path, ray_local):
    docs = prose.documents(40, seed=5)
    raw = write_raw(tmp_path / "raw", docs)
    model = five_token_folder(tmp_path / "model")
    out = tmp_path / "out"
    with pytest.raises(UncoveredText) as failed:
        build(raw, out, pretrained=f"{model}/").run()
    line = str(failed.value)
    assert isinstance(failed.value, ConfigError) and "\n" not in line and user_error(failed.value) == line
    assert line == (f"tokenizer.pretrained={model}/: 100.0% of the sample's tokens are [UNK] "
                    f"({sum(len(d.encode()) for d in docs) / independent_count(model / 'tokenizer.json', docs)[1]:.1f}"
                    " bytes per token): this tokenizer does not cover the text (a 5-token vocabulary); use another "
                    "--tokenizer, or allow it with --set tokenizer.max_unk_share=1.00")
    assert not (out / schema.MANIFEST_NAME).exists()

    manifest = build(raw, out, pretrained=f"{model}/", max_unk_share=1.0).run()
    check_measured(manifest, docs, model / "tokenizer.json")
    assert manifest.stats["tokenizer"]["unk_share"] == 1.0
    assert all(s == 1.0 for s in manifest.stats["summary"]["unk_share"].values())  # every text token
    (warning,) = manifest.warnings
    assert warning.startswith(f"tokenizer.pretrained={model}/: 100.0% of the sample's tokens are [UNK] (")
    assert schema.Manifest.load(str(out)).stats["summary"] == manifest.stats["summary"]  # what manifest.json says

    # The threshold is not in the stages' keys: the same build at the default threshold and
    # another seq_len reuses the measured tokenizer and is refused before pack runs again.
    cfg = json.loads(json.dumps(CFG))
    cfg["tokenizer"]["pretrained"], cfg["pack"]["seq_len"] = f"{model}/", 32
    again = CorpusBuild(CorpusJob([str(raw)], str(out), CorpusConfig.from_dict(cfg)))
    assert again.keys["tokenizer"] == build(raw, out, pretrained=f"{model}/", max_unk_share=1.0).keys["tokenizer"]
    with pytest.raises(UncoveredText, match=r"100\.0% of the sample's tokens are \[UNK\]"):
        again.plan()


def test_a_vocabulary_missing_a_script_warns_once(tmp_path, ray_local):
    docs = with_greek(prose.documents(40, seed=5), 30, seed=1)
    raw = write_raw(tmp_path / "raw", docs)
    model = electra_folder(tmp_path / "model", layout="released")
    manifest = build(raw, tmp_path / "out", pretrained=f"{model}/").run()
    check_measured(manifest, docs, model / "tokenizer.json")  # transformers' own tokenizer.json
    share = manifest.stats["tokenizer"]["unk_share"]
    assert 0.01 < share < 0.2
    bpt = manifest.stats["tokenizer"]["bytes_per_token"]
    assert manifest.warnings == [f"tokenizer.pretrained={model}/: {share:.1%} of the sample's tokens are [UNK] "
                                 f"({bpt:.1f} bytes per token); check that the tokenizer covers this text's scripts"]
    printed = closing_lines(manifest.to_dict(), str(tmp_path / "out"))
    assert [line for line in printed if line.startswith("warning: ")] == [f"warning: {manifest.warnings[0]}"]
    assert f"tokenizer: [UNK] {share:.2%} of the sample's tokens (" in "\n".join(printed)


def test_a_trained_tokenizer_records_its_coverage_without_a_warning(tmp_path, ray_local):
    docs = prose.documents(40, seed=5)
    raw = write_raw(tmp_path / "raw", docs)
    out = tmp_path / "out"
    manifest = build(raw, out).run()
    check_measured(manifest, docs, out / manifest.tokenizer.path / "tokenizer.json")
    assert manifest.warnings == [] and manifest.stats["tokenizer"]["warnings"] == []
    assert manifest.stats["tokenizer"]["unk_share"] == 0.0 and 2 < manifest.stats["tokenizer"]["bytes_per_token"] < 6
    assert manifest.stats["summary"]["unk_share"] == {"sample": 0.0, "train": 0.0, "validation": 0.0}


# ----------------------------------------------------------------------------- the parts
def _parts(folder: Path, texts: list[str], pieces: int) -> Parts:
    """``texts`` (uid = position) as ``pieces`` Parquet parts, in an order of their own."""
    table = pa.table({"uid": list(range(len(texts))), "text": texts})
    order = random.Random(pieces).sample(range(len(texts)), len(texts))
    size = -(-len(texts) // pieces)
    written = [write_parquet(str(folder), f"part-{i:03d}.parquet", table.take(order[i * size:(i + 1) * size]))
               for i in range(pieces)]
    return Parts(str(folder), PartList.of(written))


def _wordpiece(path: Path, texts: list[str], vocab_size: int = 30522) -> Path:
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizers.BertNormalizer(), pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"]))
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    return path


def test_the_measurement_depends_on_the_documents_not_on_their_parts(tmp_path, ray_local):
    """The same documents in 1 part or in 7 (as another cluster's shuffles would leave them): the
    same sample, the same figures; bounded by ``max_bytes``."""
    texts = with_greek(prose.documents(300, seed=4), 3, seed=2)
    tok = _wordpiece(tmp_path / "tok", prose.documents(50, seed=4), vocab_size=400)  # no Greek: [UNK]
    total = sum(len(t.encode()) for t in texts)
    got = []
    for pieces in (1, 7):
        parts = _parts(tmp_path / f"parts{pieces}", texts, pieces)
        sample = write_sample(parts, max_bytes=total // 3, seed=5, total_bytes=total,
                              folder=str(tmp_path / f"sample{pieces}"))
        got.append(dataclasses.replace(measure_sample(sample, str(tok), total // 3), seconds=0.0))
    assert got[0] == got[1]
    assert total // 3 - 3000 < got[0].bytes <= total // 3 and 0 < got[0].unk_tokens < got[0].tokens


def test_count_is_the_line_by_line_encoding_without_special_tokens():
    from tokenizers import models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    got = count(tok, ["a b c\n\n  \nb d", "é"])
    assert (got.texts, got.bytes, got.tokens, got.unk_tokens) == (2, 15, 6, 3)
    assert got.unk_share == 0.5 and got.bytes_per_token == 2.5


def test_the_warning_and_the_error_name_the_tokenizer_and_the_share():
    pretrained = TokenizerConfig(pretrained="s3://b/model/")
    assert review(Coverage(texts=9, bytes=4000, tokens=1000, unk_tokens=10), pretrained, 30522) == []
    assert review(Coverage(texts=9, bytes=2900, tokens=1000, unk_tokens=375), TokenizerConfig(pretrained="/m",
                  max_unk_share=0.5), 30522) == [
        "tokenizer.pretrained=/m: 37.5% of the sample's tokens are [UNK] (2.9 bytes per token); check that the "
        "tokenizer covers this text's scripts"]
    with pytest.raises(UncoveredText, match=r"^tokenizer\.pretrained=s3://b/model/: 96\.0% of the sample's tokens "
                       r"are \[UNK\] \(35\.1 bytes per token\): this tokenizer does not cover the text \(a 5-token "
                       r"vocabulary\); use another --tokenizer, or allow it with --set "
                       r"tokenizer\.max_unk_share=0\.97$"):
        review(Coverage(texts=9, bytes=35100, tokens=1000, unk_tokens=960), pretrained, 5)
    with pytest.raises(UncoveredText, match=r"^the trained tokenizer: 25\.0% .* \(a 500-token vocabulary\); raise "
                       r"--vocab-size or tokenizer\.character_coverage"):
        review(Coverage(texts=1, bytes=4000, tokens=1000, unk_tokens=250), TokenizerConfig(), 500)
    # The threshold is the user's: below the warning level too, and 1 allows everything.
    with pytest.raises(UncoveredText):
        review(Coverage(tokens=1000, unk_tokens=5), TokenizerConfig(max_unk_share=0.001), 500)
    assert len(review(Coverage(tokens=10, unk_tokens=10), TokenizerConfig(max_unk_share=1), 5)) == 1
    assert review(Coverage(), TokenizerConfig(), 5) == []  # no text, no tokens: nothing to say


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_max_unk_share_is_checked_at_load_time(value):
    with pytest.raises(ConfigError, match=r"tokenizer: max_unk_share must be in \[0, 1\]"):
        CorpusConfig.from_dict({"tokenizer": {"max_unk_share": value}})
    assert CorpusConfig.from_dict({"tokenizer": {"max_unk_share": 1}}).tokenizer.max_unk_share == 1


def test_measuring_the_bound_costs_about_a_second(tmp_path, ray_local):
    """MEASURE_BYTES of prose through a WordPiece trained here, in the measuring task."""
    texts = prose.documents(4800, seed=9)  # 7 MB
    parts = _parts(tmp_path / "parts", texts, 16)
    total = sum(len(t.encode()) for t in texts)
    sample = write_sample(parts, max_bytes=MEASURE_BYTES, seed=1, total_bytes=total, folder=str(tmp_path / "sample"))
    tok = _wordpiece(tmp_path / "tok", texts[:200])
    start = time.perf_counter()
    got = measure_sample(sample, str(tok), MEASURE_BYTES)
    wall = time.perf_counter() - start
    assert MEASURE_BYTES - 5000 < got.bytes <= MEASURE_BYTES
    print(f"measured {got.bytes / 1e6:.2f} MB, {got.tokens} tokens: {got.seconds:.2f} s in the task, {wall:.2f} s "
          "with the task's start")
    assert got.seconds < 30  # a bound against a regression by orders of magnitude, not a benchmark


def test_a_recorded_share_is_checked_again_and_older_records_pass():
    """At publish, a finished tokenizer stage's record meets this build's threshold; a record
    from before the measurement (and a manifest without the figures) says nothing."""
    from pipelines.orchestration.summary import coverage_line
    from pipelines.tokenizer_coverage import check_recorded

    stats = {"vocab_size": 5, **Coverage(texts=3, bytes=600, tokens=100, unk_tokens=30).record()}
    check_recorded(stats, TokenizerConfig(max_unk_share=0.5))
    with pytest.raises(UncoveredText, match=r"^the trained tokenizer: 30\.0% "):
        check_recorded(stats, TokenizerConfig())
    check_recorded({"vocab_size": 5, "sha256": "x", "sample_bytes": 0}, TokenizerConfig())
    old = {"splits": {}, "stats": {"summary": {"tokens": 10, "bytes_per_token": 2.1}}, "warnings": []}
    assert coverage_line(old["stats"]) is None
    assert closing_lines(old, "out") == ["corpus written to out (manifest.json)"]
