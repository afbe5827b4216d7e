"""A released ELECTRA pair as a user's download looks, made with ``transformers`` itself (random
weights; nothing is downloaded): ``discriminator/`` (ElectraForPreTraining) and ``generator/``
(ElectraForMaskedLM, a quarter of the width), each with config.json, model.safetensors and the
tokenizer files of a BERT-style vocab.txt (special tokens at 0 and 100-103,
``tests.pipelines._hf_folders``). The embedding block is the same in both, as in the released
pairs, unless ``generator_embeddings_differ``.

``generator``: sizes of the generator's config that differ from ``GEN`` (released pairs outside
Google's use other ratios: an FFN of 2x its width, other head counts, fewer layers).
``tokenizer``: a tokenizer folder whose files the pair carries instead of the BERT-style one (a
tiny corpus's, so a test can train on that corpus without building one with the pipeline)."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from tests.pipelines._hf_folders import bert_vocab, electra_folder

DISC = dict(hidden_size=64, num_attention_heads=2, intermediate_size=256)
GEN = dict(hidden_size=16, num_attention_heads=1, intermediate_size=64)  # fraction 0.25, as derived
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")


def released_pair(root: Path, *, do_lower_case: bool = True, generator_embeddings_differ: bool = False,
                  seed: int = 0, generator: dict | None = None, tokenizer: Path | None = None) -> Path:
    import transformers as tf

    torch.manual_seed(seed)
    vocab_size = len(bert_vocab()) if tokenizer is None else _vocab_size(tokenizer)
    common = dict(vocab_size=vocab_size, embedding_size=32, num_hidden_layers=2, max_position_embeddings=128,
                  type_vocab_size=2, hidden_act="gelu")
    disc = tf.ElectraForPreTraining(tf.ElectraConfig(**DISC, **common))
    gen = tf.ElectraForMaskedLM(tf.ElectraConfig(**{**common, **GEN, **(generator or {})}))
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    if generator_embeddings_differ:
        with torch.no_grad():
            gen.electra.embeddings.word_embeddings.weight.add_(0.01)
    for side, model in (("discriminator", disc), ("generator", gen)):
        folder = Path(root) / side
        if tokenizer is None:
            electra_folder(folder, do_lower_case=do_lower_case, layout="released")
        else:
            folder.mkdir(parents=True)
            for name in TOKENIZER_FILES:
                shutil.copyfile(Path(tokenizer) / name, folder / name)
        model.save_pretrained(str(folder))  # config.json and model.safetensors over the stubs
    return Path(root)


def _vocab_size(tokenizer: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(tokenizer) / "tokenizer.json")).get_vocab_size()
