"""lm_quality in another language: a reference text in the language (``filter.by_language.<code>
.lm_quality.reference``) turns the block on for it, tokenised by the language's splitter; without
one the block is off for that language. On real Chinese (Debian Reference sections; the reference
and the scored sections disjoint), prose gains from its context where the same words shuffled
lose, and the reference's sha256 is part of the filter stage's key."""
from __future__ import annotations

import random

from pipelines.config import CorpusConfig
from pipelines.orchestration.stages import filter_fingerprint
from pipelines.filters.base import Doc, Filters
from pipelines.filters.lm_quality import model
from pipelines.language.segmenters import splitter
from tests.pipelines._languages import documents


def test_a_chinese_reference_scores_chinese_words(tmp_path):
    docs = documents("zh-cn")
    ref, scored = [d for i, d in enumerate(docs) if i % 3], [d for i, d in enumerate(docs) if not i % 3]
    path = tmp_path / "zh.txt"
    path.write_text("\n\n".join(ref), encoding="utf-8")
    m = model(str(path), 1, "jieba")
    assert "系统" in m.vocab and "系" not in m.vocab  # jieba words, not characters or clause runs
    split, rng = splitter("jieba"), random.Random(0)
    prose, shuffled = [], []
    for d in scored:
        words = split(d)
        rng.shuffle(words)
        prose.append(m.score(d).context_gain)
        shuffled.append(m.score("".join(words)).context_gain)
    assert sum(prose) / len(prose) > sum(shuffled) / len(shuffled) + 0.1

    cfg = CorpusConfig.from_dict({"language": ["zh"], "filter": {"by_language": {
        "zh": {"lm_quality": {"reference": str(path), "min_count": 1}}}}})
    names = [b.name for b in Filters(cfg.filter).prepare(Doc(docs[0]))]
    assert "lm_quality" in names
    assert "lm_reference_zh" in filter_fingerprint(cfg)
    off = CorpusConfig.from_dict({"language": ["zh"]})
    assert "lm_quality" not in [b.name for b in Filters(off.filter).prepare(Doc(docs[0]))]
