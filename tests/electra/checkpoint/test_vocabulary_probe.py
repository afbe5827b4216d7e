"""The vocabulary check before continued pre-training tokenises a fixed probe text both ways
(electra/checkpoint/vocabulary.py): transformers' AutoTokenizer for the checkpoint's folder, ``tokenizers``
for the corpus's tokenizer.json. Two tokenizers with the same tokens, special ids and
lower-casing but other accent stripping (a cased released folder whose bare vocab.txt was read
as stripping accents) are refused in one line; a corpus built from the folder itself passes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from electra.checkpoint import vocabulary
from electra.data.corpus import CorpusMismatchError
from electra.checkpoint.init_from import InitSource, check_vocabulary
from electra.config import ModelConfig
from pipelines.config import TokenizerConfig
from pipelines.tokenizer_pretrained import load_pretrained
from tests.pipelines._hf_folders import bert_vocab, electra_folder


def _corpus_vocab(out: Path) -> vocabulary.Vocabulary:
    data = (out / "tokenizer.json").read_bytes()
    return vocabulary.from_tokenizer_json(data, str(out / "tokenizer.json"), lowercase=False)


@pytest.fixture(scope="module")
def cased(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe")
    return electra_folder(root / "model", do_lower_case=False, layout="released")


def test_a_corpus_that_strips_the_accents_of_a_cased_model_is_refused(cased, tmp_path):
    # The same vocab.txt read as a bare file, accents stripped though the model keeps them: the
    # tokens, special ids and lower-casing all agree; only tokenising text shows the difference.
    info = load_pretrained(str(cased / "vocab.txt"), TokenizerConfig(lowercase=False, strip_accents=True),
                           str(tmp_path / "stripped"))
    assert info.lowercase is False
    source_vocab = vocabulary.with_probe(vocabulary.from_folder(str(cased)), str(cased))
    corpus_vocab = _corpus_vocab(tmp_path / "stripped")
    assert (source_vocab.sha256, source_vocab.specials, source_vocab.lowercase) == \
        (corpus_vocab.sha256, corpus_vocab.specials, corpus_vocab.lowercase)
    (diff,) = source_vocab.differences(corpus_vocab)
    assert diff.startswith("the probe text 'The Café Über naïve façade, THE RIVER 3.14!' tokenizes as "
                           "[CLS] The Café Über") and "vs [CLS] The Cafe Uber" in diff
    source = InitSource(str(cased), "hf", ModelConfig(vocab_size=len(bert_vocab())),
                        vocabulary.from_folder(str(cased)), cased, ())
    with pytest.raises(CorpusMismatchError) as err:
        check_vocabulary(source, corpus_vocab, "corpora/c")
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"--init-from {cased}: its vocabulary")
    assert f"rebuild the corpus with electra-build-corpus --tokenizer {cased}" in line


@pytest.mark.parametrize("location", ["folder", "vocab.txt"])
def test_a_corpus_built_from_the_released_tokenizer_passes(cased, tmp_path, location):
    # The folder, or its bare vocab.txt with --no-lowercase: accents follow lower-casing (kept).
    where, cfg = (str(cased), TokenizerConfig()) if location == "folder" else \
        (str(cased / "vocab.txt"), TokenizerConfig(lowercase=False))
    load_pretrained(where, cfg, str(tmp_path / "ok"))
    assert Tokenizer.from_file(str(tmp_path / "ok" / "tokenizer.json")).encode("Café Über").tokens == \
        ["[CLS]", "Café", "Über", "[SEP]"]
    corpus_vocab = _corpus_vocab(tmp_path / "ok")
    assert vocabulary.with_probe(vocabulary.from_folder(str(cased)), str(cased)).differences(corpus_vocab) == []
    source = InitSource(str(cased), "hf", ModelConfig(vocab_size=len(bert_vocab())),
                        vocabulary.from_folder(str(cased)), cased, ())
    check_vocabulary(source, corpus_vocab, "corpora/c")  # no error


def test_the_probe_is_what_transformers_gives(cased):
    import transformers

    hf = transformers.AutoTokenizer.from_pretrained(str(cased), local_files_only=True)
    assert vocabulary.from_folder(str(cased)).probe is None  # loaded only once the rest agrees
    got = vocabulary.with_probe(vocabulary.from_folder(str(cased)), str(cased)).probe
    want = [hf.tokenize(t) for t in vocabulary.PROBE] + [hf.tokenize(*vocabulary.PROBE_PAIR)]
    assert [list(p[1:-1]) for p in got[:-1]] == want[:-1]  # without [CLS] ... [SEP]
    assert [t for t in got[-1] if t not in ("[CLS]", "[SEP]")] == want[-1]
    assert json.loads((cased / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert "Café" in got[0] and "Über" in got[0]
