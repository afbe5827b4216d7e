"""Hugging Face ``transformers`` format: export, import back, and load the encoder for fine-tuning.

Layout written by ``export_hf(model, cfg, out_dir)``::

    out_dir/discriminator/{config.json, model.safetensors, tokenizer files}   ElectraForPreTraining
    out_dir/generator/{config.json, model.safetensors, tokenizer files}       ElectraForMaskedLM

The tokenizer files are derived from the run's ``tokenizer.json``: ``tokenizer_config.json``
names the class that reproduces it (``BertTokenizerFast`` for a BERT WordPiece, otherwise
``PreTrainedTokenizerFast`` with a guard that makes the BERT/ELECTRA classes raise instead of
silently encoding a Unigram vocabulary as ``[UNK]``), ``vocab.txt`` only for a BERT WordPiece.
Its ``model_max_length`` is the exported model's ``max_position_embeddings``, so
``tokenizer(text, truncation=True)`` never returns more tokens than the model has positions.

All names go through ONE explicit key map (``encoder_to_hf`` / ``encoder_from_hf`` plus the two
head tables). The only non-renaming entry is the fused ``qkv`` Linear, split into HF's
``query``/``key``/``value`` (and concatenated back). The shared embedding block lives once in
memory but is written into BOTH checkpoints; ``generator_lm_head.weight`` is not written because
HF ties it to the word embeddings on load (as ``save_pretrained`` does). Tensors are written as
float32 safetensors (never pickles) with ``{"format": "pt"}`` metadata, which
``from_pretrained`` expects. The whole ``out_dir`` is built in a temporary sibling folder and
renamed into place, so a reader never sees half an export; every file and folder in it gets its
mode from the umask (``common.filemode``: safetensors alone would write 0600).

``export_checkpoint(step_dir, out_dir)`` does the same for any complete checkpoint of a run,
offline: the model is rebuilt from the run's ``config.json``, its fp32 master weights are read
from the DeepSpeed files (``electra.checkpoint.deepspeed_states``: ZeRO partitions gathered, weights-only
loads), and the run's copy of the tokenizer is written beside them. From a shell::

    electra-export RUN/checkpoints/step_N --out DIR     # or: python -m electra.checkpoint.hf_export ...
    electra-export RUN --out DIR                        # the run's newest complete checkpoint
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from common.filemode import apply_umask
from electra.checkpoint import run_layout as layout
from electra.config import ElectraConfig, ModelConfig
from electra.model.networks import ElectraEmbeddings, ElectraEncoder, ElectraForPretraining, build_encoder
from pipelines import schema


_LAYER = {  # ours (inside layers.{i}) -> HF (inside electra.encoder.layer.{i})
    "attn_out": "attention.output.dense",
    "attn_norm": "attention.output.LayerNorm",
    "ffn_in": "intermediate.dense",
    "ffn_out": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
_QKV = ("query", "key", "value")
_DISC_HEAD = {  # ours (inside discriminator_head) -> HF
    "dense.weight": "discriminator_predictions.dense.weight",
    "dense.bias": "discriminator_predictions.dense.bias",
    "dense_prediction.weight": "discriminator_predictions.dense_prediction.weight",
    "dense_prediction.bias": "discriminator_predictions.dense_prediction.bias",
}
_GEN_HEAD = {  # ours (inside generator_head) -> HF
    "dense.weight": "generator_predictions.dense.weight",
    "dense.bias": "generator_predictions.dense.bias",
    "LayerNorm.weight": "generator_predictions.LayerNorm.weight",
    "LayerNorm.bias": "generator_predictions.LayerNorm.bias",
    "bias": "generator_lm_head.bias",
}
# HF keys that may be present and carry nothing we need (buffers, tied copies).
_IGNORED = ("electra.embeddings.position_ids", "generator_lm_head.weight")


def encoder_to_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``ElectraEncoder.state_dict()`` -> HF ``electra.*`` keys."""
    out = {}
    for key, t in state.items():
        top, _, rest = key.partition(".")
        if top in ("embeddings", "embeddings_project"):
            out[f"electra.{key}"] = t
        elif top == "layers":
            i, name, param = rest.split(".")
            base = f"electra.encoder.layer.{i}."
            if name == "qkv":
                for part, chunk in zip(_QKV, t.chunk(3, dim=0)):
                    out[f"{base}attention.self.{part}.{param}"] = chunk
            else:
                out[f"{base}{_LAYER[name]}.{param}"] = t
        else:
            raise KeyError(f"no HF name for encoder parameter {key!r}")
    return out


