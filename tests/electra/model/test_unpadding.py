"""electra.model.networks unpadding: the real-token path against the padded model it replaces.

Tolerance (fp32, eval mode so dropout is off on both sides): loss within 1e-5 relative, logits
within 1e-5 absolute, every parameter gradient within 1e-4 relative to its largest entry. The
two paths sum in different orders (attention over W instead of T keys, GEMMs over N instead of
B x T rows), so bitwise equality is not expected; without padding they are the same code.
"""
from __future__ import annotations

import copy

import pytest
import torch

from electra.config import DataConfig, ElectraConfig, ModelConfig, ObjectiveConfig
from electra.model.flops import training_flops_per_token
from electra.model.networks import ElectraForPretraining
from electra.model.unpadding import jagged_attention, repadded_attention, unpad_layout, varlen_flash_attention
from electra.model.objective import ElectraObjective, SpecialTokens

SP = SpecialTokens()
T = 24


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=60, embedding_size=24, hidden_size=32, num_layers=2, num_heads=2,
                intermediate_size=64, max_position_embeddings=32, generator_fraction=0.5)
    return ModelConfig(**{**base, **kw})


def batch(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] tokens [SEP] rows of the given real lengths, padded to T; segment 1 on the second half."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (len(lengths), T), generator=g)
    seg = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, n:] = SP.pad
        ids[row, 0] = SP.cls
        if n > 1:
            ids[row, n - 1] = SP.sep
            seg[row, n // 2:n] = 1
    return ids, seg


# Heavy padding (fill 0.43): a row of length 1, a full row, varied lengths.
HEAVY = [24, 1, 5, 9, 3, 12, 2, 6]


def pair(cfg: ModelConfig | None = None) -> tuple[ElectraObjective, ElectraObjective]:
    """(unpadded, padded) objectives over identical weights, in eval mode."""
    torch.manual_seed(0)
    model = ElectraForPretraining(cfg or tiny())
    padded = copy.deepcopy(model)
    padded.generator.unpad = padded.discriminator.unpad = False
    ocfg = ObjectiveConfig()
    return (ElectraObjective(model, ocfg, SP, T).eval(), ElectraObjective(padded, ocfg, SP, T).eval())


def run(obj: ElectraObjective, ids, seg, seed: int = 5):
    obj.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # same masks and samples on both sides
    out = obj(ids, seg)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in obj.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lengths", [HEAVY, [1, 1, 24, 2], [10, 7, 13, 4, 8, 3]])
def test_loss_and_all_gradients_match_the_padded_model(lengths):
    fast, slow = pair()
    ids, seg = batch(lengths)
    assert 0.3 <= (ids == SP.pad).float().mean() <= 0.9
    (a, ga), (b, gb) = run(fast, ids, seg), run(slow, ids, seg)
    assert torch.equal(a.num_masked, b.num_masked) and a.replaced_frac == b.replaced_frac
    for field in ("loss", "gen_loss", "disc_loss"):
        x, y = getattr(a, field), getattr(b, field)
        assert abs(x.item() - y.item()) <= 1e-5 * abs(y.item()), field
    assert ga.keys() == gb.keys() and len(ga) == len(list(slow.parameters()))
    for name, g in gb.items():
        scale = g.abs().max().clamp(min=1e-12)
        assert (ga[name] - g).abs().max() <= 1e-4 * scale, name


def test_real_token_logits_match_and_pads_are_zero():
    fast, slow = pair()
    ids, seg = batch(HEAVY)
    real = ids != SP.pad
    with torch.no_grad():
        d_fast = fast.model.discriminator_logits(ids, seg, real)
        d_slow = slow.model.discriminator_logits(ids, seg, real)
        g_fast = fast.model.generator_logits(ids, seg, real)
        g_slow = slow.model.generator_logits(ids, seg, real)
        positions = real.view(-1).nonzero().squeeze(1)[::3]
        some = fast.model.generator_logits(ids, seg, real, positions)
    assert d_fast.shape == d_slow.shape == ids.shape and g_fast.shape == (*ids.shape, 60)
    assert torch.allclose(d_fast[real], d_slow[real], atol=1e-5)
    assert torch.allclose(g_fast[real], g_slow[real], atol=1e-5)
    assert torch.allclose(some, g_slow.reshape(-1, 60)[positions], atol=1e-5)
    assert torch.count_nonzero(d_fast[~real]) == 0


def test_real_tokens_need_not_be_a_prefix():
    fast, slow = pair()
    ids, seg = batch([24, 24, 24])
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, 3:9] = False
    mask[1, :5] = False
    mask[2, ::2] = False
    with torch.no_grad():
        a = fast.model.discriminator_logits(ids, seg, mask)
        b = slow.model.discriminator_logits(ids, seg, mask)
    assert torch.allclose(a[mask], b[mask], atol=1e-5)


