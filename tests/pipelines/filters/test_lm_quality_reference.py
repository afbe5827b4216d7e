"""A reference named for the ``lm_quality`` block: a bad one fails when the build is planned (one
line naming ``filter.lm_quality.reference``), its content decides the model (an edited file is a
new model and a new filter-stage key, even in a process that built the old one)."""
from __future__ import annotations

import gzip

import pytest

from common.config import ConfigError
from pipelines.config import CorpusConfig
from pipelines.orchestration.stages import filter_fingerprint
from pipelines.filters import lm_quality

TEXT = ("the old man walked to the river and sat down by the water .\n\n"
        "a young woman came to the river and spoke to the old man .\n\n") * 20


def _cfg(reference: str) -> CorpusConfig:
    return CorpusConfig.from_dict({"filter": {"lm_quality": {"reference": reference}}})


@pytest.mark.parametrize("name,data,match", [
    ("ref.txt.gz", b"plain text, not gzip", "is not a gzip file"),
    ("ref.txt", "caf\u00e9".encode("latin-1") * 10, "is not UTF-8"),
    ("missing.txt", None, "missing.txt"),
])
def test_a_bad_reference_fails_at_planning_naming_the_key(tmp_path, name, data, match):
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(ConfigError, match=match) as err:
        filter_fingerprint(_cfg(str(path)))
    assert str(err.value).startswith("filter.lm_quality.reference: ") and "\n" not in str(err.value)
    assert str(err.value).count("filter.lm_quality.reference") == 1


def test_the_models_content_not_its_location_is_cached(tmp_path):
    path = tmp_path / "ref.txt.gz"
    path.write_bytes(gzip.compress(TEXT.encode()))
    first = lm_quality.model(str(path), 2)
    assert lm_quality.model(str(path), 2) is first
    key = filter_fingerprint(_cfg(str(path)))
    path.write_bytes(gzip.compress((TEXT + "a bird sang over the river .\n\n" * 3).encode()))
    second = lm_quality.model(str(path), 2)
    assert second is not first and "bird" in second.vocab and "bird" not in first.vocab
    assert filter_fingerprint(_cfg(str(path))) != key
