"""docs/add-a-filter.md, done as it says: one new module in pipelines/filters/ and its config.

The new module is not written into this checkout (other tests share it): the test makes a copy of
the ``pipelines`` package whose files are links to this checkout's, adds the module to the copy's
``pipelines/filters/``, and runs a build in a subprocess that imports the copy. So the block is
found by the same package scan as the shipped ones, with no hook of the test's own.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic import prose

REPO = Path(__file__).resolve().parents[3]

# The walk-through's module, as the doc shows it (the doc's text is checked against this below).
BANNED_WORD = '''\
"""Drop a document that contains a banned word (docs/add-a-filter.md's example)."""
from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.filters.block import Doc, Verdict
from pipelines.filters.registry import register


@dataclass
class BannedWordConfig:
    words: list[str] = field(default_factory=lambda: ["lorem"])  # compared in lower case


class BannedWord:
    name = "banned_word"

    def __init__(self, cfg: BannedWordConfig):
        self.words = {w.lower() for w in cfg.words}

    def __call__(self, doc: Doc) -> Verdict | None:
        for word in doc.words:
            if word.strip(".,;:!?\\"'()").lower() in self.words:
                return Verdict("filter:banned_word:word", f"word={word!r}")
        return None


@register("banned_word", config=BannedWordConfig, position=5, default=False)
def build(cfg: BannedWordConfig) -> BannedWord:
    return BannedWord(cfg)
'''

SCRIPT = """
import json, sys
from pipelines.config import CorpusConfig, FILTER_BLOCKS
from pipelines.corpus_job import CorpusJob
from pipelines.engine import raydata
from pipelines.orchestration.runner import CorpusBuild
import pipelines.filters.banned_word as module

assert module.__file__.startswith(sys.argv[3]), module.__file__  # the copy's module, found by the scan
raydata.init_ray(num_cpus=1)
cfg = CorpusConfig.from_dict(json.loads(sys.argv[2]))
manifest = CorpusBuild(CorpusJob(sources=[sys.argv[1]], out=sys.argv[4], config=cfg)).run()
print(json.dumps({"blocks": list(FILTER_BLOCKS), "dropped": manifest.stats["filter"]["dropped"],
                  "documents_in": manifest.stats["filter"]["documents_in"]}))
"""


def package_copy(root: Path) -> Path:
    """``root/pipelines``: this checkout's package, every file a link to the real one."""
    shutil.copytree(REPO / "pipelines", root / "pipelines", symlinks=True, copy_function=os.symlink,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root / "pipelines"


def test_the_walk_through_shows_this_module():
    doc = (REPO / "docs" / "add-a-filter.md").read_text()
    assert BANNED_WORD in doc


def test_a_new_filter_module_runs_in_a_build_and_counts_its_drops(tmp_path):
    docs = prose.documents(60, seed=3)
    docs = [d + "\nA zebra crossed the road at noon." if i % 4 == 0 else d for i, d in enumerate(docs)]
    expected = sum(1 for d in docs if "zebra" in d.split())
    assert expected == 15
    raw = prose.write_corpus(tmp_path / "raw", docs=docs, near_duplicates=0, exact_duplicates=0, bad_files=False)

    (package_copy(tmp_path / "copy") / "filters" / "banned_word.py").write_text(BANNED_WORD)
    cfg = {"filter": {"blocks": ["banned_word", "language"], "banned_word": {"words": ["Zebra"]}},
           "tokenizer": {"vocab_size": 700, "min_frequency": 1}, "shard": {"min_shards_per_split": 3},
           "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7}}
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "copy")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(raw), json.dumps(cfg), str(tmp_path / "copy"),
                           str(tmp_path / "corpus")], cwd=tmp_path / "copy", env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # Declared at position 5: before every shipped block, off unless listed.
    assert out["blocks"][0] == "banned_word" and out["blocks"][1:] == [
        "gopher_quality", "gopher_repetition", "code", "c4", "fineweb", "language", "lm_quality", "pii"]
    assert out["documents_in"] == len(docs)
    assert out["dropped"].get("filter:banned_word:word") == expected, out["dropped"]


@pytest.mark.parametrize("section,match", [
    ({"blocks": ["banned_words"]}, r"^corpus config\.filter\.blocks\[0\]: 'banned_words' is not one of \["),
    ({"banned_word": {"words": []}}, r"^corpus config\.filter: unknown key\(s\) \['banned_word'\]; known keys: "),
])
def test_without_its_module_the_loader_rejects_the_filter_in_one_line(section, match):
    from common.config import ConfigError
    from pipelines.config import CorpusConfig

    with pytest.raises(ConfigError, match=match) as err:
        CorpusConfig.from_dict({"filter": section})
    assert "\n" not in str(err.value)
