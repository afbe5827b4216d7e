"""pipelines/orchestration/publish.py without a build: what the garbage collection keeps and
sweeps: quarantine folders and their part lists while a kept manifest names them, stray parts and
superseded lists beside the listed ones, format 3's rejected-part files once no kept manifest
names them; and an upgrade from format 3 keeps the previous corpus's quarantine readable."""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field

from pipelines import schema
from tests.pipelines.test_schema import make_manifest, many_rejected, write_format_3
from pipelines.orchestration import publish as publish_module
from pipelines.orchestration.publish import collect_garbage


@dataclass
class Published:
    """What ``collect_garbage`` and ``publish`` read of a build (``publish.CorpusBuild``)."""
    out: str
    keys: dict = field(default_factory=dict)
    keep_cache: bool = True

    @property
    def work(self) -> str:
        return f"{self.out}/{schema.WORK_DIR}"


def _parsed(tmp_path) -> schema.Manifest:
    return schema.Manifest.parse(schema.read_manifest_bytes(str(tmp_path)), "m")


def _materialise(tmp_path, parts: list[schema.RejectedInfo]) -> None:
    for r in parts:
        (tmp_path / r.path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / r.path).write_bytes(b"x" * r.bytes)


def test_quarantine_folders_and_lists_stay_while_named_and_strays_go(tmp_path):
    old, new = make_manifest(), make_manifest()
    old.rejected = [schema.RejectedInfo("filter", f"rejected/filter-old/part-{i}.jsonl.zst", 1, 10) for i in range(3)]
    old.save(str(tmp_path))
    _materialise(tmp_path, old.rejected)
    superseded = many_rejected(4)  # rejected/filter-k2 and rejected/near_dedup-k3, another content
    dataclasses.replace(make_manifest(), rejected=superseded).save(str(tmp_path))
    new.rejected = many_rejected(6)
    new.save(str(tmp_path))
    _materialise(tmp_path, new.rejected)
    stray = tmp_path / "rejected/filter-k2/part-killed-attempt.jsonl.zst"
    stray.write_bytes(b"x")
    # a format-3 list of a build before: swept once no kept manifest names it
    (tmp_path / "rejected-0123456789abcdef.json").write_text(json.dumps({"rejected": []}))
    (tmp_path / "rejected-notes.txt").write_text("not a list: left alone")
    removed = collect_garbage(Published(str(tmp_path)), keep=[_parsed(tmp_path), old])
    stale = {r.path for r in schema.write_rejected_lists(str(tmp_path / "scratch"), superseded)}
    assert sorted(removed) == sorted(["rejected-0123456789abcdef.json", "rejected/filter-k2/part-killed-attempt.jsonl.zst",
                                      *stale])  # the lists of the publish in between: no kept manifest names them
    assert all((tmp_path / r.path).exists() for m in (old, new) for r in m.rejected_lists)
    assert schema.Manifest.load(str(tmp_path)).rejected == many_rejected(6)
    assert all((tmp_path / r.path).exists() for r in many_rejected(6))
    # the previous manifest superseded: its folder, list included, goes
    removed = collect_garbage(Published(str(tmp_path)), keep=[schema.Manifest.load(str(tmp_path))])
    assert removed == ["rejected/filter-old"] and not (tmp_path / "rejected/filter-old").exists()
    assert (tmp_path / "rejected-notes.txt").exists()


def test_a_publish_over_a_format_3_corpus_keeps_its_quarantine_readable(tmp_path, monkeypatch):
    """The previous manifest is of format 3 (one JSON list beside it): its quarantine folders
    are kept for a reader still on it, and its list with them."""
    previous = make_manifest("g0")
    previous.rejected = [schema.RejectedInfo("filter", f"rejected/filter-old/part-{i}.jsonl.zst", 2, 20)
                         for i in range(3)]
    _, listed = write_format_3(tmp_path, previous)
    _materialise(tmp_path, previous.rejected)
    new = make_manifest("g1")
    new.rejected = many_rejected(4)
    _materialise(tmp_path, new.rejected)
    # the manifest a build's results give, here given: publishing is what is tested
    monkeypatch.setattr(publish_module, "manifest_of", lambda build, results: new)
    publish_module.publish(Published(str(tmp_path)), {})
    back = schema.Manifest.load(str(tmp_path))
    assert back.format_version == 4 and back.rejected == many_rejected(4)
    assert (tmp_path / listed).exists()
    assert all((tmp_path / r.path).exists() for r in previous.rejected)


def test_a_missing_list_keeps_its_folder_whole_with_a_warning(tmp_path, caplog):
    m = make_manifest()
    m.rejected = many_rejected(4)
    m.save(str(tmp_path))
    _materialise(tmp_path, m.rejected)
    stray = tmp_path / "rejected/filter-k2/part-stray.jsonl.zst"
    stray.write_bytes(b"x")
    (tmp_path / m.rejected_lists[0].path).unlink()
    with caplog.at_level(logging.WARNING, logger="pipelines.orchestration.publish"):
        removed = collect_garbage(Published(str(tmp_path)), keep=[_parsed(tmp_path)])
    assert removed == [] and stray.exists()
    assert any("not sweeping rejected/filter-k2" in r.getMessage() and m.rejected_lists[0].path in r.getMessage()
               for r in caplog.records)
