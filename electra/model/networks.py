"""ELECTRA networks in plain PyTorch: a shared embedding block, a narrow generator, a discriminator.

Shape of the model (Clark et al. 2020; docs/electra-reference.md §3):

- ``ElectraEmbeddings``: word + position + token-type embeddings, LayerNorm, dropout. ONE instance
  is shared by both networks (the whole block, LayerNorm included: the paper's "all tied" variant).
- ``ElectraEncoder``: the shared embeddings, an own ``embeddings_project`` Linear when the embedding
  size differs from the hidden size, then BERT post-LayerNorm layers. The generator and the
  discriminator are two encoders; the generator is ``generator_fraction`` as wide and as deep,
  unless the config gives its shape (``ModelConfig.generator_sizes`` and ``generator_depth``).
- ``GeneratorHead``: dense(H_g -> E) -> GELU -> LayerNorm -> logits against the (tied) word
  embeddings + bias. Called only on the gathered masked positions: at 15 % masking this avoids
  ~85 % of the largest matmul of the step (E x vocab per token).
- ``DiscriminatorHead``: dense(H -> H) -> GELU -> dense(H -> 1).

Hidden dropout is ``Dropout`` below, not ``nn.Dropout``: the same distribution (keep with
probability 1 - p, scale by 1 / (1 - p)) but its scaled mask is built in place from
``torch.rand(...)`` (``ge_``, ``mul_``), which on the CPU is about twice as fast as ``F.dropout``'s
``bernoulli_`` path (fwd + bwd of a 4096 x 256 fp32 tensor: ~18-23 vs ~36 ms). Randomness still
comes from torch's global generator, so runs stay resumable.
Attention dropout stays inside SDPA (a hand-written attention with the fast mask was no faster).

Speed choices, all numerically equivalent to the Hugging Face ``transformers`` classes (the export
tests compare logits): Q, K and V are one fused Linear (one GEMM instead of three; the HF key map
in ``hf_export`` splits it), attention is ``F.scaled_dot_product_attention`` with no mask at all
when a batch has no padding (so the fused CPU/GPU kernels apply), GELU is the exact erf form.
Parameter names mirror HF's (``LayerNorm``, ``dense``, ``dense_prediction``) so the key map is
short. This file knows nothing about DeepSpeed, compilation or checkpoints.

No compute on padding (``ElectraEncoder.unpad``, on by default): when a batch has padding, each
encoder forward unpads once and every token-wise op runs on the real tokens only; attention
regroups them by row (``electra/model/unpadding.py`` explains the layout, the CUDA and CPU attention
paths and the trade-offs).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig
from electra.model.unpadding import Unpadded, unpad_layout, unpadded_attention


class _DropoutFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        # 0 or 1/(1-p), built in place in the uniform buffer: rand, ge_, mul_ and one multiply.
        scale = torch.rand(x.shape, device=x.device).ge_(p).mul_(1.0 / (1.0 - p)).to(x.dtype)
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (scale,) = ctx.saved_tensors
        return grad * scale, None


class Dropout(nn.Module):
    """Inverted dropout with a mask built in place from ``torch.rand`` (see the module docstring)."""

    def __init__(self, p: float):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return _DropoutFn.apply(x, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ElectraEmbeddings(nn.Module):
    """Word, position and token-type embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, *, vocab_size: int, embedding_size: int, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, layer_norm_eps: float = 1e-12, dropout: float = 0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, embedding_size)
        self.position_embeddings = nn.Embedding(max_position_embeddings, embedding_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, embedding_size)
        self.LayerNorm = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.dropout = Dropout(dropout)

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> ElectraEmbeddings:
        return cls(vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size,
                   max_position_embeddings=cfg.max_position_embeddings,
                   type_vocab_size=cfg.type_vocab_size, layer_norm_eps=cfg.layer_norm_eps,
                   dropout=cfg.hidden_dropout)

    @property
    def embedding_size(self) -> int:
        return self.word_embeddings.embedding_dim

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None = None,
                layout: Unpadded | None = None) -> torch.Tensor:
        """[B, T, E], or [N, E] for the real tokens of ``layout`` only."""
        if layout is not None:
            ids = input_ids.reshape(-1).index_select(0, layout.indices)
            x = self.word_embeddings(ids) + self.position_embeddings(layout.positions)
            if segment_ids is None:
                x = x + self.token_type_embeddings.weight[0]
            else:
                x = x + self.token_type_embeddings(segment_ids.reshape(-1).index_select(0, layout.indices).long())
            return self.dropout(self.LayerNorm(x))
        seq_len = input_ids.shape[1]
        x = self.word_embeddings(input_ids) + self.position_embeddings.weight[:seq_len]
        if segment_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(segment_ids.long())
        return self.dropout(self.LayerNorm(x))


