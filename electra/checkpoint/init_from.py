"""Continue pre-training from a released ELECTRA or from one of our runs (``--init-from LOCATION``).

LOCATION is either

- a **Hugging Face pair**: a folder holding ``discriminator/`` and ``generator/``, each a model
  folder (``config.json``, ``model.safetensors`` or ``pytorch_model.bin``, tokenizer files): our
  own export ``RUN/hf``, or a released pair downloaded into two folders (``google/electra-base-
  discriminator`` -> ``discriminator/``, ``google/electra-base-generator`` -> ``generator/``);
- **one of our runs** or one of its checkpoints (``RUN`` = its newest complete checkpoint, or
  ``RUN/checkpoints/step_N``): the fp32 master weights are read from the DeepSpeed files.

What comes from where. The architecture (``ARCHITECTURE``: sizes, vocabulary, positions, the
generator's shape) is the checkpoint's; a released generator of any width, heads, FFN size or
depth is kept as its ``config.json`` gives it (``model.generator_*``: only a generator that cannot
share the discriminator's embedding block is refused). The preset gives everything else
(objective, optimiser, schedule, data, dropout, training). A user setting of an architecture key
that contradicts the checkpoint (``--set model.hidden_size=...``, or a key in a config file of
their own) is a one-line error naming both values (a generator size left derived, null, counts as
the size it derives): nothing the user set is silently ignored. The optimiser and the
learning-rate schedule start fresh at step 0, unless LOCATION is one of our checkpoints and
``--resume-schedule`` asks to continue its optimiser state and schedule (then on new data: the
data position starts at the new corpora's beginning).

The vocabulary is enforced before anything is built: the corpus's tokenizer and the checkpoint's
are compared (``electra.checkpoint.vocabulary``: tokens in id order, size, special ids, lower-casing); a
mismatch is one line naming both and the fix (build the corpus with ``--tokenizer
LOCATION/discriminator``). Released pairs store the shared embeddings twice; the discriminator's
are used, and a warning naming both folders says so if the generator's copy differs (the Hugging
Face import, ``hf_export.import_hf``, refuses such a pair). Every refusal is one line that starts
with ``--init-from LOCATION:``, says what differs and what to do. The run records its source in
``RUN/lineage.json`` (location, checkpoint, sha256 of each weight file read) and every export
carries it in its ``config.json`` (``electra_lineage``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from common.config import ConfigError
from electra.checkpoint import run_layout as layout
from electra.checkpoint import vocabulary as vocab
from electra.config import PRESETS_DIR, ElectraConfig, ModelConfig, OptimizerConfig, config_location
from electra.data.corpus import CorpusMismatchError
from pipelines import schema

log = logging.getLogger("electra.train")

# The model fields a checkpoint decides: what its tensors' shapes and its normalisation need.
ARCHITECTURE = ("vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                "generator_fraction", "generator_num_heads", "generator_intermediate_size", "generator_num_layers",
                "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id")
# The generator sizes a config may leave derived (None): compared with a user's setting as the size they derive.
_DERIVED = {"generator_num_heads": lambda m: m.generator_sizes().num_heads,
            "generator_intermediate_size": lambda m: m.generator_sizes().intermediate_size,
            "generator_num_layers": lambda m: m.generator_depth}
LINEAGE = layout.LINEAGE  # RUN/lineage.json: the run directory's file (run_layout)
_FORMS = ("a folder with discriminator/ and generator/ in Hugging Face format (a released pair, or RUN/hf), "
          "a run folder, or RUN/checkpoints/step_N")


@dataclass(frozen=True)
class InitSource:
    location: str  # as given, made absolute (a run folder stays the run folder: step_dir says which step)
    kind: Literal["hf", "run"]
    model: ModelConfig  # the checkpoint's architecture
    vocabulary: vocab.Vocabulary
    tokenizer_dir: Path  # the checkpoint's tokenizer files (the fix for a corpus that does not match)
    weight_files: tuple[Path, ...]
    step_dir: Path | None = None  # kind "run": the checkpoint
    objective_kind: str | None = None  # kind "run"
    optimizer: OptimizerConfig | None = None  # kind "run": the schedule --resume-schedule continues


def find_source(location: str) -> InitSource:
    """What ``location`` holds (module docstring); reads configs and tokenizer files, no weights."""
    from electra.checkpoint.hf_export import model_config_from_hf

    path = Path(location).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"--init-from {location}: no such folder; give {_FORMS}")
    path = path.resolve()
    if (path / "discriminator").is_dir() and (path / "generator").is_dir():
        configs = {side: _json(path / side / "config.json") for side in ("discriminator", "generator")}
        try:
            model = model_config_from_hf(configs["discriminator"], configs["generator"],
                                         source=str(path / "generator" / "config.json"))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"--init-from {path}: config.json lacks {exc} (not an ELECTRA model folder)") from None
        except ValueError as exc:  # a pair this trainer cannot build: what differs, and what to do
            raise ValueError(f"--init-from {path}: {exc}") from None
        tok_dir = next((path / s for s in ("discriminator", "generator") if _has_tokenizer(path / s)), None)
        if tok_dir is None:
            raise FileNotFoundError(f"--init-from {path}: no tokenizer files (vocab.txt or tokenizer.json) in "
                                    "discriminator/ or generator/; download them with the weights")
        files = tuple(_weights_file(path / side) for side in ("discriminator", "generator"))
        return InitSource(str(path), "hf", model, vocab.from_folder(str(tok_dir)), tok_dir, files)
    try:
        step_dir = layout.resolve_checkpoint(path, forms=_FORMS)
    except layout.NoCheckpoint as exc:
        raise FileNotFoundError(f"--init-from {location}: {exc}") from None
    run_dir = layout.run_dir_of(step_dir)
    cfg = ElectraConfig.from_dict(_json(run_dir / layout.CONFIG), source=str(run_dir / layout.CONFIG))
    tok_dir = run_dir / layout.TOKENIZER
    files = tuple(sorted(p for p in step_dir.iterdir() if p.suffix == ".pt"))
    return InitSource(str(path), "run", cfg.model, vocab.from_folder(str(tok_dir)), tok_dir, files,
                      step_dir, cfg.objective.kind, cfg.optimizer)


def _json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"--init-from: {path} missing (expected {_FORMS})")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"--init-from: {path}:{exc.lineno}: invalid JSON: {exc.msg}; download it again") from None


def _has_tokenizer(folder: Path) -> bool:
    return (folder / schema.TOKENIZER_JSON).is_file() or (folder / schema.VOCAB_TXT).is_file()


def _weights_file(folder: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"--init-from: {folder} has neither model.safetensors nor pytorch_model.bin")


# ------------------------------------------------------------------------------ config
def settle(requested: ElectraConfig, *, config: str, overrides: list[str], init_from: str | None,
           resume_schedule: bool, run_dir: Path, resuming: bool) -> tuple[ElectraConfig, InitSource | None]:
    """The run's config and the source to load (None: nothing to load). A run that resumes
    itself keeps the architecture (and a continued schedule) it started with, from its own
    ``config.json``, whether or not ``--init-from`` is given again."""
    started = read_lineage(run_dir) if resuming else None
    if started is not None and "init_from" not in started:  # only the corpus generations: random weights
        started = None
    model_user = user_settings(config, overrides, "model")
    if started is not None:
        own = ElectraConfig.from_dict(json.loads((run_dir / layout.CONFIG).read_text()),
                                      source=str(run_dir / layout.CONFIG))
        where = f"the run {run_dir} (started from {started['init_from']})"
        requested = apply_architecture(requested, own.model, model_user, where=where)
        if started.get("resume_schedule"):
            requested = apply_schedule(requested, own.optimizer, user_settings(config, overrides, "optimizer"),
                                       where=where)
    if init_from is None:
        return requested, None
    if resuming:  # the source is not read again (it may be gone by now)
        location = str(Path(init_from).expanduser().resolve())
        same = started is not None and started["init_from"] == location
        _say(logging.INFO if same else logging.WARNING, "resuming %s from its own checkpoint; --init-from %s %s",
             run_dir, location, "was its start" if same else
             f"is not used (the run started from {started['init_from'] if started else 'random weights'})")
        return requested, None
    source = find_source(init_from)
    where = f"--init-from {source.location}"
    requested = apply_architecture(requested, source.model, model_user, where=where)
    if resume_schedule:
        if source.kind != "run":
            raise ConfigError(f"--resume-schedule: --init-from {source.location} is a Hugging Face folder, which "
                              "holds no optimiser state or schedule; drop --resume-schedule (the schedule starts at "
                              "step 0) or start from one of our runs")
        requested = apply_schedule(requested, source.optimizer, user_settings(config, overrides, "optimizer"),
                                   where=where)
    return requested, source


def user_settings(config: str, overrides: list[str], section: str) -> dict[str, Any]:
    """The ``section.*`` values the user set: ``--set section.k=v`` and, in a config file of their
    own (not a shipped preset), that section."""
    from common import config as strict

    out: dict[str, Any] = {}
    location = config_location(config)
    if Path(location).resolve().parent != PRESETS_DIR.resolve():
        raw = strict.load_json(location)
        out.update(raw.get(section, {}) if isinstance(raw.get(section), dict) else {})
    for item in overrides:
        key, _, value = item.partition("=")
        head, _, name = key.strip().partition(".")
        if head == section and name:
            try:
                out[name] = json.loads(value)
            except json.JSONDecodeError:
                out[name] = value
    return out


def apply_architecture(requested: ElectraConfig, model: ModelConfig, user: dict[str, Any], *,
                       where: str) -> ElectraConfig:
    """``requested`` with ``model``'s architecture; a contradicting user setting is an error."""
    changes = _take(requested.model, model, ARCHITECTURE, user, "model", where,
                    "the architecture comes from the checkpoint")
    return ElectraConfig.from_dict(dataclasses.asdict(dataclasses.replace(requested, model=changes)),
                                   source=f"config with the architecture of {where}")


