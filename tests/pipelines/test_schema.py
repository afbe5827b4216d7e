"""The corpus contract: the compact shard format against independent readers, and the manifest."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile

import numpy as np
import pytest
import pyarrow
import pyarrow.ipc

from common.hashing import HashingReader
from pipelines import schema


def make_examples(n: int, *, seed: int = 0, low: int = 3, high: int = 60, vocab: int = 30000,
                  uids: np.ndarray | None = None) -> schema.Examples:
    """``n`` random examples: [CLS]=2 ... with a segment B after ``b_start`` (or none)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high + 1, size=n)
    b_start = np.array([int(rng.integers(2, length + 1)) for length in lengths], dtype=np.int64)
    tokens = rng.integers(5, vocab, size=int(lengths.sum()))
    tokens[np.concatenate([[0], np.cumsum(lengths)[:-1]])] = 2
    if uids is None:
        uids = rng.integers(0, 2**63, size=n, dtype=np.uint64)
    ordinal = rng.integers(0, 5, size=n)
    return schema.Examples(tokens, lengths, b_start, uids, ordinal)


def independent_read(data: bytes) -> list[tuple[str, dict[str, np.ndarray], list[tarfile.TarInfo]]]:
    """The shard as plain ``tarfile`` + ``numpy.load`` see it: (sample key, members, headers)."""
    samples: dict[str, dict[str, np.ndarray]] = {}
    headers: dict[str, list[tarfile.TarInfo]] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            key, ext = m.name.split(".", 1)
            samples.setdefault(key, {})[ext] = np.load(io.BytesIO(tar.extractfile(m).read()), allow_pickle=False)
            headers.setdefault(key, []).append(m)
    return [(k, samples[k], headers[k]) for k in samples]


def rows_of(ex: schema.Examples) -> list[tuple[int, int, list[int], list[int]]]:
    """Per example (uid, ordinal, input ids, segment ids), in key order."""
    out = [(int(ex.uid[i]), int(ex.ordinal[i]), ex.ids(i).tolist(), ex.segments(i).tolist()) for i in range(len(ex))]
    return sorted(out)


# ------------------------------------------------------------------------------ encoding
def test_shard_round_trip_against_tarfile_numpy_and_read_shard():
    ex = make_examples(300, seed=1)
    data = schema.encode_shard(ex, vocab_size=30522, chunk_tokens=2000)
    chunks = independent_read(data)
    assert [k for k, _, _ in chunks] == [f"c{c:06d}" for c in range(len(chunks))] and len(chunks) > 3
    expected = rows_of(ex)
    got = []
    for key, members, headers in chunks:
        assert [h.name for h in headers] == [f"{key}.{m}" for m in schema.MEMBERS]
        for h in headers:  # fixed headers: byte-identical output whatever the machine and time
            assert (h.mtime, h.uid, h.gid, h.uname, h.gname, h.mode, h.isfile()) == (0, 0, 0, "", "", 0o644, True)
        tokens, layout, keys = (members[m] for m in schema.MEMBERS)
        assert tokens.dtype == np.uint16 and layout.dtype == np.uint32 and keys.dtype == np.uint64
        assert layout.shape == keys.shape == (len(layout), 2) and int(layout[:, 0].sum()) == len(tokens)
        starts = np.concatenate([[0], np.cumsum(layout[:, 0].astype(np.int64))])
        for (length, b), (uid, ordinal), lo in zip(layout.tolist(), keys.tolist(), starts):
            ids = tokens[lo:lo + length].tolist()
            got.append((uid, ordinal, ids, [0] * b + [1] * (length - b)))
    assert got == expected  # chunks and the examples in them are in key order
    back = schema.read_shard(io.BytesIO(data), "s.tar")
    assert rows_of(back) == expected and back.keys() == sorted(ex.keys())
    assert back.num_tokens == ex.num_tokens == int(ex.lengths.sum())


