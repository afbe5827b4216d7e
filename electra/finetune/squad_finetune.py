"""Fine-tune on SQuAD 1.1 / 2.0 for N seeds: featurise, train the span head, n-best, score.

Files: ``<squad_dir>/train-v<version>.json`` and ``<squad_dir>/dev-v<version>.json`` (the
official names). Windows are built once (``squad_data.featurize``); per seed a fresh encoder and
``SpanHead`` (with the answerability logit for 2.0) train for ``recipe.squad_epochs`` (2), then
dev windows are scored, the n-best post-processing picks one answer per question, and the rows
``{id, prediction, best_text, na_prob, answers}`` go to ``predictions/SQuAD<version>/seed<N>.jsonl``;
metrics are recomputed from that file (EM/F1, and for 2.0 the best no-answer threshold).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .heads import SpanHead, span_loss
from .loop import load_tokenizer, predict, resolve_device, seed_everything, train
from .predictions import prediction_path, recompute_metrics, write_predictions
from .recipe import FinetuneRecipe
from .results import SeedResult, TaskResult
from .squad_data import SquadExample, SquadFeatures, featurize, postprocess, read_squad


def squad_task_name(version: str) -> str:
    return f"SQuAD{version}"


def squad_files(squad_dir: str | Path, version: str) -> tuple[Path, Path]:
    squad_dir = Path(squad_dir)
    return squad_dir / f"train-v{version}.json", squad_dir / f"dev-v{version}.json"


def _pad_logits(rows: list[np.ndarray]) -> np.ndarray:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width, 2), -1e4, dtype=np.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _feats(examples, tokenizer, recipe: FinetuneRecipe) -> SquadFeatures:
    return featurize(examples, tokenizer, max_len=recipe.squad_max_len,
                     doc_stride=recipe.squad_doc_stride, max_query=recipe.squad_max_query)


def finetune_squad(*, model_dir: str | Path, squad_dir: str | Path, version: str,
                   recipe: FinetuneRecipe, out_dir: str | Path) -> TaskResult:
    from .finetune import load_model  # one loader for GLUE and SQuAD

    name, out_dir = squad_task_name(version), Path(out_dir)
    train_path, dev_path = squad_files(squad_dir, version)
    train_ex = read_squad(train_path, version=version)[: recipe.max_train_examples]
    dev_ex = read_squad(dev_path, version=version)[: recipe.max_eval_examples]
    tokenizer = load_tokenizer(model_dir)
    pad_id = tokenizer.token_to_id("[PAD]") or 0
    tf, df = _feats(train_ex, tokenizer, recipe), _feats(dev_ex, tokenizer, recipe)
    starts = torch.tensor(tf.start_positions)
    ends = torch.tensor(tf.end_positions)
    impossible = torch.tensor(tf.is_impossible)
    v2 = version == "2.0"
    device = resolve_device(recipe)

    def loss_fn(out, idx, dev):
        return span_loss(out, starts[idx].to(dev), ends[idx].to(dev),
                         impossible[idx].to(dev) if v2 else None)

    seeds = []
    for seed in recipe.seeds:
        seed_everything(seed)
        model = load_model(model_dir, lambda h: SpanHead(h, answerability=v2,
                                                         dropout=recipe.dropout), device)
        stats = train(model, rows=tf.input_ids, segs=tf.segment_ids, loss_fn=loss_fn,
                      recipe=recipe, epochs=recipe.epochs or recipe.squad_epochs, seed=seed,
                      pad_id=pad_id)
        logits, na = predict(model, rows=df.input_ids, segs=df.segment_ids, recipe=recipe,
                             pad_id=pad_id)
        padded = _pad_logits(logits)
        preds = postprocess(dev_ex, df, padded[..., 0], padded[..., 1],
                            na_logits=np.asarray(na) if na is not None else None,
                            n_best=recipe.squad_n_best, max_answer_len=recipe.squad_max_answer)
        path = write_predictions(prediction_path(out_dir, name, seed),
                                 _rows(dev_ex, preds, recipe.squad_na_threshold))
        seeds.append(SeedResult(
            seed=seed, metrics=recompute_metrics(name, path, na_threshold=recipe.squad_na_threshold),
            predictions=str(path.relative_to(out_dir)), train_loss=stats.losses,
            steps=stats.steps, seconds=round(stats.seconds, 3)))
        del model
    return TaskResult(task=name, primary="f1", seeds=seeds, num_train=len(tf),
                      num_eval={"dev": len(dev_ex)})


def _rows(examples: list[SquadExample], preds, threshold: float) -> list[dict]:
    rows = []
    for ex in examples:
        p = preds[ex.qid]
        rows.append({"split": "dev", "id": ex.qid, "best_text": p.text,
                     "prediction": "" if p.na_prob > threshold else p.text,
                     "na_prob": round(p.na_prob, 6), "answers": list(ex.answers)})
    return rows
