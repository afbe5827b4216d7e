"""electra.checkpoint.hf_export: parity with the real transformers classes, round trips, file layout."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.checkpoint import run_layout as layout
from electra.config import ElectraConfig, ModelConfig
from electra.checkpoint.hf_export import (encoder_from_hf, encoder_to_hf, export_hf, import_hf, load_discriminator_encoder,
                               main)
from electra.model.networks import ElectraForPretraining
from pipelines.config import TokenizerConfig
from synthetic.prose import documents
from pipelines.tokenizer import train_tokenizer
from tests.pipelines.test_tokenizer import HF_CLASSES, check_hf_class

transformers = pytest.importorskip("transformers")

CONFIGS = {
    "projected": dict(vocab_size=60, embedding_size=24, hidden_size=64, num_layers=2, num_heads=2,
                      intermediate_size=96, max_position_embeddings=40, generator_fraction=0.5),
    "same_size": dict(vocab_size=60, embedding_size=32, hidden_size=32, num_layers=3, num_heads=4,
                      intermediate_size=48, max_position_embeddings=40, generator_fraction=0.25),
}


def perturbed(cfg: ModelConfig, seed: int = 0) -> ElectraForPretraining:
    """A model whose biases and norms are not at their init (so a swapped key would show)."""
    torch.manual_seed(seed)
    model = ElectraForPretraining(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (3, 20), generator=g)
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[1, 13:], ids[1, 13:] = 0, 0
    mask[2, 5:], ids[2, 5:] = 0, 0
    seg = torch.zeros_like(ids)
    seg[:, 8:] = 1
    return ids, seg, mask


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_gives_the_same_logits(tmp_path, name):
    cfg = ModelConfig(**CONFIGS[name])
    model = perturbed(cfg)
    export_hf(model, cfg, tmp_path / "hf")
    disc, info_d = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf" / "discriminator",
                                                                      output_loading_info=True)
    gen, info_g = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "hf" / "generator",
                                                                  output_loading_info=True)
    for info in (info_d, info_g):
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, seg, mask = inputs()
    real = mask.bool()
    with torch.no_grad():
        ours_d = model.discriminator_logits(ids, seg, mask)
        theirs_d = disc.eval()(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits
        ours_g = model.generator_logits(ids, seg, mask)
        theirs_g = gen.eval()(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits
    assert torch.allclose(ours_d[real], theirs_d[real], atol=1e-5)
    assert torch.allclose(ours_g[real], theirs_g[real], atol=1e-5)
    # The generator's output embedding is tied to the (shared) input embedding on load.
    assert gen.generator_lm_head.weight.data_ptr() == gen.electra.embeddings.word_embeddings.weight.data_ptr()
    _, info_m = transformers.ElectraModel.from_pretrained(tmp_path / "hf" / "discriminator", output_loading_info=True)
    assert not info_m["missing_keys"]


def test_layout_configs_and_shared_embeddings_in_both(tmp_path):
    cfg = ModelConfig(**CONFIGS["projected"])
    model = perturbed(cfg)
    tok = tmp_path / "tok"
    train_tokenizer(documents(40, seed=2), TokenizerConfig(vocab_size=60), str(tok))
    out = export_hf(model, cfg, tmp_path / "hf", tokenizer_dir=tok)
    for sub, arch, hidden, heads, ffn in (("discriminator", "ElectraForPreTraining", 64, 2, 96),
                                          ("generator", "ElectraForMaskedLM", 32, 1, 128)):
        folder = out / sub
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                            "tokenizer_config.json", "vocab.txt"]
        c = json.loads((folder / "config.json").read_text())
        assert c["architectures"] == [arch] and c["model_type"] == "electra" and c["hidden_act"] == "gelu"
        assert (c["hidden_size"], c["num_attention_heads"], c["intermediate_size"], c["embedding_size"]) == \
            (hidden, heads, ffn, 24)
        state = load_file(folder / "model.safetensors")
        assert torch.equal(state["electra.embeddings.LayerNorm.weight"], model.embeddings.LayerNorm.weight)
        assert torch.equal(state["electra.embeddings.word_embeddings.weight"],
                           model.embeddings.word_embeddings.weight)
        for name in ("tokenizer.json", "vocab.txt"):
            assert (folder / name).read_bytes() == (tok / name).read_bytes()
        # The corpus tokenizer's config, with the length the model can take (not the generic 512).
        want = {**json.loads((tok / "tokenizer_config.json").read_text()), "model_max_length": 40}
        assert json.loads((folder / "tokenizer_config.json").read_text()) == want
    assert not list(tmp_path.glob(".hf.*"))  # no temporary folders left behind
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        export_hf(model, cfg, tmp_path / "hf2", tokenizer_dir=tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="bad/tokenizer.json"):
        export_hf(model, cfg, tmp_path / "hf2", tokenizer_dir=tmp_path / "bad")


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_exported_tokenizer_loads_the_same_ids_in_every_class_or_refuses(tmp_path, kind):
    """Beside the model (config.json says model_type electra) as in the corpus folder: a BERT
    WordPiece loads through every class; a Unigram through the generic ones, and the BERT/ELECTRA
    classes refuse it rather than encode it as [UNK]. A stale vocab.txt or tokenizer_config.json
    in the run's folder (written by an older version) is not carried over."""
    cfg = ModelConfig(**CONFIGS["projected"])
    tok = tmp_path / "tok"
    train_tokenizer(documents(40, seed=2), TokenizerConfig(kind=kind, vocab_size=60), str(tok))
    (tok / "vocab.txt").write_text("".join(f"{t}\n" for t in json.loads((tok / "tokenizer.json").read_text())
                                           ["model"]["vocab"]) if kind == "wordpiece" else "[PAD]\n[UNK]\n")
    (tok / "tokenizer_config.json").write_text('{"tokenizer_class": "ElectraTokenizerFast"}')
    out = export_hf(perturbed(cfg), cfg, tmp_path / "hf", tokenizer_dir=tok)
    folder = out / "discriminator"
    assert (folder / "vocab.txt").exists() == (kind == "wordpiece")
    got = {name: check_hf_class(folder, name) for name in HF_CLASSES}
    generic = ("AutoTokenizer", "PreTrainedTokenizerFast")
    assert got == {n: "same" if n in generic or kind == "wordpiece" else "refused" for n in HF_CLASSES}


