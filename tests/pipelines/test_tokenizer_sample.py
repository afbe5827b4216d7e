"""The training task's read of the tokenizer sample (``tokenizer_sample.chosen_texts``): every
part whole, ``READ_BATCH`` parts per call of concurrent reads, and a part that is shorter on the
store than written is an error naming it, not a smaller sample.

The expected texts are computed here from the parts on disk (pyarrow.parquet, numpy) by the
rule the module states: hash order (ties by uid) up to the byte bound, then by uid."""
from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common import storage
from pipelines import tokenizer_sample as ts
from synthetic.prose import documents


@pytest.fixture(scope="module")
def written(ray_local, tmp_path_factory):
    """A sample of several parts (one per read task of 7 document parts), and its texts' bytes."""
    from pipelines.engine import parts

    folder = tmp_path_factory.mktemp("sample")
    texts = documents(200, seed=6)
    rows = [{"uid": (i * 0x9E3779B1) % (1 << 62), "text": t, "id": f"s:{i}", "reason": "", "detail": ""}
            for i, t in enumerate(texts)]
    total = sum(len(t.encode()) for t in texts)
    out = parts.write_documents(ray_local.data.from_items(rows).repartition(7), data=str(folder / "docs"),
                                rejected=str(folder / "rej"), prefix_chars=5, full_text=False)
    docs = parts.Parts(str(folder / "docs"), tuple(out["files"]))
    sample = ts.write_sample(docs, max_bytes=total // 2, seed=1, total_bytes=total, folder=str(folder / "s"))
    assert len(sample.files) >= 5  # several batches of two below, the last one short
    return sample, total


def _expected(sample, max_bytes: int) -> list[str]:
    table = pa.concat_tables([pq.read_table(os.path.join(sample.folder, f["name"])) for f in sample.files])
    uid = table.column("uid").to_numpy()
    h = table.column("h").to_numpy().view(np.uint64)
    texts = table.column("text").to_pylist()
    chosen, used = [], 0
    for i in sorted(range(len(texts)), key=lambda i: (int(h[i]), int(uid[i]))):
        n = len(texts[i].encode("utf-8", "surrogatepass"))
        if used + n <= max_bytes:
            chosen.append(i)
            used += n
    return [texts[i] for i in sorted(chosen, key=lambda i: uid[i])]


@pytest.fixture
def calls(monkeypatch):
    """Every storage.read_ranges call, as its list of (uri, start, end)."""
    seen: list[list[tuple[str, int, int]]] = []
    real = storage.read_ranges

    def counting(requests):
        seen.append([(u, int(a), int(b)) for u, a, b in requests])
        return real(requests)

    monkeypatch.setattr(storage, "read_ranges", counting)
    return seen


@pytest.mark.parametrize("bound", ["half", "all"])
def test_read_batch_changes_the_calls_not_the_texts(written, calls, monkeypatch, bound):
    sample, total = written
    max_bytes = {"half": total // 4, "all": 10 * total}[bound]
    whole = [(storage.join(sample.folder, f["name"]), 0, int(f["bytes"])) for f in sample.files]
    assert ts.READ_BATCH == 256
    default = ts.chosen_texts(sample, max_bytes)
    assert calls == [whole]  # one call: every part, whole, from its first byte to its written size
    assert default == _expected(sample, max_bytes) and default
    calls.clear()
    monkeypatch.setattr(ts, "READ_BATCH", 2)
    assert ts.chosen_texts(sample, max_bytes) == default
    assert calls == [whole[i:i + 2] for i in range(0, len(whole), 2)]  # the same reads, two at a time


@pytest.mark.parametrize("victim", [0, -1])
@pytest.mark.parametrize("cut", [1, "all"])
def test_a_part_shorter_on_the_store_than_written_is_named(written, tmp_path, monkeypatch, victim, cut):
    """A part truncated after write_sample (a lost tail, a partial copy): chosen_texts fails on
    that part, naming it with both sizes, rather than training on less (or failing in Parquet)."""
    import shutil

    sample, total = written
    copy = tmp_path / "s"
    shutil.copytree(sample.folder, copy)
    moved = type(sample)(str(copy), sample.files)
    f = sample.files[victim]
    path = copy / f["name"]
    size = path.stat().st_size
    assert size == int(f["bytes"])
    kept = 0 if cut == "all" else size - cut
    with open(path, "r+b") as fh:
        fh.truncate(kept)
    monkeypatch.setattr(ts, "READ_BATCH", 2)  # the victim in the first batch or the last
    uri = storage.join(str(copy), f["name"])
    with pytest.raises(storage.StorageError, match=rf"^{re.escape(uri)}: {kept} bytes on the store, {size} written$"):
        ts.chosen_texts(moved, total)