def test_webdataset_reads_the_chunks_and_decode_sample_takes_them(tmp_path):
    import webdataset as wds

    ex = make_examples(120, seed=2, vocab=1000)
    path = tmp_path / "train-000000.tar"
    path.write_bytes(schema.encode_shard(ex, vocab_size=1000, chunk_tokens=700))
    raw = list(wds.WebDataset(str(path), shardshuffle=False))
    decoded = list(wds.WebDataset(str(path), shardshuffle=False).decode())
    assert [s["__key__"] for s in decoded] == [f"c{c:06d}" for c in range(len(decoded))]
    from_bytes = schema.Examples.concat([schema.decode_sample(s, s["__key__"]) for s in raw])
    from_arrays = schema.Examples.concat([schema.decode_sample(s, s["__key__"]) for s in decoded])
    assert decoded[0][schema.TOKENS].dtype == np.uint16
    assert rows_of(from_bytes) == rows_of(from_arrays) == rows_of(ex)


def test_npy_members_are_loaded_one_at_a_time(monkeypatch):
    """Every np.load of a shard member runs under the module's lock (CPython 3.11's AST builder,
    which parses .npy headers, is not safe across threads, gh-106905); the lock is free after."""
    from pipelines.schema import shards

    ex = make_examples(40, seed=3, vocab=1000)
    raw = schema.encode_shard(ex, vocab_size=1000, chunk_tokens=300)
    real_load, held = np.load, []

    def load(*args, **kwargs):
        held.append(shards._NPY_LOCK.locked())
        return real_load(*args, **kwargs)

    monkeypatch.setattr(np, "load", load)
    got = schema.read_shard(io.BytesIO(raw), "s")
    assert rows_of(got) == rows_of(ex)
    assert held and all(held) and not shards._NPY_LOCK.locked()


def test_chunk_bounds_close_at_the_token_budget():
    assert schema.chunk_bounds([], 10) == []
    assert schema.chunk_bounds([4, 4, 4, 4, 4], 10) == [(0, 3), (3, 5)]
    assert schema.chunk_bounds([10, 1, 9, 20], 10) == [(0, 1), (1, 3), (3, 4)]
    lengths = np.random.default_rng(3).integers(2, 50, size=500)
    bounds = schema.chunk_bounds(lengths, 300)
    assert bounds[0][0] == 0 and bounds[-1][1] == 500
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # a partition, in order
    assert all(lengths[lo:hi].sum() >= 300 and lengths[lo:hi - 1].sum() < 300 for lo, hi in bounds[:-1])


def test_encoding_is_byte_identical_whatever_the_input_order():
    ex = make_examples(200, seed=4)
    data = schema.encode_shard(ex, vocab_size=30522, chunk_tokens=1500)
    shuffled = ex.take(np.random.default_rng(0).permutation(len(ex)))
    assert schema.encode_shard(shuffled, vocab_size=30522, chunk_tokens=1500) == data
    back = schema.read_shard(io.BytesIO(data), "s.tar")
    assert schema.encode_shard(back, vocab_size=30522, chunk_tokens=1500) == data  # re-encoding


@pytest.mark.parametrize("vocab,dtype", [(1000, np.uint16), (65536, np.uint16), (65537, np.int32), (250_000, np.int32)])
def test_token_dtype_follows_the_vocabulary(vocab, dtype):
    assert schema.token_dtype(vocab) == dtype
    ex = make_examples(20, seed=5, vocab=vocab)
    ex.tokens[-1] = vocab - 1  # the largest id survives the narrow type
    data = schema.encode_shard(ex, vocab_size=vocab)
    ((_, members, _),) = independent_read(data)
    assert members[schema.TOKENS].dtype == dtype and int(members[schema.TOKENS].max()) == vocab - 1
    assert rows_of(schema.read_shard(io.BytesIO(data), "s")) == rows_of(ex)