def encoder_from_hf(hf: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """HF ``electra.*`` keys -> ``ElectraEncoder.state_dict()`` keys (other keys are ignored)."""
    out = {k.removeprefix("electra."): v for k, v in hf.items()
           if k.startswith(("electra.embeddings.", "electra.embeddings_project.")) and k not in _IGNORED}
    for i in range(num_layers):
        base = f"electra.encoder.layer.{i}."
        for param in ("weight", "bias"):
            out[f"layers.{i}.qkv.{param}"] = torch.cat(
                [_take(hf, f"{base}attention.self.{part}.{param}") for part in _QKV], dim=0)
            for ours, theirs in _LAYER.items():
                out[f"layers.{i}.{ours}.{param}"] = _take(hf, f"{base}{theirs}.{param}")
    return out


def _take(hf: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in hf:
        raise KeyError(f"HF checkpoint lacks {key!r}")
    return hf[key]


def hf_config(cfg: ModelConfig, *, generator: bool) -> dict:
    """``config.json`` for the discriminator (ElectraForPreTraining) or generator (ElectraForMaskedLM)."""
    hidden, heads, ffn = cfg.generator_sizes() if generator else (cfg.hidden_size, cfg.num_heads,
                                                                  cfg.intermediate_size)
    layers = cfg.generator_depth if generator else cfg.num_layers
    return {
        "architectures": ["ElectraForMaskedLM" if generator else "ElectraForPreTraining"],
        "model_type": "electra", "vocab_size": cfg.vocab_size, "embedding_size": cfg.embedding_size,
        "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
        "intermediate_size": ffn, "hidden_act": "gelu", "hidden_dropout_prob": cfg.hidden_dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings, "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range, "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_token_id, "position_embedding_type": "absolute",
        "tie_word_embeddings": True, "dtype": "float32",
    }


def to_hf(model: ElectraForPretraining) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(discriminator, generator) state dicts with HF names; the embedding block is in both."""
    disc = encoder_to_hf(model.discriminator.state_dict())
    disc.update({_DISC_HEAD[k]: v for k, v in model.discriminator_head.state_dict().items()})
    gen = encoder_to_hf(model.generator.state_dict())
    gen.update({_GEN_HEAD[k]: v for k, v in model.generator_head.state_dict().items()})
    return disc, gen


def from_hf(disc: dict[str, torch.Tensor], gen: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Inverse of ``to_hf``: an ``ElectraForPretraining.state_dict()``."""
    d_enc, g_enc = encoder_from_hf(disc, cfg.num_layers), encoder_from_hf(gen, cfg.generator_depth)
    for key in (k for k in d_enc if k.startswith("embeddings.")):
        if g_enc[key].shape != d_enc[key].shape or not torch.equal(g_enc[key].float(), d_enc[key].float()):
            raise ValueError(f"generator and discriminator disagree on the shared {key}")
    out = {f"discriminator.{k}": v for k, v in d_enc.items()}
    out.update({f"generator.{k}": v for k, v in g_enc.items()})
    out.update({k: v for k, v in d_enc.items() if k.startswith("embeddings.")})
    out.update({f"discriminator_head.{ours}": _take(disc, theirs) for ours, theirs in _DISC_HEAD.items()})
    out.update({f"generator_head.{ours}": _take(gen, theirs) for ours, theirs in _GEN_HEAD.items()})
    return out


def export_hf(model: ElectraForPretraining, cfg: ModelConfig, out_dir: str | Path, *,
              tokenizer_dir: str | Path | None = None, lineage: dict | None = None) -> Path:
    """Write ``out_dir/discriminator`` and ``out_dir/generator`` atomically; returns ``out_dir``.
    ``lineage``: where the run started from (``electra.checkpoint.init_from``) and the corpus generations it
    trained on (``electra.data.corpus_growth``), kept in each ``config.json`` as ``electra_lineage``
    (``transformers`` keeps unknown keys as attributes)."""
    out_dir = Path(out_dir)
    tok_files = _tokenizer_files(tokenizer_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    disc, gen = to_hf(model)
    for name, state, generator in (("discriminator", disc, False), ("generator", gen, True)):
        folder = tmp / name
        folder.mkdir(parents=True)
        tensors = {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in state.items()}
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        apply_umask(folder / "model.safetensors")  # safetensors creates it 0600 whatever the umask
        config = hf_config(cfg, generator=generator)
        if lineage is not None:
            config["electra_lineage"] = lineage
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for file, data in _fit_to_model(tok_files, config["max_position_embeddings"]).items():
            (folder / file).write_bytes(data)
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return out_dir


def export_checkpoint(step_dir: str | Path, out_dir: str | Path) -> Path:
    """Export any complete checkpoint of a run as ``out_dir/{discriminator,generator}`` (HF format).

    Needs the run's ``config.json`` (written by the trainer at start) and uses the run's copy of
    the corpus tokenizer (``RUN/tokenizer``) when present.
    """
    from electra.checkpoint.deepspeed_states import checkpoint_state_dict

    step_dir = Path(step_dir)
    run_dir = layout.run_dir_of(step_dir)
    if not layout.is_complete(step_dir) or run_dir is None:
        raise FileNotFoundError(f"{step_dir}: not a complete checkpoint (no {layout.META} in a "
                                f"RUN/{layout.CHECKPOINTS}/step_N folder)")
    config_path = run_dir / layout.CONFIG
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path}: missing; the export rebuilds the model from the run's "
                                f"config.json, which the trainer writes at start")
    try:
        raw = json.loads(config_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{config_path}:{e.lineno}: invalid JSON: {e.msg}") from e
    cfg = ElectraConfig.from_dict(raw, source=str(config_path))
    model = ElectraForPretraining(cfg.model)
    prefix = "model."  # the engine wraps ElectraObjective, which holds the model as .model
    state = {k[len(prefix):]: v for k, v in checkpoint_state_dict(step_dir).items() if k.startswith(prefix)}
    model.load_state_dict(state, strict=True)
    tokenizer_dir = run_dir / layout.TOKENIZER
    export_hf(model, cfg.model, out_dir, tokenizer_dir=tokenizer_dir if tokenizer_dir.is_dir() else None,
              lineage=layout.checkpoint_lineage(step_dir))
    return Path(out_dir)


def _fit_to_model(tok_files: dict[str, bytes], positions: int) -> dict[str, bytes]:
    """The tokenizer files with ``model_max_length`` set to the model's position count, so that
    ``tokenizer(text, truncation=True)`` (and ``padding="max_length"``) never makes a sequence the
    model cannot embed. transformers reads it from ``tokenizer_config.json`` only (``tokenizer.json``
    carries no length unless truncation is enabled in it, and ours is not: a call's own arguments
    decide). The corpus folder's value is a generic 512 and is not carried over."""
    if schema.TOKENIZER_CONFIG not in tok_files:
        return tok_files
    config = json.loads(tok_files[schema.TOKENIZER_CONFIG])
    config["model_max_length"] = int(positions)
    return {**tok_files, schema.TOKENIZER_CONFIG: (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()}


def _tokenizer_files(tokenizer_dir: str | Path | None) -> dict[str, bytes]:
    """The tokenizer files to write beside the model, derived from ``tokenizer.json`` (written
    as it is): ``tokenizer_config.json`` names the transformers class that loads it correctly,
    and ``vocab.txt`` exists only for a BERT WordPiece (``pipelines.tokenizer_files.hf_files``), so an
    older or hand-made folder cannot leave a misleading ``vocab.txt`` or config behind."""
    from tokenizers import Tokenizer

    from pipelines.tokenizer_files import hf_files

    if tokenizer_dir is None:
        return {}
    path = Path(tokenizer_dir) / schema.TOKENIZER_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{tokenizer_dir}: no tokenizer.json to export")
    data = path.read_bytes()
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
        raise ValueError(f"{path}: not a tokenizers tokenizer.json ({exc})") from exc
    return {**hf_files(tok), schema.TOKENIZER_JSON: data}


def model_config_from_hf(disc: dict, gen: dict | None = None, *, source: str = "config.json") -> ModelConfig:
    """ModelConfig from HF config dicts. The generator's config is the truth for its shape: its
    width gives ``generator_fraction``, and each of its heads, FFN size and depth that is not the
    derived one is kept explicitly (``generator_num_heads`` ...). Refused (``ValueError`` naming
    ``source``): a generator that cannot share the discriminator's embedding block."""
    if disc.get("hidden_act", "gelu") != "gelu" or disc.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{source}: only hidden_act 'gelu' and absolute positions are supported")
    cfg = ModelConfig(
        vocab_size=disc["vocab_size"], embedding_size=disc["embedding_size"], hidden_size=disc["hidden_size"],
        num_layers=disc["num_hidden_layers"], num_heads=disc["num_attention_heads"],
        intermediate_size=disc["intermediate_size"], max_position_embeddings=disc["max_position_embeddings"],
        type_vocab_size=disc["type_vocab_size"], hidden_dropout=disc["hidden_dropout_prob"],
        attention_dropout=disc["attention_probs_dropout_prob"], layer_norm_eps=disc["layer_norm_eps"],
        initializer_range=disc.get("initializer_range", 0.02), pad_token_id=disc.get("pad_token_id") or 0)
    if gen is not None:
        cfg = _with_generator(cfg, disc, gen, source=source)
    cfg.validate()
    return cfg


_SHARED = ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size", "layer_norm_eps")


def _with_generator(cfg: ModelConfig, disc: dict, gen: dict, *, source: str) -> ModelConfig:
    if gen.get("hidden_act", "gelu") != "gelu" or gen.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{source}: only hidden_act 'gelu' and absolute positions are supported")
    differ = [f"{k} {gen[k]} vs {disc[k]}" for k in _SHARED if gen.get(k, disc[k]) != disc[k]]
    if differ:
        raise ValueError(f"{source}: generator and discriminator differ in {', '.join(differ)}, but the two share "
                         "one embedding block; take discriminator/ and generator/ from the same release")
    if not 0 < gen["hidden_size"] <= disc["hidden_size"]:
        raise ValueError(f"{source}: the generator's hidden_size {gen['hidden_size']} is wider than the "
                         f"discriminator's {disc['hidden_size']}; an ELECTRA generator is at most as wide")
    cfg = dataclasses.replace(cfg, generator_fraction=gen["hidden_size"] / disc["hidden_size"])
    derived = (*cfg.generator_sizes()[1:], cfg.num_layers)
    given = (gen["num_attention_heads"], gen["intermediate_size"], gen["num_hidden_layers"])
    return dataclasses.replace(cfg, **{k: g if g != d else None for k, g, d in zip(
        ("generator_num_heads", "generator_intermediate_size", "generator_num_layers"), given, derived)})


def check_fits(cfg: ModelConfig, state: dict[str, torch.Tensor], *, configs: dict[str, str]) -> None:
    """``ValueError`` naming the ``config.json`` (``configs``: side -> path) whose shapes the weights
    (``from_hf``'s state dict) do not have: a config.json of another download, which
    ``load_state_dict`` would only report as a size mismatch of a parameter."""
    with torch.device("meta"):
        want = ElectraForPretraining(cfg).state_dict()
    for key, tensor in want.items():
        if key in state and state[key].shape != tensor.shape:
            side = "generator" if key.startswith("generator") else "discriminator"
            raise ValueError(f"{configs[side]}: does not describe the weights beside it, so their shapes are not "
                             f"derivable from it: {key} is {list(state[key].shape)} in the weights, "
                             f"{list(tensor.shape)} by config.json; use the config.json downloaded with the weights")


def _read(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    for name in ("config.json", "model.safetensors"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name}: missing (expected an HF ELECTRA folder)")
    try:
        config = json.loads((folder / "config.json").read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{folder / 'config.json'}:{e.lineno}: invalid JSON: {e.msg}") from e
    return config, load_file(str(folder / "model.safetensors"))


def import_hf(hf_dir: str | Path) -> tuple[ElectraForPretraining, ModelConfig]:
    """Rebuild the pre-training model from an ``export_hf`` folder pair (to continue pre-training)."""
    hf_dir = Path(hf_dir)
    d_cfg, d_state = _read(hf_dir / "discriminator")
    g_cfg, g_state = _read(hf_dir / "generator")
    cfg = model_config_from_hf(d_cfg, g_cfg, source=str(hf_dir / "generator" / "config.json"))
    model = ElectraForPretraining(cfg)
    state = from_hf(d_state, g_state, cfg)
    check_fits(cfg, state, configs={side: str(hf_dir / side / "config.json")
                                    for side in ("discriminator", "generator")})
    model.load_state_dict(state, strict=True)
    return model, cfg


def load_discriminator_encoder(path: str | Path) -> tuple[ElectraEncoder, ModelConfig]:
    """The discriminator ``ElectraEncoder`` from ``path`` (a ``discriminator`` folder or its parent).

    Also reads HF ElectraModel folders, whose keys have no ``electra.`` prefix.
    """
    path = Path(path)
    folder = path / "discriminator" if (path / "discriminator").is_dir() else path
    config, state = _read(folder)
    if not any(k.startswith("electra.") for k in state):
        state = {f"electra.{k}": v for k, v in state.items()}
    cfg = model_config_from_hf(config, source=str(folder / "config.json"))
    encoder = build_encoder(cfg, ElectraEmbeddings.from_config(cfg))
    encoder.load_state_dict(encoder_from_hf(state, cfg.num_layers), strict=True)
    return encoder, cfg


# ------------------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="electra-export",
        description="Export a checkpoint of a pre-training run in Hugging Face format: OUT/discriminator "
                    "(ElectraForPreTraining) and OUT/generator (ElectraForMaskedLM), each with the run's "
                    "tokenizer. Also: python -m electra.hf_export.")
    p.add_argument("checkpoint", help="checkpoint folder RUN/checkpoints/step_N, or a run folder RUN "
                                      "(its newest complete checkpoint)")
    p.add_argument("--out", required=True, help="folder to write; an existing export there is replaced atomically")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        if out.exists() and not out.is_dir():
            raise FileExistsError(f"{out}: exists and is not a folder; choose another --out")
        step_dir = layout.resolve_checkpoint(args.checkpoint)  # the run layout's one rule
        export_checkpoint(step_dir, out)
    except (OSError, ValueError) as exc:  # a user error: one line (a bug keeps its traceback)
        line = str(exc).replace("\n", " ")
        print(f"electra-export: error: {line}", file=sys.stderr)
        return 2
    print(f"{step_dir} exported to {out} (discriminator/, generator/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
