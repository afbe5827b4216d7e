"""pipelines/orchestration/publish.py without a build: what the garbage collection keeps and
sweeps: quarantine folders and their part lists while a kept manifest names them, stray parts
beside the listed ones, and format 3's rejected-part files once no kept manifest names them."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from pipelines import schema
from tests.pipelines.test_schema import make_manifest, many_rejected
from pipelines.orchestration.publish import collect_garbage


@dataclass
class Published:
    """What ``collect_garbage`` reads of a build (``publish.CorpusBuild``)."""
    out: str
    keys: dict = field(default_factory=dict)
    keep_cache: bool = True

    @property
    def work(self) -> str:
        return f"{self.out}/{schema.WORK_DIR}"


def test_quarantine_folders_and_lists_stay_while_named_and_strays_go(tmp_path):
    old, new = make_manifest(), make_manifest()
    old.rejected = [schema.RejectedInfo("filter", f"rejected/filter-old/part-{i}.jsonl.zst", 1, 10) for i in range(3)]
    old.save(str(tmp_path))
    new.rejected = many_rejected(6)  # rejected/filter-k2 and rejected/near_dedup-k3
    new.save(str(tmp_path))
    for folder in ("rejected/filter-old", "rejected/filter-k2", "rejected/near_dedup-k3"):
        for r in schema.read_rejected(str(tmp_path), old if "old" in folder else new, folder=folder):
            (tmp_path / r.path).write_bytes(b"x" * r.bytes)
    stray = tmp_path / "rejected/filter-k2/part-killed-attempt.jsonl.zst"
    stray.write_bytes(b"x")
    # a format-3 list of a build before: swept once no kept manifest names it
    (tmp_path / "rejected-0123456789abcdef.json").write_text(json.dumps({"rejected": []}))
    (tmp_path / "rejected-notes.txt").write_text("not a list: left alone")
    removed = collect_garbage(Published(str(tmp_path)), keep=[schema.Manifest.parse(
        schema.read_manifest_bytes(str(tmp_path)), "m"), old])
    assert sorted(removed) == ["rejected-0123456789abcdef.json", "rejected/filter-k2/part-killed-attempt.jsonl.zst"]
    assert (tmp_path / "rejected/filter-old/_parts.arrow").exists()  # the previous manifest names it
    assert schema.Manifest.load(str(tmp_path)).rejected == many_rejected(6)
    assert all((tmp_path / r.path).exists() for r in many_rejected(6))
    # the previous manifest superseded: its folder, list included, goes
    removed = collect_garbage(Published(str(tmp_path)), keep=[schema.Manifest.load(str(tmp_path))])
    assert removed == ["rejected/filter-old"] and not (tmp_path / "rejected/filter-old").exists()
    assert (tmp_path / "rejected/filter-k2/_parts.arrow").exists() and (tmp_path / "rejected-notes.txt").exists()