def test_bytes_per_token_of_realistic_examples():
    """2 bytes a token (uint16), 24 per example and one tar header per member: under 4 B/token."""
    ex = make_examples(600, seed=6, low=60, high=128)
    assert ex.num_tokens >= 50_000
    data = schema.encode_shard(ex, vocab_size=30522)
    per_token = len(data) / ex.num_tokens
    chunks = len(independent_read(data))
    assert chunks == -(-ex.num_tokens // schema.CHUNK_TOKENS)
    payload = 2 * ex.num_tokens + 24 * len(ex)
    # per member: a 512-byte header, a 128-byte .npy header, padding to 512; then the end record
    assert payload <= len(data) <= payload + chunks * 3 * (512 + 128 + 511) + 10240 + 1024
    assert per_token <= 4, per_token
    print(f"\n{len(ex)} examples, {ex.num_tokens} tokens: {per_token:.3f} bytes/token")


def test_encode_rejects_bad_examples():
    ex = make_examples(5, seed=7)
    first = ex.take(np.lexsort((ex.ordinal, ex.uid)))
    bad = next(i for i in range(len(first)) if (first.ids(i) >= 10).any())  # errors name the example
    with pytest.raises(ValueError, match=rf"^shards/g/train-000003.tar: example {first.key(bad)} has token id"):
        schema.encode_shard(ex, vocab_size=10, where="shards/g/train-000003.tar")
    dup = ex.take(np.array([0, 1, 1]))
    with pytest.raises(ValueError, match=rf"duplicate example key {ex.key(1)}"):
        schema.encode_shard(dup, vocab_size=30522)
    short = schema.Examples(np.array([2, 3, 2]), [2, 1], [2, 1], [1, 2], [0, 0])
    with pytest.raises(ValueError, match="shorter than"):
        schema.encode_shard(short, vocab_size=30522)
    assert ex.key(0) == f"{int(ex.uid[0]):016x}-{int(ex.ordinal[0]):05d}"


def test_an_empty_shard_is_a_valid_empty_tar():
    data = schema.encode_shard(schema.Examples.concat([]), vocab_size=30522)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getmembers() == []
    back = schema.read_shard(io.BytesIO(data), "empty.tar")
    assert len(back) == 0 and back.num_tokens == 0


# ------------------------------------------------------------------------------ corrupt input
def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_every_truncation_is_an_error_naming_the_shard():
    """Cut anywhere before the end-of-archive block, a shard never reads as a shorter one."""
    data = schema.encode_shard(make_examples(60, seed=8, vocab=1000), vocab_size=1000, chunk_tokens=400)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        last = tar.getmembers()[-1]
        end = last.offset_data + -(-last.size // 512) * 512  # where the end-of-archive block starts
    cuts = sorted(set(range(0, end + 512, 97)) | {0, 1, 511, 512, 513, end - 1, end, end + 511})
    for cut in cuts:
        with pytest.raises(ValueError, match=r"^train-000003\.tar"):
            schema.read_shard(io.BytesIO(data[:cut]), "train-000003.tar")
    full = schema.read_shard(io.BytesIO(data[:end + 512]), "ok")  # first end block present: complete
    assert len(full) == 60


def test_damaged_shards_raise_value_errors_naming_the_shard():
    ex = make_examples(4, seed=9)
    tokens = _npy(ex.tokens.astype(np.uint16))
    layout = _npy(np.stack([ex.lengths, ex.b_start], axis=1).astype(np.uint32))
    keys = _npy(np.stack([ex.uid, ex.ordinal.astype(np.uint64)], axis=1))
    good = {"c000000.tokens.npy": tokens, "c000000.layout.npy": layout, "c000000.keys.npy": keys}
    assert len(schema.read_shard(io.BytesIO(_tar(good)), "ok.tar")) == 4
    cases = {
        "member keys.npy missing": {k: v for k, v in good.items() if "keys" not in k},
        "lengths sum to": {**good, "c000000.tokens.npy": _npy(ex.tokens[:-1].astype(np.uint16))},
        "not a .npy array": {**good, "c000000.layout.npy": b"garbage"},
        r"are not \(n, 2\)": {**good, "c000000.keys.npy": _npy(np.zeros((3, 2), np.uint64))},
        "disagree|are not": {**good, "c000000.layout.npy": _npy(np.zeros((4, 3), np.uint32))},
    }
    for message, members in cases.items():
        with pytest.raises(ValueError, match=message) as info:
            schema.read_shard(io.BytesIO(_tar(members)), "shards/g/train-000007.tar")
        assert "shards/g/train-000007.tar" in str(info.value)
    with pytest.raises(ValueError, match="sample: member tokens.npy missing"):
        schema.decode_sample({"layout.npy": layout, "keys.npy": keys})


def test_read_shard_through_a_hashing_reader_verifies_in_one_pass():
    data = schema.encode_shard(make_examples(50, seed=10, vocab=1000), vocab_size=1000, chunk_tokens=300)
    reader = HashingReader(io.BytesIO(data))
    assert len(schema.read_shard(reader, "s.tar")) == 50
    reader.drain()
    assert reader.bytes_read == len(data) and reader.hexdigest() == hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------ manifest
def make_manifest(generation: str = "g1") -> schema.Manifest:
    return schema.Manifest(
        seq_len=128,
        tokenizer=schema.TokenizerInfo("wordpiece", 1000, "ab" * 32, True, {"[PAD]": 0, "[CLS]": 2},
                                       path="tokenizer/k1"),
        splits={"train": schema.SplitInfo(10, 1000, 3), "validation": schema.SplitInfo(1, 90, 1)},
        shards=[schema.ShardInfo(schema.shard_name(generation, "train", 0), "train", 10, 1000, 4096, "cd" * 32),
                schema.ShardInfo(schema.shard_name(generation, "validation", 0), "validation", 1, 90, 1024,
                                 "ef" * 32)],
        stats={"ingest": {"documents_in": 4}}, config={"pack": {"seq_len": 128}},
        rejected=[schema.RejectedInfo("filter", "rejected/filter-k2/part-1.jsonl.zst", 3, 120)],
        generation=generation, build_key="bk" * 8)


def test_shard_names():
    assert schema.shard_name("abc", "train", 7) == "shards/abc/train-000007.tar"
    assert schema.shard_name("abc", "validation", 123456) == "shards/abc/validation-123456.tar"
    with pytest.raises(ValueError, match="unknown split 'test'"):
        schema.shard_name("abc", "test", 0)


def test_manifest_round_trip_with_every_field(tmp_path):
    m = make_manifest()
    uri = m.save(str(tmp_path))
    assert uri == str(tmp_path / "manifest.json")
    back = schema.Manifest.load(str(tmp_path))
    assert back == m
    assert back.format_version == schema.FORMAT_VERSION == 4
    assert (back.generation, back.build_key, back.tokenizer.path) == ("g1", "bk" * 8, "tokenizer/k1")
    assert back.rejected == [schema.RejectedInfo("filter", "rejected/filter-k2/part-1.jsonl.zst", 3, 120)]
    assert [s.path for s in back.shards_for("train")] == ["shards/g1/train-000000.tar"]
    assert [s.split for s in back.shards_for("validation")] == ["validation"]
    assert schema.read_manifest_bytes(str(tmp_path)) == m.encode() == (tmp_path / "manifest.json").read_bytes()
    assert json.loads(m.encode())["format_version"] == 4
    # no temp file left; the quarantine folder's part list, which the manifest names
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    listed = (tmp_path / m.rejected_lists[0].path).read_bytes()  # named by its content
    assert files == ["manifest.json", f"rejected/filter-k2/_parts-{hashlib.sha256(listed).hexdigest()[:16]}.arrow"]


def test_manifest_round_trip_on_s3(s3_server):
    bucket = s3_server.bucket("manifest")
    corpus = f"{bucket}/corpora/demo"
    m = make_manifest("g2")
    assert m.save(corpus) == f"{corpus}/manifest.json"
    assert schema.Manifest.load(corpus) == m


def test_old_manifests_and_missing_fields_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest"):
        schema.Manifest.load(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1}))
    with pytest.raises(ValueError, match=r"manifest\.json.*format_version 1.*rebuild"):
        schema.Manifest.load(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 5}))
    with pytest.raises(ValueError, match=r"manifest\.json.*format_version 5.*rebuild"):
        schema.Manifest.load(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 2}))
    with pytest.raises(ValueError, match=r"manifest\.json: malformed manifest"):
        schema.Manifest.load(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"manifest\.json: malformed"):
        schema.Manifest.load(str(tmp_path))
    # A manifest without the optional fields of format 2 reads with their defaults.
    d = make_manifest().to_dict()
    for k in ("rejected_lists", "rejected_index", "generation", "build_key", "stats", "config"):
        d.pop(k)
    d["tokenizer"].pop("path")
    back = schema.Manifest.from_dict(d)
    assert (back.rejected, back.generation, back.build_key, back.tokenizer.path) == ([], "", "", "tokenizer")


