"""Fine-tune on SQuAD 1.1 / 2.0 for N seeds: featurise, train the span head, n-best, score.

Files: ``<squad_dir>/train-v<version>.json`` and ``<squad_dir>/dev-v<version>.json`` (the
official names). Windows are built once (``squad_data.featurize``); training questions whose
answer is misaligned are skipped, written to ``predictions/SQuAD<version>/skipped_train.jsonl``
(``{qid, reason, detail}``) and counted in every seed's metrics as ``skipped_misaligned``
(present only when some were skipped).
Per seed a fresh encoder and span head (``recipe.squad_head``: the paper's beam head by default,
the plain start/end head as the switch; with the answerability logit for 2.0) train for
``recipe.squad_epochs`` (2), then dev windows are scored, the post-processing picks one answer
per question, and the rows ``{id, prediction, best_text, na_prob, answers}`` go to
``predictions/SQuAD<version>/seed<N>.jsonl``. ``na_prob`` is the no-answer LOGIT (the smallest
over the question's windows), as the original writes its null-odds file; ``prediction`` is ""
when it exceeds ``recipe.squad_na_threshold`` (-2.75, the original's). Metrics are recomputed
from that file: EM/F1 by the official rules of the version (1.1 or 2.0), and for 2.0 at the
recipe's threshold and at the best threshold, with that threshold. Beside them the "always no
answer" baseline on the same dev questions (``baselines``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .baselines import squad_no_answer_baseline
from .heads import PaperSpanHead, SpanHead, span_loss
from .loop import (_autocast, load_tokenizer, pad_batch, predict, resolve_device,
                   seed_everything, train)
from .predictions import prediction_path, recompute_metrics, write_predictions
from .recipe import FinetuneRecipe
from .results import SeedResult, TaskResult
from .squad_data import (SquadDataError, SquadExample, SquadFeatures,  # noqa: F401 (re-export)
                         featurize, postprocess, postprocess_beam, read_squad)


def squad_task_name(version: str) -> str:
    return f"SQuAD{version}"


def squad_files(squad_dir: str | Path, version: str) -> tuple[Path, Path]:
    squad_dir = Path(squad_dir)
    return squad_dir / f"train-v{version}.json", squad_dir / f"dev-v{version}.json"


def check_squad_data(squad_dir: str | Path, version: str) -> dict[str, int]:
    """Parse and validate both files without tokenising (``SquadDataError`` on any fault).

    A flow calls it before the first fine-tuning step, as GLUE's ``check_task_data``. Returns
    question counts and ``train_misaligned``: training answers not at their ``answer_start``,
    which fine-tuning skips (its ``skipped_misaligned`` adds the few a tokenizer cannot map).
    """
    train_path, dev_path = squad_files(squad_dir, version)
    train = read_squad(train_path, version=version)
    dev = read_squad(dev_path, version=version)
    return {"train": len(train), "dev": len(dev),
            "train_misaligned": sum(bool(e.misaligned) for e in train)}


def _pad_logits(rows: list[np.ndarray]) -> np.ndarray:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width, 2), -1e4, dtype=np.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _feats(examples, tokenizer, recipe: FinetuneRecipe, *, training: bool) -> SquadFeatures:
    return featurize(examples, tokenizer, max_len=recipe.squad_max_len,
                     doc_stride=recipe.squad_doc_stride, max_query=recipe.squad_max_query,
                     training=training)


def make_head(hidden_size: int, recipe: FinetuneRecipe, *, v2: bool):
    if recipe.squad_head == "paper":
        return PaperSpanHead(hidden_size, answerability=v2, beam=recipe.squad_beam)
    return SpanHead(hidden_size, answerability=v2, dropout=recipe.dropout)


@torch.no_grad()
def predict_beam(model, feats: SquadFeatures, recipe: FinetuneRecipe, *, pad_id: int):
    """The paper head's beam per window: arrays [F, k], [F, k], [F, k, k], [F, k, k], na [F]."""
    device = next(model.parameters()).device
    model.eval()
    parts: list[list[np.ndarray]] = [[], [], [], []]
    na: list[float] = []
    for b in range(0, len(feats), recipe.eval_batch_size):
        batch = pad_batch(feats.input_ids[b: b + recipe.eval_batch_size],
                          feats.segment_ids[b: b + recipe.eval_batch_size], pad_id=pad_id)
        with _autocast(device, recipe):
            out = model(*(t.to(device) for t in batch))
        for part, t in zip(parts, out.beam):
            part.append(_pad_beam(t.float().cpu().numpy() if t.is_floating_point()
                                  else t.cpu().numpy(), recipe.squad_beam))
        if out.na_logits is not None:
            na.extend(out.na_logits.float().cpu().numpy().tolist())
    return [np.concatenate(p) for p in parts], (np.asarray(na) if na else None)