def apply_schedule(requested: ElectraConfig, optimizer: OptimizerConfig, user: dict[str, Any], *,
                   where: str) -> ElectraConfig:
    """``requested`` with ``optimizer``'s learning rate, schedule and update (``--resume-schedule``
    continues them; only the kernel choice, ``fused``, stays the user's)."""
    keys = tuple(f.name for f in dataclasses.fields(OptimizerConfig) if f.name != "fused")
    changes = _take(requested.optimizer, optimizer, keys, user, "optimizer", where,
                    "--resume-schedule continues the checkpoint's schedule")
    return ElectraConfig.from_dict(dataclasses.asdict(dataclasses.replace(requested, optimizer=changes)),
                                   source=f"config with the schedule of {where}")


def _take(mine, theirs, keys: tuple[str, ...], user: dict[str, Any], section: str, where: str, why: str):
    for key in keys:
        value = _sized(theirs, key, getattr(theirs, key))
        if key in user and not _same(_sized(theirs, key, user[key]), value):
            raise ConfigError(f"{where}: its {key} is {value}, but {section}.{key}={json.dumps(user[key])} is set; "
                              f"drop the setting ({why})")
    changes = {k: getattr(theirs, k) for k in keys}
    moved = [f"{k} {getattr(mine, k)} -> {v}" for k, v in changes.items() if getattr(mine, k) != v]
    if moved:
        _say(logging.INFO, "%s from %s: %s", section, where, ", ".join(moved))
    return dataclasses.replace(mine, **changes)


