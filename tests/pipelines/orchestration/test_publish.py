"""pipelines/orchestration/publish.py without a build: the rejected-part lists beside the
manifest are kept while a kept manifest names them and swept once none does."""
from __future__ import annotations

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


def test_superseded_rejected_lists_are_swept_and_kept_ones_stay(tmp_path):
    builds = []
    for n in (3, 4, 5):  # three publishes with different quarantines
        m = make_manifest()
        m.rejected = many_rejected(n)
        m.save(str(tmp_path))
        builds.append(schema.Manifest.load(str(tmp_path)))
    paths = [m.rejected_index.path for m in builds]
    assert len(set(paths)) == 3 and all((tmp_path / p).exists() for p in paths)
    (tmp_path / "rejected-notes.txt").write_text("not a list: left alone")
    removed = collect_garbage(Published(str(tmp_path)), keep=builds[1:])
    assert paths[0] in removed and not (tmp_path / paths[0]).exists()
    assert all((tmp_path / p).exists() for p in paths[1:]) and (tmp_path / "rejected-notes.txt").exists()
    assert schema.Manifest.load(str(tmp_path)).rejected == many_rejected(5)