class EncoderLayer(nn.Module):
    """One BERT post-LN block: x = LN(x + attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, *, hidden_size: int, num_heads: int, intermediate_size: int,
                 hidden_dropout: float = 0.1, attention_dropout: float = 0.1, layer_norm_eps: float = 1e-12):
        super().__init__()
        self.num_heads = num_heads
        self.attention_dropout = attention_dropout
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)  # rows: [query; key; value]
        self.attn_out = nn.Linear(hidden_size, hidden_size)
        self.attn_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.ffn_in = nn.Linear(hidden_size, intermediate_size)
        self.ffn_out = nn.Linear(intermediate_size, hidden_size)
        self.ffn_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = Dropout(hidden_dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, layout: Unpadded | None = None) -> torch.Tensor:
        """``x``: [B, T, H] with ``attn_mask``, or the real tokens [N, H] of ``layout``."""
        p = self.attention_dropout if self.training else 0.0
        if layout is not None:
            a = unpadded_attention(self.qkv(x), layout, self.num_heads, p)
        else:
            b, t, h = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, h // self.num_heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
            a = a.transpose(1, 2).reshape(b, t, h)
        x = self.attn_norm(x + self.dropout(self.attn_out(a)))
        y = self.ffn_out(F.gelu(self.ffn_in(x)))
        return self.ffn_norm(x + self.dropout(y))


class ElectraEncoder(nn.Module):
    """Embeddings (possibly shared) -> optional projection -> ``num_layers`` encoder layers."""

    def __init__(self, embeddings: ElectraEmbeddings, *, hidden_size: int, num_layers: int, num_heads: int,
                 intermediate_size: int, hidden_dropout: float = 0.1, attention_dropout: float = 0.1,
                 layer_norm_eps: float = 1e-12, unpad: bool = True):
        super().__init__()
        self.embeddings = embeddings
        self.hidden_size = hidden_size
        # Skip the padding of padded batches (module docstring). A plain attribute, not a config key:
        # both paths give the same results, so only a benchmark or a debugging session turns it off.
        self.unpad = unpad
        e = embeddings.embedding_size
        self.embeddings_project = nn.Linear(e, hidden_size) if e != hidden_size else None
        self.layers = nn.ModuleList(
            EncoderLayer(hidden_size=hidden_size, num_heads=num_heads, intermediate_size=intermediate_size,
                         hidden_dropout=hidden_dropout, attention_dropout=attention_dropout,
                         layer_norm_eps=layer_norm_eps)
            for _ in range(num_layers))

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *, keep_unpadded: bool = False):
        """``attention_mask``: [B, T], nonzero/True for real tokens (None: all real). Returns [B, T, H]
        (zeros at pad positions when unpadded), or with ``keep_unpadded`` (hidden, layout): the [N, H]
        real tokens and their layout, or [B, T, H] and None (no padding in the batch, or ``unpad``
        off). One entry point, so a compiled module (``nn.Module.compile``) covers both uses."""
        x, layout = self._encode(input_ids, segment_ids, attention_mask)
        if keep_unpadded:
            return x, layout
        return x if layout is None else layout.to_padded(x)

    def _encode(self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None,
                attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, Unpadded | None]:
        layout = unpad_layout(attention_mask) if self.unpad else None
        x = self.embeddings(input_ids, segment_ids, layout)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        # With ``unpad`` on, no layout means no padding: no mask (and no second check of it).
        mask = None if self.unpad else sdpa_mask(attention_mask)
        for layer in self.layers:
            x = layer(x, mask, layout)
        return x, layout


def sdpa_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """[B, T] padding mask -> boolean [B, 1, 1, T] key mask for SDPA, or None when nothing is padded.

    Returning None for an unpadded batch lets SDPA pick its fused kernels; padded query rows still
    attend to the real keys, so no row is fully masked (that would give NaN).
    """
    if attention_mask is None:
        return None
    keep = attention_mask.bool()
    if bool(keep.all()):
        return None
    return keep[:, None, None, :]


class GeneratorHead(nn.Module):
    """dense(H_g -> E) -> GELU -> LayerNorm -> logits tied to the word embeddings, + bias."""

    def __init__(self, *, hidden_size: int, embedding_size: int, vocab_size: int, layer_norm_eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.LayerNorm = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        h = self.LayerNorm(F.gelu(self.dense(hidden)))
        return F.linear(h, word_embeddings, self.bias)


class DiscriminatorHead(nn.Module):
    """dense(H -> H) -> GELU -> dense(H -> 1): one replaced-or-real logit per token."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dense_prediction = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(F.gelu(self.dense(hidden))).squeeze(-1)