def test_referenced_folders_are_those_the_manifest_reads():
    m = make_manifest("gen7")
    assert m.referenced_folders() == {"tokenizer/k1", "shards/gen7", "rejected/filter-k2"}
    m.tokenizer.path = "tokenizer/k9/"
    m.rejected = []
    m.shards = []
    assert m.referenced_folders() == {"tokenizer/k9"}


# ------------------------------------------------------------------------------ rejected parts apart
def many_rejected(n: int) -> list[schema.RejectedInfo]:
    """``n`` parts of two stages, each in its own quarantine folder, grouped by folder."""
    half = n // 2
    return [schema.RejectedInfo("filter", f"rejected/filter-k2/part-{i:06d}.jsonl.zst", i % 7 + 1, 100 + i)
            for i in range(half)] + [
        schema.RejectedInfo("near_dedup", f"rejected/near_dedup-k3/part-{i:06d}.jsonl.zst", i % 7 + 1, 100 + i)
        for i in range(half, n)]


def _listed(path) -> list[tuple]:
    """A list file read with pyarrow alone: (name, rows, bytes) per part."""
    table = pyarrow.ipc.open_file(str(path)).read_all()
    return list(zip(*(table.column(c).to_pylist() for c in ("name", "rows", "bytes"))))


def test_rejected_parts_live_in_lists_per_stage_which_the_manifest_names_and_hashes(tmp_path):
    m = make_manifest()
    m.rejected = many_rejected(500)
    m.save(str(tmp_path))
    raw = json.loads((tmp_path / "manifest.json").read_bytes())
    assert "rejected" not in raw and raw["rejected_index"] is None
    assert [(r["stage"], r["path"].rsplit("/", 1)[0]) for r in raw["rejected_lists"]] == [
        ("filter", "rejected/filter-k2"), ("near_dedup", "rejected/near_dedup-k3")]
    for ref in raw["rejected_lists"]:
        data = (tmp_path / ref["path"]).read_bytes()
        assert ref["path"].endswith(f"/_parts-{hashlib.sha256(data).hexdigest()[:16]}.arrow")
        mine = [r for r in m.rejected if r.stage == ref["stage"]]
        assert ref == {"stage": ref["stage"], "path": ref["path"], "sha256": hashlib.sha256(data).hexdigest(),
                       "bytes": len(data), "parts": len(mine), "records": sum(r.records for r in mine)}
        assert _listed(tmp_path / ref["path"]) == [(r.path.rsplit("/", 1)[1], r.records, r.bytes) for r in mine]
    # the trainer's read: the manifest only, its size independent of the quarantine's
    parsed = schema.Manifest.parse(schema.read_manifest_bytes(str(tmp_path)), "m")
    assert parsed.rejected == [] and parsed.rejected_lists == m.rejected_lists
    few = make_manifest()
    few.rejected = many_rejected(2)
    few.save(str(tmp_path / "few"))
    sizes = [len((tmp_path / sub / "manifest.json").read_bytes()) for sub in (".", "few")]
    assert abs(sizes[0] - sizes[1]) < 16
    # the build's reads: every part, or one folder's (only that folder's list is read)
    assert schema.Manifest.load(str(tmp_path)).rejected == m.rejected
    (tmp_path / m.rejected_lists[1].path).unlink()
    assert schema.read_rejected(str(tmp_path), parsed, folder="rejected/filter-k2") == m.rejected[:250]
    with pytest.raises(ValueError, match=r"near_dedup-k3/_parts-\w+.arrow: the rejected-part list the manifest names"):
        schema.Manifest.load(str(tmp_path))
    listed = tmp_path / m.rejected_lists[0].path
    listed.write_bytes(listed.read_bytes().replace(b"part-000001", b"part-999991"))
    with pytest.raises(ValueError, match=r"filter-k2/_parts-\w+.arrow: sha256 differs from the manifest"):
        schema.read_rejected(str(tmp_path), parsed, folder="rejected/filter-k2")


