"""electra.model.objective: every detail of reference §2, checked against hand computations."""
from __future__ import annotations

import math

import pytest
import torch

from electra.config import ElectraConfig, ModelConfig, ObjectiveConfig, OptimizerConfig
from electra.model.auc import auc_from_histogram
from electra.model.networks import ElectraForPretraining
from electra.model.objective import (ElectraObjective, SpecialTokens, apply_masking, choose_positions,
                               gumbel_sample)
from electra.run.optim import build_optimizer, build_scheduler, clip_grad_norm

SP = SpecialTokens()  # [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny tensors: a second thread only adds contention on the shared 2-core machine.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_model(**kw) -> ElectraForPretraining:
    base = dict(vocab_size=40, embedding_size=24, hidden_size=32, num_layers=2, num_heads=2,
                intermediate_size=64, max_position_embeddings=64, generator_fraction=0.5)
    return ElectraForPretraining(ModelConfig(**{**base, **kw}))


def batch(lengths: list[int], seq_len: int, *, vocab: int = 40, seed: int = 0) -> torch.Tensor:
    """[CLS] tokens [SEP] + padding; segment boundaries do not matter for masking."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), seq_len, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, vocab, (n,), generator=g)
        ids[row, 0], ids[row, n - 1] = SP.cls, SP.sep
    return ids


def test_special_tokens_from_manifest():
    got = SpecialTokens.from_manifest({"[PAD]": 3, "[UNK]": 4, "[CLS]": 0, "[SEP]": 1, "[MASK]": 2, "x": 9})
    assert got == SpecialTokens(pad=3, unk=4, cls=0, sep=1, mask=2)
    with pytest.raises(ValueError, match=r"\['\[MASK\]'\] missing"):
        SpecialTokens.from_manifest({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3})


def test_masked_count_formula_cap_and_never_special_tokens():
    lengths = [3, 7, 10, 20, 30, 64, 2, 64]
    ids = batch(lengths, 64)
    ids[5, 10:20] = SP.mask  # [MASK] already in the input is never a candidate
    ids[7, 5] = SP.sep       # nor is a SEP in the middle (two segments)
    torch.manual_seed(0)
    chosen = choose_positions(ids, SP, mask_prob=0.15, max_predictions=7)
    for row, n in enumerate(lengths):
        candidates = n - 2 - (10 if row == 5 else 0) - (1 if row == 7 else 0)
        want = min(max(1, min(7, round(n * 0.15))), candidates)  # count includes CLS/SEP
        assert chosen[row].sum().item() == want, row
    assert want == 7 and chosen[6].sum() == 0  # the cap binds; [CLS][SEP] alone has nothing to mask
    assert chosen[1].sum() == 1 and chosen[0].sum() == 1  # max(1, round(0.45)) = 1
    picked = ids[chosen]
    assert not torch.isin(picked, torch.tensor([SP.pad, SP.cls, SP.sep, SP.mask])).any()


def test_default_max_predictions_caps_long_sequences():
    obj = ElectraObjective(tiny_model(), ObjectiveConfig(mask_prob=0.5), SP, seq_len=64)
    assert obj.max_predictions == int((0.5 + 0.005) * 64) == 32
    torch.manual_seed(0)
    m = apply_masking(batch([64, 40], 64), SP, obj.cfg, obj.max_predictions)
    rows = torch.div(m.positions, 64, rounding_mode="floor")
    assert torch.bincount(rows).tolist() == [32, 20]


def test_85_15_mask_vs_keep_and_no_random_replacement():
    ids = batch([64] * 500, 64, seed=1)
    torch.manual_seed(0)
    m = apply_masking(ids, SP, ObjectiveConfig(), max_predictions=19)
    flat_in, flat_out = ids.view(-1), m.masked_ids.view(-1)
    at_chosen = flat_out[m.positions]
    frac_mask = (at_chosen == SP.mask).float().mean().item()
    # 500 x 10 = 5000 chosen positions: std of the fraction ~0.005, tolerance 6 std.
    assert m.positions.numel() == 500 * round(64 * 0.15)
    assert abs(frac_mask - 0.85) < 0.03
    kept = at_chosen != SP.mask
    assert torch.equal(at_chosen[kept], flat_in[m.positions][kept])  # kept = the original token
    others = torch.ones_like(flat_in, dtype=torch.bool)
    others[m.positions] = False
    assert torch.equal(flat_out[others], flat_in[others])  # nothing else is touched
    assert torch.equal(m.targets, flat_in[m.positions])
    # Every candidate position is equally likely (uniform choice without replacement).
    counts = torch.bincount(m.positions % 64, minlength=64)[1:63].float()
    assert counts.min() > 0.6 * counts.mean() and counts.max() < 1.4 * counts.mean()


def test_gumbel_sampling_follows_softmax_of_logits_over_temperature():
    torch.manual_seed(0)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    logits = probs.log().repeat(40000, 1)
    freq = torch.bincount(gumbel_sample(logits), minlength=4).float() / 40000
    assert torch.allclose(freq, probs, atol=0.012)
    freq_t2 = torch.bincount(gumbel_sample(logits, temperature=2.0), minlength=4).float() / 40000
    assert torch.allclose(freq_t2, torch.softmax(probs.log() / 2, 0), atol=0.012)
    targets = torch.full((40000,), 3)
    assert not (gumbel_sample(logits, disallow=targets) == 3).any()
    assert gumbel_sample(logits.half()).dtype == torch.long


def _by_hand(obj: ElectraObjective, ids: torch.Tensor, seed: int):
    """Redo the step from its public pieces with the same random numbers."""
    torch.manual_seed(seed)
    non_pad = ids != SP.pad
    m = apply_masking(ids, SP, obj.cfg, obj.max_predictions)
    # The step draws its Gumbel noise for every slot, so redo it on the slots, then keep the chosen.
    slot_logits = obj.model.generator_logits(m.masked_ids, None, non_pad, m.slots).float()
    slot_samples = gumbel_sample(slot_logits, temperature=obj.cfg.temperature)
    logits, sampled = slot_logits[m.valid], slot_samples[m.valid]
    disc_ids = ids.clone().view(-1)
    disc_ids[m.positions] = sampled
    disc_ids = disc_ids.view_as(ids)
    labels = (disc_ids != ids).float()
    x = obj.model.discriminator_logits(disc_ids, None, non_pad)
    return m, logits, sampled, labels, x


def test_disc_loss_is_token_mean_over_non_pad_and_lambda_is_50():
    torch.manual_seed(0)
    obj = ElectraObjective(tiny_model().eval(), ObjectiveConfig(), SP, seq_len=64)
    ids = batch([64, 9, 33], 64)
    torch.manual_seed(5)
    out = obj(ids)
    with torch.no_grad():
        m, logits, sampled, labels, x = _by_hand(obj, ids, 5)
    total, count, per_seq = 0.0, 0, []
    for row in range(3):
        row_losses = [math.log1p(math.exp(-abs(v))) + max(v, 0) - y * v
                      for v, y, real in zip(x[row].tolist(), labels[row].tolist(), (ids[row] != 0).tolist()) if real]
        total, count = total + sum(row_losses), count + len(row_losses)
        per_seq.append(sum(row_losses) / len(row_losses))
    assert count == 64 + 9 + 33 == out.num_tokens.item()
    assert out.disc_loss.item() == pytest.approx(total / count, rel=1e-5)
    assert abs(out.disc_loss.item() - sum(per_seq) / 3) > 1e-4  # not a per-sequence mean
    gen = torch.nn.functional.cross_entropy(logits, ids.view(-1)[m.positions])
    assert out.gen_loss.item() == pytest.approx(gen.item(), rel=1e-5)
    assert out.loss.item() == pytest.approx(out.gen_loss.item() + 50.0 * out.disc_loss.item(), rel=1e-6)
    assert out.num_masked.item() == m.positions.numel() == 9 + 1 + 5  # 64 tokens: capped at int(0.155 * 64)
    assert out.replaced_frac.item() == pytest.approx((sampled != m.targets).float().mean().item())
    # Other weights: same random numbers, same parts, new total.
    obj.cfg = ObjectiveConfig(generator_weight=2.0, discriminator_weight=7.0)
    torch.manual_seed(5)
    out2 = obj(ids)
    assert out2.disc_loss.item() == pytest.approx(out.disc_loss.item())
    assert out2.loss.item() == pytest.approx(2.0 * out.gen_loss.item() + 7.0 * out.disc_loss.item(), rel=1e-6)


def test_a_sampled_correct_token_is_labelled_real():
    # Vocabulary 6: every content token is 5 and the generator is forced to predict 5 (huge bias),
    # so every sample equals the original and no label may be "replaced".
    model = tiny_model(vocab_size=7).eval()
    with torch.no_grad():
        model.generator_head.bias[5] = 1e4
    obj = ElectraObjective(model, ObjectiveConfig(), SP, seq_len=16)
    ids = torch.tensor([[2, 5, 5, 5, 5, 5, 5, 3, 5, 5, 5, 3, 0, 0, 0, 0]] * 4)
    torch.manual_seed(0)
    out = obj(ids)
    with torch.no_grad():
        m, _, sampled, labels, x = _by_hand(obj, ids, 0)
    assert (sampled == 5).all() and labels.sum() == 0 and m.positions.numel() > 0
    assert out.replaced_frac.item() == 0.0 and out.disc_recall.item() == 0.0
    want = torch.nn.functional.softplus(x)[ids != 0].mean()  # BCE with label 0
    assert out.disc_loss.item() == pytest.approx(want.item(), rel=1e-5)
    # Forced to a wrong token instead: exactly the chosen positions are "replaced".
    with torch.no_grad():
        model.generator_head.bias[5] = 0.0
        model.generator_head.bias[6] = 1e4
    torch.manual_seed(0)
    with torch.no_grad():
        m, _, sampled, labels, _ = _by_hand(obj, ids, 0)
    assert labels.view(-1).nonzero().squeeze(1).tolist() == m.positions.tolist()


def test_no_gradient_from_disc_loss_into_generator():
    torch.manual_seed(0)
    model = tiny_model()
    obj = ElectraObjective(model, ObjectiveConfig(), SP, seq_len=32)
    ids = batch([32, 20], 32)
    torch.manual_seed(1)
    out = obj(ids)
    out.disc_loss.backward(retain_graph=True)
    generator_only = [*model.generator.layers.parameters(), *model.generator.embeddings_project.parameters(),
                      *model.generator_head.parameters()]
    assert all(p.grad is None for p in generator_only)
    assert model.discriminator.layers[0].qkv.weight.grad.abs().sum() > 0
    assert model.embeddings.LayerNorm.weight.grad.abs().sum() > 0  # shared block learns from both
    obj.zero_grad(set_to_none=True)
    out.gen_loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.generator.layers[0].parameters())
    assert all(p.grad is None for p in model.discriminator.layers.parameters())


def test_same_rng_state_gives_the_same_step():
    obj = ElectraObjective(tiny_model(), ObjectiveConfig(), SP, seq_len=32)  # train mode: dropout too
    ids = batch([32, 11, 25], 32)
    torch.manual_seed(3)
    state = torch.get_rng_state()
    a = obj(ids)
    torch.set_rng_state(state)
    b = obj(ids)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    c = obj(ids)
    assert not torch.equal(a.loss, c.loss)


def test_mlm_baseline_trains_the_discriminator_encoder_only():
    torch.manual_seed(0)
    model = tiny_model()
    obj = ElectraObjective(model, ObjectiveConfig(kind="mlm"), SP, seq_len=32)
    out = obj(batch([32, 17], 32))
    assert out.loss.item() == pytest.approx(out.gen_loss.item()) and out.disc_loss.item() == 0.0
    assert out.gen_loss.item() == pytest.approx(math.log(40), abs=0.3)  # untrained: ~uniform
    out.loss.backward()
    assert model.discriminator.layers[1].ffn_in.weight.grad.abs().sum() > 0
    assert obj.mlm_head.dense.weight.shape == (24, 32)  # discriminator width -> embedding
    assert not any(p.requires_grad for p in model.generator.layers.parameters())
    assert model.embeddings.word_embeddings.weight.grad.abs().sum() > 0  # tied output embedding
    names = {n for n, p in obj.named_parameters() if p.requires_grad}
    assert "mlm_head.dense.weight" in names and not any(n.startswith("model.generator_head") for n in names)


def test_tiny_model_overfits_a_fixed_batch():
    """200 steps on one batch whose token is a function of its position; disallow_correct makes
    every chosen position a replacement, so the discriminator has something to learn too.
    Measured (seeds 0-3): gen_loss 3.68 -> 0.004-0.011, disc_loss 0.69 -> <= 0.0002, disc_acc 1.0."""
    torch.manual_seed(0)
    model = tiny_model(hidden_dropout=0.0, attention_dropout=0.0)
    obj = ElectraObjective(model, ObjectiveConfig(disallow_correct=True), SP, seq_len=32)
    ids = (5 + (torch.arange(24) * 7) % 35).repeat(8, 1)
    ids[:, 0], ids[:, -1] = SP.cls, SP.sep
    ids[4:, 18:], ids[4:, 17] = SP.pad, SP.sep
    opt = build_optimizer(obj, OptimizerConfig(lr=1e-3, warmup_steps=10, total_steps=200))
    first = obj(ids)
    for _ in range(200):
        out = obj(ids)
        opt.zero_grad()
        out.loss.backward()
        clip_grad_norm(obj.parameters(), 1.0)
        opt.step()
    assert first.gen_loss.item() > 3.0 and first.disc_loss.item() > 0.5
    assert out.gen_loss.item() < 0.05 and out.disc_loss.item() < 0.02
    assert out.gen_acc.item() == 1.0 and out.disc_acc.item() > 0.99 and out.replaced_frac.item() == 1.0


def test_step_under_bf16_autocast_is_finite_and_samples_in_fp32():
    torch.manual_seed(0)
    obj = ElectraObjective(tiny_model(), ObjectiveConfig(), SP, seq_len=32)
    ids = batch([32, 20], 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = obj(ids, torch.zeros_like(ids, dtype=torch.uint8))
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    out.loss.backward()
    assert model_grads_finite(obj)


def model_grads_finite(module: torch.nn.Module) -> bool:
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return len(grads) > 0 and all(torch.isfinite(g).all() for g in grads)


def test_masking_has_a_fixed_shape_and_marks_exactly_the_chosen_positions():
    # Rows from full to nothing maskable: the slot count is B * k whatever was drawn, the valid slots
    # are exactly choose_positions' positions (same random numbers), and unchosen slots stay in
    # their own row and keep their token.
    ids = batch([64, 40, 9, 3, 2], 64, seed=3)
    torch.manual_seed(11)
    m = apply_masking(ids, SP, ObjectiveConfig(), max_predictions=19)
    torch.manual_seed(11)
    chosen = choose_positions(ids, SP, mask_prob=0.15, max_predictions=19)
    assert m.slots.shape == m.valid.shape == m.slot_targets.shape == (5 * 19,)
    assert m.positions.tolist() == chosen.view(-1).nonzero().squeeze(1).tolist()
    assert torch.equal(m.slot_targets, ids.view(-1)[m.slots])
    rows = torch.div(m.slots, 64, rounding_mode="floor").view(5, 19)
    assert torch.equal(rows, torch.arange(5)[:, None].expand(5, 19))
    assert len(set(m.slots.tolist())) == m.slots.numel()  # no slot written twice
    assert m.valid.view(5, 19).sum(1).tolist() == [10, 6, 1, 1, 0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs are a CUDA matter")
def test_masking_and_sampling_never_wait_for_the_host():
    ids = batch([128, 70, 5], 128).cuda()
    apply_masking(ids, SP, ObjectiveConfig(), max_predictions=19)  # warm-up (lazy CUDA init)
    torch.cuda.set_sync_debug_mode("error")
    try:
        m = apply_masking(ids, SP, ObjectiveConfig(), max_predictions=19)
        logits = torch.randn(m.slots.numel(), 40, device="cuda")
        sampled = torch.where(m.valid, gumbel_sample(logits), m.slot_targets)
        ids.view(-1).index_copy(0, m.slots, sampled)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_discriminator_bias_init_prior_is_the_log_odds_of_mask_prob():
    for kind, init, want in (("electra", "prior", math.log(0.2 / 0.8)), ("electra", "zero", 0.0), ("mlm", "prior", 0.0)):
        model = tiny_model()
        ElectraObjective(model, ObjectiveConfig(kind=kind, mask_prob=0.2, discriminator_bias_init=init), SP, seq_len=32)
        assert model.discriminator_head.dense_prediction.bias.item() == pytest.approx(want, abs=1e-6), (kind, init)
    with pytest.raises(ValueError, match="discriminator_bias_init"):
        ElectraConfig.from_dict({"objective": {"discriminator_bias_init": "uniform"}}, source="test")


def _train_on_uniform_replacements(init: str, seed: int, *, steps: int = 40) -> tuple[float, float]:
    """40 steps at lr 1e-3 (warm-up 10) on Zipf-distributed tokens, the generator sampling at
    temperature 1e4, i.e. uniformly: a replaced token is usually a rare one, a cue that never goes
    away. Returns (the discriminator's AUC on the last batch, the mean over features of the std over
    tokens of its last hidden states: about 0 when every token maps to one vector)."""
    vocab, b, t = 1000, 16, 64
    torch.manual_seed(seed)
    model = ElectraForPretraining(ModelConfig(vocab_size=vocab, embedding_size=64, hidden_size=64, num_layers=2,
                                              num_heads=2, intermediate_size=256, max_position_embeddings=t))
    obj = ElectraObjective(model, ObjectiveConfig(discriminator_bias_init=init, temperature=1e4), SP, seq_len=t)
    ocfg = OptimizerConfig(lr=1e-3, warmup_steps=10, total_steps=1000)
    opt = build_optimizer(obj, ocfg)
    sched = build_scheduler(opt, ocfg)
    zipf = 1.0 / torch.arange(1, vocab - 4, dtype=torch.float)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        ids = 5 + torch.multinomial(zipf, b * t, replacement=True, generator=g).view(b, t)
        ids[:, 0], ids[:, -1] = SP.cls, SP.sep
        out = obj(ids)
        out.loss.backward()
        clip_grad_norm(obj.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        hidden = model.eval().discriminator(ids)
    return auc_from_histogram(out.disc_hist), hidden.reshape(-1, hidden.shape[-1]).std(0).mean().item()


def test_prior_bias_keeps_the_discriminator_from_collapsing():
    """The failure the "prior" setting exists for (objective docstring): with the zero bias and a
    short warm-up, Adam drives every token's last hidden state to the same vector and the
    discriminator stays at chance although the task is easy; from the prior it learns. Whether a
    given seed collapses is chaotic (8 of seeds 0-9 did, the others learned), so the zero side is
    counted over four seeds; the prior side learned on all ten."""
    collapsed = 0
    for seed in (1, 2, 3, 5):
        auc, spread = _train_on_uniform_replacements("zero", seed)
        collapsed += spread < 0.01 and auc < 0.6
        auc, spread = _train_on_uniform_replacements("prior", seed)
        assert spread > 0.4 and auc > 0.75, seed
    assert collapsed >= 2