def _sized(model, key: str, value: Any) -> Any:
    """``value`` of ``key``, a generator size left derived (None) as the size ``model`` derives."""
    if value is None and key in _DERIVED:
        return _DERIVED[key](dataclasses.replace(model, **{key: None}))
    return value


def _say(level: int, message: str, *args) -> None:
    """Log once per job: every rank resolves the same plan, rank 0 tells it."""
    if os.environ.get("RANK", "0") == "0":
        log.log(level, message, *args)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= 1e-9 * max(1.0, abs(b))
    return a == b


def check_vocabulary(source: InitSource, corpus_vocab: vocab.Vocabulary, corpus: str) -> None:
    """One line when the corpus was not tokenised with the checkpoint's vocabulary."""
    if source.model.vocab_size != source.vocabulary.size:
        raise CorpusMismatchError(f"--init-from {source.location}: its embeddings have {source.model.vocab_size} "
                                  f"rows but its tokenizer ({source.vocabulary.where}) {source.vocabulary.size} "
                                  "tokens; a vocabulary padded beyond its tokenizer is not supported")
    diffs = source.vocabulary.differences(corpus_vocab)
    if not diffs:  # the same tokens, ids and casing: does it tokenise text the same way too?
        diffs = vocab.with_probe(source.vocabulary, str(source.tokenizer_dir)).differences(corpus_vocab)
    if diffs:
        raise CorpusMismatchError(
            f"--init-from {source.location}: its vocabulary ({source.vocabulary.describe()}) differs from the "
            f"corpus {corpus}'s ({corpus_vocab.describe()}): {'; '.join(diffs)}; rebuild the corpus with "
            f"electra-build-corpus --tokenizer {source.tokenizer_dir}")