def test_a_batch_without_padding_takes_the_padded_path_bit_for_bit():
    fast, slow = pair()
    ids, seg = batch([T] * 4)
    assert unpad_layout(ids != SP.pad) is None and unpad_layout(None) is None
    (a, ga), (b, gb) = run(fast, ids, seg), run(slow, ids, seg)
    assert torch.equal(a.loss, b.loss)
    assert all(torch.equal(ga[n], gb[n]) for n in gb)


def test_gradient_reaches_the_embeddings_of_real_tokens_only():
    fast, _ = pair()
    ids, seg = batch(HEAVY)
    _, grads = run(fast, ids, seg)
    word = grads["model.embeddings.word_embeddings.weight"]
    present = torch.unique(ids[ids != SP.pad])
    assert (word[present].abs().sum(1) > 0).all()
    assert torch.count_nonzero(word[SP.pad]) > 0  # only through the tied generator output layer:
    fast.zero_grad(set_to_none=True)
    fast.model.discriminator_logits(ids, seg, ids != SP.pad).sum().backward()
    assert torch.count_nonzero(fast.model.embeddings.word_embeddings.weight.grad[SP.pad]) == 0  # never looked up
    pos = grads["model.embeddings.position_embeddings.weight"]
    assert (pos[:T].abs().sum(1) > 0).all() and torch.count_nonzero(pos[T:]) == 0
    assert torch.count_nonzero(grads["model.embeddings.token_type_embeddings.weight"][1]) > 0


def test_eval_forward_is_deterministic():
    fast, _ = pair()
    ids, seg = batch(HEAVY)
    with torch.no_grad():
        first = fast.model.discriminator_logits(ids, seg, ids != SP.pad)
        second = fast.model.discriminator_logits(ids, seg, ids != SP.pad)
    assert torch.equal(first, second)


def test_layout_of_a_mask():
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 1, 1, 0], [0, 0, 0, 0, 0]])
    lay = unpad_layout(mask, buckets=2)
    assert lay.indices.tolist() == [0, 1, 5, 7, 8]
    assert lay.positions.tolist() == [0, 1, 0, 2, 3]
    assert lay.offsets.tolist() == [0, 2, 5, 5] and (lay.min_len, lay.max_len) == (0, 3)
    # rows by last real position, descending: [1, 0] then [2]; each bucket only as wide as it needs
    first, second = lay.buckets
    assert (first.rows, first.width, second.rows, second.width) == (2, 4, 1, 1)
    assert first.tokens.tolist() == [0, 1, 2, 3, 4] and first.dense.tolist() == [4, 5, 0, 2, 3]
    assert first.key_mask[:, 0, 0].tolist() == [[True, False, True, True], [True, True, False, False]]
    assert second.tokens.numel() == 0 and second.key_mask.all()  # an empty row keeps finite (zero) keys
    assert lay.restore.tolist() == [0, 1, 2, 3, 4]
    x = torch.arange(5.0)
    assert lay.to_padded(x).tolist() == [[0, 1, 0, 0, 0], [2, 0, 3, 4, 0], [0] * 5]


@pytest.mark.parametrize("buckets", [1, 3, 8])
def test_attention_does_not_depend_on_the_bucketing(buckets):
    torch.manual_seed(4)
    ids, _ = batch(HEAVY)
    qkv = torch.randn(int((ids != SP.pad).sum()), 3 * 32, requires_grad=True)
    want = repadded_attention(qkv, unpad_layout(ids != SP.pad, buckets=2), 2, 0.0)
    got = repadded_attention(qkv, unpad_layout(ids != SP.pad, buckets=buckets), 2, 0.0)
    assert torch.allclose(got, want, atol=1e-6)
    (g1,) = torch.autograd.grad(got.sum(), qkv)
    (g2,) = torch.autograd.grad(want.sum(), qkv)
    assert torch.allclose(g1, g2, atol=1e-6)