def _pad_beam(a: np.ndarray, k: int) -> np.ndarray:
    """Batches shorter than the beam give a narrower beam; pad with never-chosen entries."""
    if a.shape[1] == k:
        return a
    fill = -1e9 if a.dtype.kind == "f" else 0
    widths = [(0, 0)] + [(0, k - n) for n in a.shape[1:]]
    return np.pad(a, widths, constant_values=fill)


def finetune_squad(*, model_dir: str | Path, squad_dir: str | Path, version: str,
                   recipe: FinetuneRecipe, out_dir: str | Path) -> TaskResult:
    from .finetune import load_model  # one loader for GLUE and SQuAD

    name, out_dir = squad_task_name(version), Path(out_dir)
    train_path, dev_path = squad_files(squad_dir, version)
    train_ex = read_squad(train_path, version=version)[: recipe.max_train_examples]
    dev_ex = read_squad(dev_path, version=version)[: recipe.max_eval_examples]
    tokenizer = load_tokenizer(model_dir)
    pad_id = tokenizer.token_to_id("[PAD]") or 0
    tf = _feats(train_ex, tokenizer, recipe, training=True)
    df = _feats(dev_ex, tokenizer, recipe, training=False)
    if tf.skipped:
        write_predictions(prediction_path(out_dir, name, 0).with_name("skipped_train.jsonl"),
                          tf.skipped)
    starts = torch.tensor(tf.start_positions)
    ends = torch.tensor(tf.end_positions)
    impossible = torch.tensor(tf.is_impossible)
    v2 = version == "2.0"
    device = resolve_device(recipe)

    def loss_fn(out, idx, dev):
        return span_loss(out, starts[idx].to(dev), ends[idx].to(dev),
                         impossible[idx].to(dev) if v2 else None,
                         answerable_weight=recipe.squad_answerable_weight)

    seeds = []
    for seed in recipe.seeds:
        seed_everything(seed)
        model = load_model(model_dir, lambda h: make_head(h, recipe, v2=v2), device)
        stats = train(model, rows=tf.input_ids, segs=tf.segment_ids, loss_fn=loss_fn,
                      recipe=recipe, epochs=recipe.epochs or recipe.squad_epochs, seed=seed,
                      pad_id=pad_id, label=f"{name} seed {seed}")
        preds = _predict(model, dev_ex, df, recipe, pad_id=pad_id)
        path = write_predictions(prediction_path(out_dir, name, seed),
                                 _rows(dev_ex, preds, recipe.squad_na_threshold if v2 else None))
        metrics = recompute_metrics(name, path, na_threshold=recipe.squad_na_threshold)
        if tf.skipped:  # absent: none skipped
            metrics["skipped_misaligned"] = len(tf.skipped)
        seeds.append(SeedResult(
            seed=seed, metrics=metrics,
            predictions=str(path.relative_to(out_dir)), train_loss=stats.losses,
            steps=stats.steps, seconds=round(stats.seconds, 3)))
        del model
    return TaskResult(task=name, primary="f1", seeds=seeds, num_train=len(tf),
                      num_eval={"dev": len(dev_ex)},
                      baseline=squad_no_answer_baseline(dev_ex, version=version))


def _predict(model, dev_ex, df: SquadFeatures, recipe: FinetuneRecipe, *, pad_id: int):
    if recipe.squad_head == "paper":
        (s_lp, s_idx, e_lp, e_idx), na = predict_beam(model, df, recipe, pad_id=pad_id)
        return postprocess_beam(dev_ex, df, s_lp, s_idx, e_lp, e_idx, na_logits=na,
                                max_answer_len=recipe.squad_max_answer)
    logits, na = predict(model, rows=df.input_ids, segs=df.segment_ids, recipe=recipe,
                         pad_id=pad_id)
    padded = _pad_logits(logits)
    return postprocess(dev_ex, df, padded[..., 0], padded[..., 1],
                       na_logits=np.asarray(na) if na is not None else None,
                       n_best=recipe.squad_n_best, max_answer_len=recipe.squad_max_answer)


def _rows(examples: list[SquadExample], preds, threshold: float | None) -> list[dict]:
    """Prediction rows; ``threshold`` None (SQuAD 1.1) never answers ""."""
    rows = []
    for ex in examples:
        p = preds[ex.qid]
        blank = threshold is not None and p.na_prob > threshold
        rows.append({"split": "dev", "id": ex.qid, "best_text": p.text,
                     "prediction": "" if blank else p.text,
                     "na_prob": round(p.na_prob, 6), "answers": list(ex.answers)})
    return rows
