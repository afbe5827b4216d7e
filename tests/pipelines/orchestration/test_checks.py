"""The runner's check of a stage's outputs: every listed object on the store with its size, and a
big folder listed a slice of names at a time where the store lists by key prefix."""
from __future__ import annotations

import hashlib

import pytest

from common import storage
from pipelines.orchestration import checks
from pipelines.orchestration.checks import OutputMismatch, check_outputs, listing_groups


def _hex_names(n: int, salt: str = "") -> list[str]:
    return [f"part-{hashlib.blake2b(f'{salt}{i}'.encode(), digest_size=12).hexdigest()}.parquet" for i in range(n)]


@pytest.mark.parametrize("names", [_hex_names(3000), [f"train-{i:06d}.tar" for i in range(3000)],
                                   [f"a/{i}" for i in range(60)] + [f"b/{i}" for i in range(60)]],
                         ids=["hashed", "numbered", "subfolders"])
def test_listing_groups_are_disjoint_prefixes_of_at_most_the_limit(names):
    limit = 100
    groups = listing_groups(names, limit)
    assert sorted(n for g in groups.values() for n in g) == sorted(names)  # each name once
    assert all(len(g) <= limit and all(n.startswith(p) for n in g) for p, g in groups.items())
    prefixes = sorted(groups)
    assert all(not b.startswith(a) for a, b in zip(prefixes, prefixes[1:]))  # a listing lists one group
    assert len({len(p) for p in prefixes}) == 1
    # the shortest such prefixes: one character less and some group is over the limit
    shorter: dict[str, int] = {}
    for n in names:
        shorter[n[:len(prefixes[0]) - 1]] = shorter.get(n[:len(prefixes[0]) - 1], 0) + 1
    assert max(shorter.values()) > limit
    assert listing_groups(names[:limit], limit) == {"": sorted(names[:limit])}  # small: one listing


def _write(folder: str, names: list[str]) -> dict[str, int]:
    for i, name in enumerate(names):
        storage.write_bytes(storage.join(folder, name), b"x" * (i % 7 + 1))
    return {name: i % 7 + 1 for i, name in enumerate(names)}


def test_a_big_folder_on_s3_is_checked_a_slice_at_a_time(s3_server, monkeypatch):
    folder = s3_server.bucket("checks") + "/stage/data"
    expected = _write(folder, _hex_names(120))
    _write(folder, _hex_names(5, salt="stray"))  # a killed attempt's leftovers: listed, not expected
    monkeypatch.setattr(checks, "LIST_GROUP", 16)
    listings: list[int] = []
    real = storage.list_sizes

    def observed(uri: str, prefix: str = "") -> dict[str, int]:
        listings.append(len(out := real(uri, prefix)))
        return out

    monkeypatch.setattr(storage, "list_sizes", observed)
    assert storage.lists_by_prefix(folder)
    assert check_outputs({folder: expected}) == 120
    # one listing per group, each of at most 16 expected names (and the strays sharing its prefix)
    assert len(listings) == len(listing_groups(list(expected), 16)) > 1
    assert sum(listings) <= 125 and max(listings) <= 16 + 5
    victim = sorted(expected)[37]
    storage.remove(storage.join(folder, victim))
    with pytest.raises(OutputMismatch, match=f"^{storage.join(folder, victim)}: written by this stage but not on"):
        check_outputs({folder: expected})
    storage.write_bytes(storage.join(folder, victim), b"longer than it was")
    with pytest.raises(OutputMismatch, match=f"the stage wrote {expected[victim]} bytes, the store holds 18$"):
        check_outputs({folder: expected})


def test_a_local_folder_is_checked_with_one_listing(tmp_path, monkeypatch):
    folder = str(tmp_path / "data")
    expected = _write(folder, _hex_names(40))
    monkeypatch.setattr(checks, "LIST_GROUP", 4)
    assert not storage.lists_by_prefix(folder)
    assert check_outputs({folder: expected, str(tmp_path / "empty"): {}}) == 40
    assert storage.list_sizes(folder, "part-0") == {n: s for n, s in expected.items() if n.startswith("part-0")}
    victim = sorted(expected)[5]
    (tmp_path / "data" / victim).unlink()
    with pytest.raises(OutputMismatch, match="written by this stage but not on the store"):
        check_outputs({folder: expected})