def test_empty_and_single_token_rows_stay_finite_in_training():
    fast, _ = pair(tiny())
    model = fast.model.train()
    ids, seg = batch([1, 1, 7])
    ids[1] = SP.pad  # a fully padded row
    out = model.discriminator_logits(ids, seg, ids != SP.pad)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")  # its CPU fallback's own warning
def test_jagged_attention_equals_repadded_attention():
    torch.manual_seed(3)
    mask = torch.zeros(4, 16, dtype=torch.bool)
    for row, n in enumerate([16, 1, 7, 11]):
        mask[row, :n] = True
    lay = unpad_layout(mask)
    qkv = torch.randn(int(mask.sum()), 3 * 32, requires_grad=True)
    a = jagged_attention(qkv, lay, 2, 0.0)
    b = repadded_attention(qkv, lay, 2, 0.0)
    assert a.shape == b.shape == (qkv.shape[0], 32)
    assert torch.allclose(a, b, atol=1e-5)
    (ga,) = torch.autograd.grad(a.square().sum(), qkv)
    (gb,) = torch.autograd.grad(b.square().sum(), qkv)
    assert torch.allclose(ga, gb, atol=1e-5)


def test_unpad_is_on_by_default():
    model = ElectraForPretraining(tiny())
    assert model.generator.unpad and model.discriminator.unpad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (jagged flash/efficient SDPA)")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_unpadded_matches_padded(precision):
    """fp32: the jagged SDPA (efficient kernel); bf16 autocast: the direct varlen flash call. bf16
    rounds each path's sums differently, hence its wider bounds."""
    fast, slow = pair()
    fast, slow = fast.cuda(), slow.cuda()
    ids, seg = (x.cuda() for x in batch(HEAVY))
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
        (a, ga), (b, gb) = run(fast, ids, seg), run(slow, ids, seg)
    loss_tol, grad_tol = (1e-4, 1e-3) if precision == "fp32" else (2e-2, 5e-2)
    assert abs(a.loss.item() - b.loss.item()) <= loss_tol * abs(b.loss.item())
    for name, g in gb.items():
        assert (ga[name] - g).abs().max() <= grad_tol * g.abs().max().clamp(min=1e-12), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlashAttention is a CUDA kernel")
def test_cuda_varlen_flash_equals_attention_row_by_row():
    """The direct flash call against plain fp32 attention over each row on its own: values and
    gradients, rows of 1 to 128 tokens (bf16 inputs, so bf16 bounds)."""
    torch.manual_seed(7)
    lengths, heads, width = [128, 1, 70, 5, 33], 4, 256
    mask = torch.zeros(len(lengths), 128, dtype=torch.bool)
    for row, n in enumerate(lengths):
        mask[row, :n] = True
    lay = unpad_layout(mask.cuda())
    qkv = torch.randn(sum(lengths), 3 * width, device="cuda").bfloat16().requires_grad_()
    got = varlen_flash_attention(qkv, lay, heads, 0.0)
    ref_in = qkv.detach().float().requires_grad_()
    rows, start = [], 0
    for n in lengths:
        q, k, v = ref_in[start:start + n].view(n, 3, heads, width // heads).permute(1, 2, 0, 3)
        rows.append(torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(n, width))
        start += n
    want = torch.cat(rows)
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() <= 2e-2 * want.abs().max()
    weight = torch.randn_like(want)
    (g_got,) = torch.autograd.grad((got.float() * weight).sum(), qkv)
    (g_want,) = torch.autograd.grad((want * weight).sum(), ref_in)
    assert (g_got.float() - g_want).abs().max() <= 3e-2 * g_want.abs().max()


def test_flops_attention_term_follows_the_real_lengths():
    cfg = ElectraConfig(model=tiny(), data=DataConfig(seq_len=128))
    t, h, g = cfg.data.seq_len, cfg.model.hidden_size, cfg.model.generator_sizes().hidden_size
    assert training_flops_per_token(cfg, attention_len=t) == training_flops_per_token(cfg)
    # 4 x len x width per layer and encoder, x 3 for training
    drop = 3 * 4 * (t - 10) * (h + g) * cfg.model.num_layers
    assert training_flops_per_token(cfg) - training_flops_per_token(cfg, attention_len=10) == drop
