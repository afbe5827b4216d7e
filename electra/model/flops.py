"""Training FLOPs per token of an ELECTRA config, the numerator of MFU.

Counted: matrix products only (2 FLOPs per multiply-add), as in the usual "6N" accounting; the
embedding lookups, LayerNorm, softmax, GELU, dropout and the loss are memory-bound and left out,
which is the convention MFU figures are quoted in (PaLM appendix B, nanoGPT).

Forward FLOPs per token for an encoder of width h, FFN f, L layers, sequence length T, embedding e:

    proj   = 2 e h                      (only when e != h)
    layer  = 2 (3h^2 + h^2 + 2 h f)     (QKV, attention output, FFN in and out)
           + 4 T h                      (scores Q K^T and the weighted sum of V: T h each)
    encoder = proj + L * layer

ELECTRA forward = generator encoder + discriminator encoder + discriminator head (2h^2 + 2h)
+ p * generator head, where the generator head (2 h_g e + 2 e V) runs only at the chosen positions,
a share p = mask_prob of the tokens (the cap max_predictions seldom binds; the fixed-shape
masking computes k = max_predictions slots per row, within a slot or two of p T for full rows). The "mlm" objective is
the discriminator encoder + p * an MLM head of discriminator width. Training = 3 x forward
(backward costs two matmuls per forward matmul: gradients of inputs and of weights).

Tokens are the non-pad tokens of a batch: the model computes nothing on padding
(``electra.model.networks``), and MFU multiplies this count by the non-pad tokens per second, so a
padded batch is not credited with work on its pad positions (nor is the padded path, which does
that work). ``attention_len`` is the number of keys each real query attends to on average,
sum(len^2) / sum(len) over the batch's rows; by default the sequence length, an upper bound that
a caller without the batch's lengths (the trainer's log) uses. The attention term is a small share
at length 128 (4 T h against ~24 h^2 per layer).
"""
from __future__ import annotations

from electra.config import ElectraConfig


def encoder_flops_per_token(*, hidden: int, ffn: int, layers: int, seq_len: float, embedding: int) -> float:
    proj = 2.0 * embedding * hidden if embedding != hidden else 0.0
    layer = 2.0 * (4 * hidden * hidden + 2 * hidden * ffn) + 4.0 * seq_len * hidden
    return proj + layers * layer


def lm_head_flops(*, hidden: int, embedding: int, vocab: int) -> float:
    return 2.0 * hidden * embedding + 2.0 * embedding * vocab


def forward_flops_per_token(cfg: ElectraConfig, attention_len: float | None = None) -> float:
    m, p = cfg.model, cfg.objective.mask_prob
    t = cfg.seq_len if attention_len is None else attention_len
    disc = encoder_flops_per_token(hidden=m.hidden_size, ffn=m.intermediate_size, layers=m.num_layers,
                                   seq_len=t, embedding=m.embedding_size)
    if cfg.objective.kind == "mlm":
        return disc + p * lm_head_flops(hidden=m.hidden_size, embedding=m.embedding_size, vocab=m.vocab_size)
    g = m.generator_sizes()
    gen = encoder_flops_per_token(hidden=g.hidden_size, ffn=g.intermediate_size, layers=m.generator_depth,
                                  seq_len=t, embedding=m.embedding_size)
    disc_head = 2.0 * m.hidden_size * m.hidden_size + 2.0 * m.hidden_size
    gen_head = p * lm_head_flops(hidden=g.hidden_size, embedding=m.embedding_size, vocab=m.vocab_size)
    return gen + disc + disc_head + gen_head


def training_flops_per_token(cfg: ElectraConfig, attention_len: float | None = None) -> float:
    """Forward + backward matmul FLOPs per non-pad token: 3 x forward."""
    return 3.0 * forward_flops_per_token(cfg, attention_len)