def test_one_quarantine_folder_holds_one_stage(tmp_path):
    m = make_manifest()
    m.rejected = [schema.RejectedInfo("filter", "rejected/x/part-1.jsonl.zst", 1, 1),
                  schema.RejectedInfo("near_dedup", "rejected/x/part-2.jsonl.zst", 1, 1)]
    with pytest.raises(ValueError, match=r"rejected/x: parts of the stages filter and near_dedup"):
        m.save(str(tmp_path))


def write_format_3(corpus, m: schema.Manifest) -> tuple[dict, str]:
    """``m`` written as format 3 wrote it (written here, independently of the code that reads
    it): its rejected parts in one JSON file beside the manifest, named by the manifest's
    ``rejected_index``. Returns the manifest's dict and the list file's name."""
    rows = [dataclasses.asdict(r) for r in m.rejected]
    listed = json.dumps({"format_version": 3, "rejected": rows}).encode()
    sha = hashlib.sha256(listed).hexdigest()
    (corpus / f"rejected-{sha[:16]}.json").write_bytes(listed)
    d = m.to_dict()
    d.pop("rejected_lists")
    d["format_version"], d["rejected_index"] = 3, {"path": f"rejected-{sha[:16]}.json", "sha256": sha,
                                                   "bytes": len(listed), "parts": len(rows),
                                                   "records": sum(r.records for r in m.rejected)}
    (corpus / "manifest.json").write_text(json.dumps(d))
    return d, f"rejected-{sha[:16]}.json"


