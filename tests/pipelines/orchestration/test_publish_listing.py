"""publish.quarantine_listings: a quarantine folder is swept a bounded slice of names at a time
where the store lists by key prefix (never one listing of the whole folder), and every part a
writer can name is seen exactly once."""
from __future__ import annotations

import hashlib

from common import storage
from pipelines.orchestration import publish


def _part_names(n: int, salt: str = "") -> list[str]:  # as parts.part_name names them
    return [f"part-{hashlib.blake2b(f'{salt}{i}'.encode(), digest_size=12).hexdigest()}.jsonl.zst" for i in range(n)]


def _write(folder: str, names: list[str]) -> None:
    for name in names:
        storage.write_bytes(storage.join(folder, name), b"x")


def test_a_big_quarantine_folder_on_s3_is_listed_a_slice_at_a_time(s3_server, monkeypatch):
    folder = s3_server.bucket("sweep") + "/rejected/filter-k1"
    listed, strays = _part_names(200), _part_names(9, salt="killed")
    lists = ["_parts-0123456789abcdef.arrow"]
    _write(folder, listed + strays + lists)
    prefixes: list[str] = []
    real = storage.list_sizes

    def observed(uri: str, prefix: str = "") -> dict[str, int]:
        prefixes.append(prefix)
        return real(uri, prefix)

    monkeypatch.setattr(storage, "list_sizes", observed)
    monkeypatch.setattr(storage, "listdir", lambda uri: (_ for _ in ()).throw(AssertionError("a whole listing")))
    assert storage.lists_by_prefix(folder)
    slices = list(publish.quarantine_listings(folder, len(listed), limit=16))
    seen = [name for names in slices for name in names]
    assert sorted(seen) == sorted(listed + strays + lists)  # each once, the strays too
    # 200 parts, 16 a slice: one hex digit (16 prefixes of ~13 names) and the lists' prefix
    assert "" not in prefixes and len(prefixes) == len(slices) == 1 + 16
    assert max(map(len, slices)) <= 2 * 16
    # a folder within one slice: the lists' prefix and one for the parts
    assert len(list(publish.quarantine_listings(folder, 16, limit=16))) == 2


def test_a_local_quarantine_folder_is_one_listing(tmp_path):
    names = _part_names(30) + ["_parts-0123456789abcdef.arrow", "part-killed-attempt.jsonl.zst"]
    _write(str(tmp_path), names)
    assert [sorted(n) for n in publish.quarantine_listings(str(tmp_path), 30, limit=4)] == [sorted(names)]
