"""benchmarks/corpus/tokenizer_scripts.py: one --smoke run, its JSON checked for what must hold on any
machine (counts, not speeds): the shipped tokenizer keeps more of a mixed corpus's alphabet and
less [UNK] than BERT's recipe, and a Korean vocabulary of syllables where BERT's is jamo."""
from __future__ import annotations

import json

from benchmarks.corpus import tokenizer_scripts


def test_smoke_run(tmp_path):
    out = tmp_path / "scripts.json"
    assert tokenizer_scripts.main(["--smoke", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    mixed, korean = result["mixed"], result["korean"]
    assert mixed["bert"]["alphabet"] == 1000 < mixed["shipped"]["alphabet"] <= mixed["distinct_chars"]
    assert mixed["shipped"]["unk_share"] < mixed["bert"]["unk_share"] / 5
    assert korean["bert"]["with_syllables"] == 0 and korean["bert"]["with_jamo"] > 500
    assert korean["shipped"]["with_syllables"] > 500 and korean["shipped"]["with_jamo"] < 10
    assert korean["shipped"]["syllable_kept"] and not korean["bert"]["syllable_kept"]
