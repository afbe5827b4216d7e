"""ELECTRA example packing: the algorithm's invariants, its rates, determinism and the split."""
from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import pytest

from pipelines.config import PackConfig, TokenizerConfig
from pipelines.schema import example_key
from pipelines.pack import ExamplePacker, SpecialIds, document_rngs, is_validation, pack_document
from synthetic.prose import documents
from pipelines.tokenizer import train_tokenizer

SPECIAL = SpecialIds(cls=2, sep=3, pad=0)


def _doc(rng: random.Random, start: int, *, lines: int, max_line: int) -> list[list[int]]:
    """Token lines with strictly increasing ids from ``start`` (so order and origin are visible)."""
    out, nxt = [], start
    for _ in range(lines):
        n = rng.randint(1, max_line)
        out.append(list(range(nxt, nxt + n)))
        nxt += n
    return out


def _content(ids: list[int]) -> list[int]:
    return [t for t in ids if t not in (SPECIAL.cls, SPECIAL.sep)]


def _segments(ids: list[int]) -> tuple[list[int], list[int]]:
    first_sep = ids.index(SPECIAL.sep)
    return ids[1:first_sep], ids[first_sep + 1:-1]


def _check_layout(ids: list[int], segs: list[int], seq_len: int) -> None:
    assert 3 <= len(ids) <= seq_len
    assert len(segs) == len(ids)
    assert ids[0] == SPECIAL.cls
    seps = [i for i, t in enumerate(ids) if t == SPECIAL.sep]
    assert len(seps) in (1, 2)
    assert seps[-1] == len(ids) - 1
    first_sep = seps[0]
    assert segs == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    if len(seps) == 2:
        assert seps[1] > first_sep + 1  # B is never empty when there is a second [SEP]


def _binomial_ok(hits: int, n: int, p: float, z: float = 4.5) -> bool:
    return abs(hits / n - p) <= z * math.sqrt(p * (1 - p) / n)


def test_hand_computed_example_matches_the_original_rule():
    class Scripted(random.Random):
        def __init__(self, values):
            super().__init__(0)
            self.values = list(values)

        def random(self):
            return self.values.pop(0)

    cfg = PackConfig(seq_len=16)
    lines = [[10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20, 21], [22, 23, 24, 25]]
    # draws: target (0.9: full length), single segment? (0.5: no), coin flip for line 2 (0.3: to A),
    # next target (0.9)
    rng = Scripted([0.9, 0.5, 0.3, 0.9])
    (ids, segs), = pack_document(lines, rng, cfg, SPECIAL)
    # A = lines 1-2 (7 tokens), B = lines 3-4 cut to 16 - 7 - 3 = 6 tokens
    assert ids == [2, 10, 11, 12, 13, 14, 15, 16, 3, 17, 18, 19, 20, 21, 22, 3]
    assert segs == [0] * 9 + [1] * 7
    assert rng.values == []


def test_invariants_on_generated_documents():
    cfg = PackConfig(seq_len=64)
    rng = random.Random(7)
    docs = [_doc(rng, 1000 * (d + 1) * 1000, lines=rng.randint(1, 40), max_line=rng.choice((5, 30, 200)))
            for d in range(300)]
    for d, lines in enumerate(docs):
        flat = [t for ln in lines for t in ln]
        examples = pack_document(lines, random.Random(d), cfg, SPECIAL)
        assert examples, "a document with tokens gives at least one example"
        contents = []
        for ids, segs in examples:
            _check_layout(ids, segs, cfg.seq_len)
            a, b = _segments(ids)
            # Lines go to A or B by the original's rule (a later short line may still join A),
            # each segment keeps document order.
            assert a == sorted(a) and b == sorted(b)
            contents.append(sorted(a + b))
        for prev, nxt in zip(contents, contents[1:]):
            assert prev[-1] < nxt[0]  # examples in document order, nothing duplicated
        assert {t for c in contents for t in c} <= set(flat)  # nothing from another document
        # An example shorter than seq_len - 1 was not truncated: it lost nothing, and the next
        # example continues right after it (or the document ends).
        for i, (ids, _) in enumerate(examples):
            if len(ids) <= cfg.seq_len - 2:
                c = contents[i]
                assert c == list(range(c[0], c[-1] + 1))
                nxt = contents[i + 1][0] if i + 1 < len(contents) else flat[-1] + 1
                assert nxt == c[-1] + 1
        assert contents[0][0] == flat[0]