def test_reexport_replaces_the_folder_atomically(tmp_path):
    cfg = ModelConfig(**CONFIGS["same_size"])
    export_hf(perturbed(cfg, 0), cfg, tmp_path / "hf")
    (tmp_path / "hf" / "stale.txt").write_text("old")
    second = perturbed(cfg, 1)
    export_hf(second, cfg, tmp_path / "hf")
    assert not (tmp_path / "hf" / "stale.txt").exists()
    back, _ = import_hf(tmp_path / "hf")
    assert torch.equal(back.discriminator_head.dense.weight, second.discriminator_head.dense.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_import_round_trip_reproduces_the_state_dict(tmp_path, name):
    cfg = ModelConfig(**CONFIGS[name])
    model = perturbed(cfg)
    export_hf(model, cfg, tmp_path / "hf")
    back, back_cfg = import_hf(tmp_path / "hf")
    assert back_cfg == cfg
    want, got = model.state_dict(), back.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert back.generator.embeddings is back.embeddings is back.discriminator.embeddings


def test_encoder_key_map_is_a_bijection():
    model = perturbed(ModelConfig(**CONFIGS["projected"]))
    sd = model.discriminator.state_dict()
    hf = encoder_to_hf(sd)
    assert "electra.encoder.layer.1.attention.self.value.bias" in hf
    assert "electra.embeddings_project.weight" in hf and len(hf) == len(sd) + 2 * 2 * 2  # qkv -> 3 per layer
    back = encoder_from_hf(hf, num_layers=2)
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)