# ------------------------------------------------------------------------------ weights
def load_weights(source: InitSource, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """An ``ElectraForPretraining`` state dict (fp32) of the checkpoint, for ``cfg``."""
    if source.kind == "run":
        from electra.checkpoint.deepspeed_states import checkpoint_state_dict

        prefix = "model."
        return {k[len(prefix):]: v.float() for k, v in checkpoint_state_dict(source.step_dir).items()
                if k.startswith(prefix)}
    from electra.checkpoint.hf_export import check_fits, from_hf

    disc, gen = (_read_tensors(f) for f in source.weight_files)
    shared = [k for k in disc if k.startswith("electra.embeddings.") and k in gen]
    differ = [k for k in shared if gen[k].shape != disc[k].shape or not torch.equal(gen[k], disc[k])]
    if differ:
        d_dir, g_dir = (f.parent for f in source.weight_files)
        _say(logging.WARNING, "--init-from %s: the generator's copy of the shared embeddings differs from the "
             "discriminator's (%s; generator %s, discriminator %s); using the discriminator's copy (%s) for both "
             "networks, the generator's copy is not used", source.location,
             ", ".join(k.split(".", 2)[2] for k in differ), g_dir, d_dir, d_dir)
    gen = {**gen, **{k: disc[k] for k in shared}}
    state = from_hf(disc, gen, cfg)
    check_fits(cfg, state, configs={side: f"--init-from {source.location}: {f.parent / 'config.json'}"
                                    for side, f in zip(("discriminator", "generator"), source.weight_files)})
    return {k: v.float() for k, v in state.items()}


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def lineage(source: InitSource, *, resume_schedule: bool) -> dict[str, Any]:
    """What ``RUN/lineage.json`` and the exports record of the source: location, checkpoint and
    the sha256 of every weight file read (streamed: files of gigabytes)."""
    def sha256(path: Path) -> str:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        return h.hexdigest()

    root = Path(source.location)
    return {"init_from": source.location, "kind": source.kind,
            "checkpoint": str(source.step_dir) if source.step_dir else None, "resume_schedule": resume_schedule,
            "weights": {str(p.relative_to(root)) if p.is_relative_to(root) else str(p): sha256(p)
                        for p in source.weight_files}}


read_lineage = layout.read_lineage  # read where the run directory is defined (no import cycle with hf_export)