def test_a_short_document_is_one_complete_example():
    cfg = PackConfig(seq_len=128)
    lines = [[5, 6, 7], [8, 9], [10]]
    for seed in range(50):
        (ids, segs), = pack_document(lines, random.Random(seed), cfg, SPECIAL)
        assert _content(ids) == [5, 6, 7, 8, 9, 10]
        _check_layout(ids, segs, cfg.seq_len)


def test_empty_document_gives_no_example():
    assert pack_document([], random.Random(0), PackConfig(), SPECIAL) == []
    assert pack_document([[], []], random.Random(0), PackConfig(), SPECIAL) == []


def test_single_segment_and_short_target_rates():
    # One-token lines make the buffer hit its target exactly, so an example's length reveals its
    # target t: single segment -> min(t, L-2) + 2 tokens, two segments -> min(t+3, L).
    cfg = PackConfig(seq_len=32)
    L, lo = cfg.seq_len, cfg.short_seq_min
    n = single = short = 0
    for d in range(150):
        lines = [[100 + i] for i in range(4000)]
        examples = pack_document(lines, random.Random(d), cfg, SPECIAL)
        for ids, _ in examples[:-1]:  # the last one is cut by the end of the document
            n += 1
            single += ids.count(SPECIAL.sep) == 1
            short += len(ids) <= L - 4
    assert n > 15000
    assert _binomial_ok(single, n, cfg.single_segment_prob)
    span = L - lo + 1
    p_single_short = (L - 6 - lo + 1) / span  # t <= L-6
    p_pair_short = (L - 7 - lo + 1) / span  # t <= L-7
    p_short = cfg.short_seq_prob * (cfg.single_segment_prob * p_single_short
                                    + (1 - cfg.single_segment_prob) * p_pair_short)
    assert _binomial_ok(short, n, p_short), (short / n, p_short)


def test_long_line_is_split_instead_of_lost():
    cfg = PackConfig(seq_len=64)
    line = list(range(100, 1100))  # one 1000-token line, e.g. a document without line breaks
    original = pack_document([line], random.Random(1), cfg, SPECIAL, split_long_lines=False)
    assert len(original) == 1 and _content(original[0][0]) == line[:cfg.seq_len - 2]
    split = pack_document([line], random.Random(1), cfg, SPECIAL, split_long_lines=True)
    kept = sorted(t for ids, _ in split for t in _content(ids))
    assert len(set(kept)) == len(kept) and set(kept) <= set(line)
    assert len(kept) >= len(line) - 3 * len(split)  # at most the 2-3 special-token slots per example
    for ids, segs in split:
        _check_layout(ids, segs, cfg.seq_len)
    assert sum(ids.count(SPECIAL.sep) == 2 for ids, _ in split) > len(split) // 2  # A/B kept


def test_validation_split_fraction_and_seed():
    uids = np.arange(40000, dtype=np.int64) * 7919 + 13
    cfg = PackConfig(validation_fraction=0.1, seed=3)
    mask = is_validation(uids, cfg)
    assert _binomial_ok(int(mask.sum()), len(uids), 0.1)
    assert (is_validation(uids[::-1], cfg)[::-1] == mask).all()  # a function of (seed, uid) only
    other = is_validation(uids, PackConfig(validation_fraction=0.1, seed=4))
    assert (other != mask).any()
    assert not is_validation(uids, PackConfig(validation_fraction=0.0)).any()
    a = [r.random() for r in document_rngs(uids[:5], cfg)]
    b = [r.random() for r in document_rngs(uids[:5][::-1], cfg)][::-1]
    assert a == b


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(documents(150, seed=5), TokenizerConfig(vocab_size=400), str(out))
    return str(out / "tokenizer.json")


def _doc_batch(texts, uids):
    return {"uid": np.asarray(uids, dtype=np.int64), "text": np.array(texts, dtype=object),
            "id": np.array([f"src:{u}" for u in uids], dtype=object)}


def _example(uid, ordinal, split, ids, b_start):
    """An output row as (key, (split, input ids, segment ids)); segments from ``b_start``."""
    ids = [int(t) for t in ids]
    return example_key(uid, ordinal), (split, ids, [0] * int(b_start) + [1] * (len(ids) - int(b_start)))