def test_load_discriminator_encoder_for_finetuning(tmp_path):
    cfg = ModelConfig(**CONFIGS["projected"])
    model = perturbed(cfg)
    export_hf(model, cfg, tmp_path / "hf")
    ids, seg, mask = inputs()
    with torch.no_grad():
        want = model.discriminator(ids, seg, mask)
        for path in (tmp_path / "hf", tmp_path / "hf" / "discriminator"):
            enc, enc_cfg = load_discriminator_encoder(path)
            assert enc_cfg.hidden_size == 64 and enc_cfg.num_layers == 2
            assert torch.allclose(enc.eval()(ids, seg, mask), want, atol=1e-6)
    # A plain transformers ElectraModel folder (keys without the "electra." prefix) loads too.
    hf_model = transformers.ElectraModel.from_pretrained(tmp_path / "hf" / "discriminator")
    hf_model.save_pretrained(tmp_path / "plain")
    enc, _ = load_discriminator_encoder(tmp_path / "plain")
    with torch.no_grad():
        assert torch.allclose(enc.eval()(ids, seg, mask), want, atol=1e-6)


def test_import_errors_name_the_file(tmp_path):
    cfg = ModelConfig(**CONFIGS["projected"])
    export_hf(perturbed(cfg), cfg, tmp_path / "hf")
    gen_cfg = tmp_path / "hf" / "generator" / "config.json"
    c = json.loads(gen_cfg.read_text())
    c["intermediate_size"] = 100
    gen_cfg.write_text(json.dumps(c))
    with pytest.raises(ValueError, match=rf"{gen_cfg}.*not derivable"):
        import_hf(tmp_path / "hf")
    (tmp_path / "hf" / "generator" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="generator/model.safetensors"):
        import_hf(tmp_path / "hf")


# ------------------------------------------------------------------------------ fits its model
def long_text(words: int = 1500) -> str:
    text = " ".join(documents(60, seed=5))
    return " ".join(text.split()[:words])


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_exported_tokenizer_truncates_to_the_models_positions(tmp_path, kind):
    """``tokenizer(text, truncation=True)`` on the export gives at most max_position_embeddings
    tokens (a 128-position model once got 400 and crashed), and the exported models run on it."""
    cfg = ModelConfig(**{**CONFIGS["projected"], "max_position_embeddings": 128})
    tok = tmp_path / "tok"
    train_tokenizer(documents(40, seed=2), TokenizerConfig(kind=kind, vocab_size=60), str(tok))
    export_hf(perturbed(cfg), cfg, tmp_path / "hf", tokenizer_dir=tok)
    text = long_text()
    for sub, cls in (("discriminator", transformers.ElectraForPreTraining),
                     ("generator", transformers.ElectraForMaskedLM)):
        folder = tmp_path / "hf" / sub
        assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] == 128
        hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
        assert hf_tok.model_max_length == 128
        assert len(hf_tok(text)["input_ids"]) > 128  # the text is longer than the model
        single = hf_tok(text, truncation=True, return_tensors="pt")
        pair = hf_tok(text, text, truncation=True, return_tensors="pt")
        padded = hf_tok("a short one", padding="max_length", return_tensors="pt")
        assert single["input_ids"].shape[1] == pair["input_ids"].shape[1] == padded["input_ids"].shape[1] == 128
        model = cls.from_pretrained(folder).eval()
        with torch.no_grad():
            for enc in (single, pair, padded):
                logits = model(**enc).logits
                assert logits.shape[1] == 128 and torch.isfinite(logits).all()


def test_exports_are_readable_as_the_umask_says(tmp_path):
    cfg = ModelConfig(**CONFIGS["same_size"])
    tok = tmp_path / "tok"
    train_tokenizer(documents(40, seed=2), TokenizerConfig(vocab_size=60), str(tok))
    old = os.umask(0o027)
    try:
        out = export_hf(perturbed(cfg), cfg, tmp_path / "hf", tokenizer_dir=tok)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    for path in out.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o750 if path.is_dir() else 0o640), path


