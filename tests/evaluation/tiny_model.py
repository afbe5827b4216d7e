"""A tiny WordPiece tokenizer trained in the test and a tiny random ELECTRA exported to HF."""
from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from .glue_files import WORDS

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_tokenizer(out_dir: Path, *, extra: list[str] = ()) -> Path:
    """WordPiece (lower-cased, BERT normaliser) with the BERT post-processor for pairs."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    texts = [" ".join(WORDS)] * 3 + list(extra) * 3 + [
        "the a an which what is missing zeta answer ends here excellent ?.-0123456789"] * 3
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=SPECIALS, min_frequency=1))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (out_dir / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab))
    return out_dir


def tiny_export(out_dir: Path, *, tokenizer_dir: Path, num_layers: int = 2, hidden: int = 32,
                seed: int = 0) -> Path:
    """``out_dir/{discriminator,generator}`` of a randomly initialised tiny ELECTRA."""
    from electra.config import ModelConfig
    from electra.checkpoint.hf_export import export_hf
    from electra.model.networks import ElectraForPretraining

    vocab = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size()
    cfg = ModelConfig(vocab_size=vocab, embedding_size=16, hidden_size=hidden,
                      num_layers=num_layers, num_heads=2, intermediate_size=2 * hidden,
                      generator_fraction=0.5, max_position_embeddings=128)
    torch.manual_seed(seed)
    model = ElectraForPretraining(cfg)
    return export_hf(model, cfg, out_dir, tokenizer_dir=tokenizer_dir)