def _rows(out):
    """The packer's pyarrow table as {key: (split, input ids, segment ids)}."""
    assert out.column_names == ["uid", "ordinal", "split", "input_ids", "b_start"]
    cols = out.to_pydict()
    got = dict(_example(*row) for row in zip(cols["uid"], cols["ordinal"], cols["split"], cols["input_ids"],
                                             cols["b_start"]))
    assert len(got) == out.num_rows  # keys are unique
    return got


def test_packer_is_independent_of_batching(tokenizer_json):
    texts = documents(120, seed=9) + ["", "   \n\n  "]  # two documents without tokens
    uids = [(i * 2654435761) % (1 << 62) for i in range(len(texts))]
    cfg = PackConfig(seq_len=48, validation_fraction=0.2)
    whole = ExamplePacker(tokenizer_json, cfg)
    ref = _rows(whole(_doc_batch(texts, uids)))
    assert {k.split("-")[0] for k in ref} == {f"{u:016x}" for u in uids[:-2]}  # the two yield nothing
    for size in (1, 7, 50):
        packer = ExamplePacker(tokenizer_json, cfg)
        order = list(range(len(texts)))[::-1]  # and in another document order
        got = {}
        for i in range(0, len(order), size):
            idx = order[i:i + size]
            got.update(_rows(packer(_doc_batch([texts[j] for j in idx], [uids[j] for j in idx]))))
        assert got == ref
    by_doc = {}
    for key, (split, ids, segs) in ref.items():
        by_doc.setdefault(key.split("-")[0], set()).add(split)
        _check_layout(ids, segs, cfg.seq_len)
    assert all(len(s) == 1 for s in by_doc.values())  # split chosen per document
    assert {s for v in by_doc.values() for s in v} == {"train", "validation"}


def test_packer_tokens_match_the_tokenizer(tokenizer_json):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    text = "The old river watched the bridge.\nAda carried the letter."
    out = ExamplePacker(tokenizer_json, PackConfig(seq_len=128))(_doc_batch([text], [42]))
    expected = [t for ln in text.splitlines() for t in tok.encode(ln, add_special_tokens=False).ids]
    assert list(_rows(out)) == ["000000000000002a-00000"]
    assert [str(t) for t in out.schema.types] == ["int64", "int32", "string", "list<item: int32>", "int32"]
    ids = out.column("input_ids")[0].as_py()
    assert _content(ids) == expected
    b_start = out.column("b_start")[0].as_py()
    assert b_start == len(ids) or ids[b_start - 1] == SPECIAL.sep  # B starts right after the first [SEP]


def test_every_document_with_tokens_starts_at_ordinal_zero(tokenizer_json):
    texts = documents(40, seed=3) + [""]
    packer = ExamplePacker(tokenizer_json, PackConfig(seq_len=32))
    outs = [packer(_doc_batch(texts[i:i + 9], list(range(i, min(i + 9, len(texts)))))) for i in range(0, 41, 9)]
    firsts = sum(o.column("ordinal").to_pylist().count(0) for o in outs)
    assert firsts == 40  # every document with tokens starts at ordinal 0


def test_packer_under_ray_data_matches_direct_call(ray_local, tokenizer_json):
    texts = documents(60, seed=11)
    uids = list(range(1000, 1000 + len(texts)))
    cfg = PackConfig(seq_len=64, validation_fraction=0.3)
    ref = _rows(ExamplePacker(tokenizer_json, cfg)(_doc_batch(texts, uids)))
    rows = [{"uid": u, "text": t, "id": f"s:{u}"} for u, t in zip(uids, texts)][::-1]
    # Several blocks, in another order; an autoscaling actor pool as in the build (a fixed pool
    # holding every CPU would starve upstream tasks).
    ds = ray_local.data.from_items(rows, override_num_blocks=5)
    ds = ds.map_batches(ExamplePacker, fn_constructor_args=(tokenizer_json, cfg),
                        batch_format="numpy", batch_size=8, concurrency=(1, 2))
    got = dict(_example(r["uid"], r["ordinal"], r["split"], r["input_ids"], r["b_start"]) for r in ds.take_all())
    assert got == ref