# ------------------------------------------------------------------------------ the command
def fake_run(root: Path, cfg: ModelConfig, model: ElectraForPretraining, *, step: int = 2) -> Path:
    """A run folder as the trainer leaves it, as far as the export reads it: ``config.json``, the
    tokenizer copy, and one complete checkpoint whose DeepSpeed model states hold the wrapped
    objective's module (``model.*`` keys, fp32; what ``checkpoint_state_dict`` reads without ZeRO)."""
    run = root / "run"
    run.mkdir(parents=True)
    (run / layout.CONFIG).write_text(json.dumps(ElectraConfig(model=cfg).to_dict()))
    train_tokenizer(documents(40, seed=2), TokenizerConfig(vocab_size=60), str(run / layout.TOKENIZER))
    step_dir = layout.step_dir(run, step)
    step_dir.mkdir(parents=True)
    torch.save({"module": {f"model.{k}": v.clone() for k, v in model.state_dict().items()}},
               step_dir / "mp_rank_00_model_states.pt")
    (step_dir / layout.META).write_text(json.dumps({"step": step}))
    return run


def test_electra_export_command_exports_a_checkpoint(tmp_path):
    """``python -m electra.checkpoint.hf_export`` (the ``electra-export`` console script runs the same main)
    exports a step folder, or a run folder's newest checkpoint, that transformers loads."""
    cfg = ModelConfig(**{**CONFIGS["projected"], "max_position_embeddings": 64})
    model = perturbed(cfg)
    run = fake_run(tmp_path, cfg, model)
    step_dir = layout.step_dir(run, 2)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = Path(sys.executable).parent / "electra-export"  # installed by pip install -e .
    assert script.is_file(), f"{script}: the console script is not installed (pip install -e .)"
    for cmd, source, out in (([sys.executable, "-m", "electra.checkpoint.hf_export"], step_dir, tmp_path / "a"),
                             ([str(script)], run, tmp_path / "b")):
        proc = subprocess.run([*cmd, str(source), "--out", str(out)], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"{step_dir} exported to {out}" in proc.stdout
        disc = transformers.ElectraForPreTraining.from_pretrained(out / "discriminator").eval()
        ids, seg, mask = inputs()
        with torch.no_grad():
            assert torch.allclose(disc(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits[mask.bool()],
                                  model.discriminator_logits(ids, seg, mask)[mask.bool()], atol=1e-5)
        hf_tok = transformers.AutoTokenizer.from_pretrained(out / "generator")
        assert len(hf_tok(long_text(), truncation=True)["input_ids"]) == 64


def test_electra_export_errors_are_one_line(tmp_path, capsys):
    cfg = ModelConfig(**CONFIGS["same_size"])
    run = fake_run(tmp_path, cfg, perturbed(cfg))
    (tmp_path / "file").write_text("")
    cases = {
        str(tmp_path / "nope"): [f"{tmp_path / 'nope'}: no such folder", "RUN/checkpoints/step_N"],
        str(tmp_path): [f"{tmp_path}: neither a checkpoint folder nor a run folder"],
        str(tmp_path / "file"): ["not a folder"],
    }
    incomplete = layout.step_dir(run, 4)
    incomplete.mkdir()
    cases[str(incomplete)] = [f"{incomplete}: not a complete checkpoint", f"the run folder {run}"]
    for arg, parts in cases.items():
        assert main([arg, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("electra-export: error: "), err
        for part in parts:
            assert part in err, err
    (layout.step_dir(run, 2) / layout.META).unlink()
    assert main([str(run), "--out", str(tmp_path / "out")]) == 2
    assert "no complete checkpoint in" in capsys.readouterr().err
    (layout.step_dir(run, 2) / layout.META).write_text("{}")
    (run / layout.CONFIG).unlink()
    assert main([str(run), "--out", str(tmp_path / "out")]) == 2
    assert f"{run / layout.CONFIG}: missing" in capsys.readouterr().err
    assert main([str(run), "--out", str(tmp_path / "file")]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