def test_format_3_and_2_manifests_still_read(tmp_path):
    m = make_manifest()
    m.rejected = many_rejected(6)
    rows = [dataclasses.asdict(r) for r in m.rejected]
    d, _ = write_format_3(tmp_path, m)
    back = schema.Manifest.load(str(tmp_path))
    assert back.format_version == 3 and back.rejected == m.rejected
    assert back.referenced_folders() == m.referenced_folders()
    # format 2: inline
    d.pop("rejected_index")
    d["format_version"], d["rejected"] = 2, rows
    (tmp_path / "manifest.json").write_text(json.dumps(d))
    for back in (schema.Manifest.load(str(tmp_path)),
                 schema.Manifest.parse((tmp_path / "manifest.json").read_bytes(), "m")):
        assert back.format_version == 2 and back.rejected == m.rejected and back.rejected_index is None
        assert back.referenced_folders() == m.referenced_folders()
    # saved again, it is written in the current format, the lists apart
    back = schema.Manifest.load(str(tmp_path))
    back.save(str(tmp_path))
    raw = json.loads((tmp_path / "manifest.json").read_bytes())
    assert "rejected" not in raw and raw["format_version"] == 4 and len(raw["rejected_lists"]) == 2
    assert schema.Manifest.load(str(tmp_path)).rejected == m.rejected