_THREADS_SCRIPT = r'''
import json, os, sys
import numpy as np
import ray
from pipelines.engine.raydata import init_ray
import pyarrow as pa
from pipelines.orchestration.stages import _pack_rows, _packer
from synthetic.prose import documents

def threads():
    return len(os.listdir("/proc/self/task"))

def pack_and_count(uri, cfg_json, texts):
    table = pa.table({"uid": np.arange(len(texts), dtype=np.int64), "text": texts})
    _packer(uri, cfg_json)  # the worker's set-up: reads the tokenizer, encodes nothing
    before = threads()
    _pack_rows(table, 0, tokenizer_uri=uri, cfg_json=cfg_json, batch_docs=256)
    return before, threads(), os.environ.get("TOKENIZERS_PARALLELISM"), os.environ.get("RAYON_NUM_THREADS")

uri, cfg_json, texts = sys.argv[1], sys.argv[2], documents(300, seed=2)
init_ray(num_cpus=2)
task = ray.get(ray.remote(num_cpus=1)(pack_and_count).remote(uri, cfg_json, texts))
driver = pack_and_count(uri, cfg_json, texts)  # the driver keeps its environment: the control
print(json.dumps({"task": task, "driver": driver}))
'''


def test_packing_in_a_ray_task_uses_one_tokenizer_thread(tokenizer_json):
    """A Ray task holds one CPU: ``init_ray`` gives its workers one ``tokenizers`` thread, even
    when the user's environment (as here) lets ``tokenizers`` use every core. The driver, which
    has that environment, is the control: the same call there starts the Rust thread pool."""
    import dataclasses
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS")}
    cfg_json = json.dumps(dataclasses.asdict(PackConfig(seq_len=64)), sort_keys=True)
    proc = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, tokenizer_json, cfg_json],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    before, after, parallelism, rayon = got["task"]
    assert (parallelism, rayon) == ("false", "1") and after - before <= 1
    d_before, d_after, d_parallelism, _ = got["driver"]
    assert d_parallelism is None and d_after - d_before >= min(2, os.cpu_count())


def test_an_empty_train_split_is_a_loud_warning_naming_the_flag():
    """One book drawn into validation: the warning says what happened, why, and the flag to fix it."""
    from pipelines.pack import empty_split_warnings

    one_book = {"validation": {"examples": 781, "tokens": 97744, "documents": 1}}
    (warning,) = empty_split_warnings(one_book, 0.01, 1)
    assert warning == (
        "train: no examples, so pre-training on this corpus has nothing to read: 1 of 1 document went to "
        "validation (documents are split whole between train and validation, each by a hash of its id against "
        "pack.validation_fraction=0.01; with 1 document, it drew validation); fix: rebuild with "
        "--validation-fraction 0 (no validation split), or add documents")
    assert "all 3 documents drew validation" in empty_split_warnings(
        {"validation": {"examples": 9, "tokens": 90, "documents": 3}}, 0.5, 3)[0]
    # Both splits full, or train full with no validation asked for: nothing to say.
    both = {"train": {"examples": 5, "tokens": 50, "documents": 2}, **one_book}
    assert empty_split_warnings(both, 0.01, 3) == []
    assert empty_split_warnings({"train": both["train"]}, 0.0, 2) == []
    # With no validation asked for, an empty train split (documents without tokens) still warns.
    assert [w.split(":")[0] for w in empty_split_warnings({}, 0.0, 2)] == ["train"]
    assert "raise --validation-fraction" in empty_split_warnings({"train": both["train"]}, 0.01, 2)[0]


def test_pack_rows_do_not_depend_on_the_batch_size(tokenizer_json):
    """A read task packs its documents in batches of ``batch_docs``: the examples are those of one
    packer call over all of them, whatever the batch size (and an empty task gives none)."""
    import pyarrow as pa

    from pipelines.orchestration.stages import _pack_rows
    from synthetic.prose import documents

    cfg = PackConfig(seq_len=48)
    cfg_json = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
    texts, uids = documents(40, seed=11), list(range(100, 140))
    want = _rows(ExamplePacker(tokenizer_json, cfg)(_doc_batch(texts, uids)))
    table = pa.table({"uid": pa.array(uids, pa.int64()), "text": texts, "reason": [""] * 40})
    for batch_docs in (1, 7, 40, 1000):
        got = _rows(_pack_rows(table, 3, tokenizer_uri=tokenizer_json, cfg_json=cfg_json, batch_docs=batch_docs))
        assert got == want and len(got) > 40
    empty = _pack_rows(table.slice(0, 0), 0, tokenizer_uri=tokenizer_json, cfg_json=cfg_json, batch_docs=8)
    assert empty.num_rows == 0 and empty.column_names == ["uid", "ordinal", "split", "input_ids", "b_start"]