def build_encoder(cfg: ModelConfig, embeddings: ElectraEmbeddings, *, generator: bool = False) -> ElectraEncoder:
    """The discriminator-sized (or, with ``generator=True``, generator-sized) encoder of ``cfg``."""
    if generator:
        (hidden, heads, ffn), layers = cfg.generator_sizes(), cfg.generator_depth
    else:
        (hidden, heads, ffn), layers = (cfg.hidden_size, cfg.num_heads, cfg.intermediate_size), cfg.num_layers
    return ElectraEncoder(embeddings, hidden_size=hidden, num_layers=layers, num_heads=heads,
                          intermediate_size=ffn, hidden_dropout=cfg.hidden_dropout,
                          attention_dropout=cfg.attention_dropout, layer_norm_eps=cfg.layer_norm_eps)


def init_weights(module: nn.Module, std: float) -> None:
    """BERT/ELECTRA init: normal(0, std) for Linear and Embedding weights, zero biases, unit LayerNorm."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, GeneratorHead):
            nn.init.zeros_(m.bias)


class ElectraForPretraining(nn.Module):
    """Generator + discriminator sharing ``embeddings``; the objective decides what to run."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.embeddings = ElectraEmbeddings.from_config(cfg)
        self.generator = build_encoder(cfg, self.embeddings, generator=True)
        self.discriminator = build_encoder(cfg, self.embeddings)
        self.generator_head = GeneratorHead(hidden_size=cfg.generator_sizes().hidden_size,
                                            embedding_size=cfg.embedding_size, vocab_size=cfg.vocab_size,
                                            layer_norm_eps=cfg.layer_norm_eps)
        self.discriminator_head = DiscriminatorHead(cfg.hidden_size)
        init_weights(self, cfg.initializer_range)

    def generator_logits(self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None = None,
                         attention_mask: torch.Tensor | None = None,
                         positions: torch.Tensor | None = None) -> torch.Tensor:
        """Vocabulary logits: [M, V] at flat ``positions`` (indices into B*T), or [B, T, V] if None."""
        hidden, layout = self.generator(input_ids, segment_ids, attention_mask, keep_unpadded=True)
        if layout is not None:  # [B, T, H] is only a scatter of [N, H_g]: cheap next to the encoder
            hidden = layout.to_padded(hidden)
        if positions is not None:
            hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)
        return self.generator_head(hidden, self.embeddings.word_embeddings.weight)

    def discriminator_logits(self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None = None,
                             attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """One logit per token, [B, T]; positive means "replaced" (0 at pad positions when unpadded)."""
        hidden, layout = self.discriminator(input_ids, segment_ids, attention_mask, keep_unpadded=True)
        logits = self.discriminator_head(hidden)  # on the real tokens only when unpadded
        return logits if layout is None else layout.to_padded(logits)
