"""Fine-tune a pre-trained discriminator on one GLUE task for N seeds and score it.

Per task: read train and dev (and test, when present) in the official layout, tokenise once
(``[CLS] a [SEP] b [SEP]``, truncated to ``max_seq_len`` by the tokenizer's BERT post-processor;
MRPC and STS-B also train on the swapped pair ``(b, a)``, which doubles their small training
sets and makes the classifier symmetric), then per seed: fresh encoder from the export + fresh
head, the paper's recipe (``loop.train``), predictions on every dev split written to
``predictions/<task>/seed<N>.jsonl`` and scored FROM THAT FILE (``predictions.recompute_metrics``),
so reported and recomputed scores are the same numbers by construction. Beside them the task's
majority-class (STS-B: training-mean) baseline on the same dev sets (``baselines``).

A task's model also predicts the test sets of other folders its spec names
(``TaskSpec.also_predicts``: the MNLI model predicts the AX diagnostic set and WNLI's test set),
relabelled as the spec says (MNLI → WNLI: ``entailment`` → 1, anything else → 0). Test
predictions of every seed are kept; ``glue_submission`` uses the median seed's.

Every data file is parsed (labels and rows checked) before the first step. Each finished seed is
saved at once (``results.save_seed``) under a key of checkpoint, recipe and the files' sha256, so a
rerun skips the seeds already done (``results.load_seed``) and a crash loses at most one seed.

``recipe_for_model`` caps the recipe's lengths (``max_seq_len``, ``squad_max_len``) to the model's
``max_position_embeddings``: a longer input has no position embedding and would crash.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from . import baselines, eta, glue_tasks
from .glue_tasks import GlueExample
from .heads import FinetuneModel, SequenceHead, sequence_loss
from .loop import load_tokenizer, predict, resolve_device, seed_everything, train
from .predictions import class_probabilities, glue_rows, prediction_path, recompute_metrics, write_predictions
from .recipe import FinetuneRecipe, recipe_for_shape
from .results import SeedResult, TaskResult, hash_files, load_seed, resume_key, save_seed
from .task_spec import TaskSpec
from .tasks import get_task


def recipe_for_model(model_dir: str | Path, **overrides: Any) -> FinetuneRecipe:
    """The paper recipe for the size of the exported model (from its ``config.json``), with its
    lengths capped to the model's positions (``recipe.length_caps`` records what was cut)."""
    path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(path.read_text())
        hidden = int(cfg["hidden_size"])
        positions = int(cfg["max_position_embeddings"])
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read hidden_size/max_position_embeddings "
                         f"({exc!r})") from exc
    return recipe_for_shape(hidden, positions, **overrides)


def task_data_files(task: TaskSpec, glue_dir: str | Path) -> list[Path]:
    """Every file ``finetune_glue`` reads for ``task`` (train, dev, test, and the other folders'
    test sets it predicts: MNLI's AX and WNLI test)."""
    files = glue_tasks.check_files(task, glue_dir)
    files += list(glue_tasks.find_test_files(task, glue_dir).values())
    extras = (glue_tasks.find_extra(extra, glue_dir) for extra in task.also_predicts)
    return files + [path for path in extras if path is not None]


def load_model(model_dir: str | Path, head_fn, device: torch.device) -> FinetuneModel:
    from electra.checkpoint.hf_export import load_discriminator_encoder

    encoder, cfg = load_discriminator_encoder(model_dir)
    return FinetuneModel(encoder, head_fn(cfg.hidden_size)).to(device)


def encode_pairs(tokenizer, examples: list[GlueExample], *,
                 max_len: int) -> tuple[list[list[int]], list[list[int]]]:
    tokenizer.enable_truncation(max_length=max_len)
    tokenizer.no_padding()
    inputs = [(e.text_a, e.text_b) if e.text_b is not None else e.text_a for e in examples]
    encs = tokenizer.encode_batch(inputs)
    return [e.ids for e in encs], [e.type_ids for e in encs]


def _targets(task: TaskSpec, examples: list[GlueExample]) -> torch.Tensor:
    if task.kind == "regression":
        return torch.tensor([float(e.label) for e in examples], dtype=torch.float32)
    return torch.tensor([task.label_index(e.label) for e in examples], dtype=torch.long)


def _decode(task: TaskSpec, logits: list[np.ndarray]) -> tuple[list, list | None]:
    """Predictions and, for classification, each row's class probabilities (kept in the
    prediction files so seeds can be ensembled and scores recomputed)."""
    out = np.stack(logits) if logits else np.zeros((0, task.num_labels))
    if task.kind == "regression":
        scale = task.score_range[1]  # trained on score / the top of the range
        return [round(float(v) * scale, 6) for v in out[:, 0]], None
    return [task.labels[int(i)] for i in out.argmax(axis=1)], class_probabilities(task.labels, out)


def _test_sets(task: TaskSpec, glue_dir: Path,
               loaded: dict[str, glue_tasks.GlueSplit] | None = None) -> dict[str, list[GlueExample]]:
    """Test examples by split; ``loaded`` also gets each file's ``GlueSplit`` (its skipped rows)."""
    tests = {s: glue_tasks.load_tsv(p, task=task, layout=task.test, split=s)
             for s, p in glue_tasks.find_test_files(task, glue_dir).items()}
    if loaded is not None:
        loaded.update(tests)
    sets = {s: g.examples for s, g in tests.items()}
    for extra in task.also_predicts:
        found = glue_tasks.read_extra(extra, glue_dir)
        if found is not None:
            sets[extra.split] = found[1]
    return sets


def _test_label(task: TaskSpec, split: str, label):
    """A test prediction as its set's submission wants it (``ExtraTest.relabel``)."""
    extra = next((e for e in task.also_predicts if e.split == split), None)
    return extra.relabel[label] if extra is not None and extra.relabel is not None else label


def check_task_data(task: TaskSpec | str, glue_dir: str | Path) -> dict[str, int]:
    """Parse every file of a task (rows, labels) without tokenising: ``{split: rows}``.

    A flow calls it for all tasks before the first fine-tuning step, so a malformed row in the
    last task is reported at once, not after hours spent on the first ones.
    """
    task = get_task(task) if isinstance(task, str) else task
    splits = {s: glue_tasks.read_split(task, glue_dir, s) for s in ("train", *task.eval_splits)}
    splits.update(_test_sets(task, Path(glue_dir)))
    return {s: len(rows) for s, rows in splits.items()}


def finetune_glue(task: TaskSpec | str, *, model_dir: str | Path, glue_dir: str | Path,
                  recipe: FinetuneRecipe, out_dir: str | Path, checkpoint: str | None = None,
                  run_id: str = "", only_seeds: Sequence[int] | None = None) -> TaskResult:
    """Fine-tune on one GLUE task for ``recipe.seeds``; predictions and scores under out_dir.

    Seeds already saved under ``out_dir`` for the same checkpoint (default: ``model_dir``),
    recipe and data are reused, not redone. ``only_seeds`` restricts the run (and the result) to
    those seeds of the recipe without changing the resume key: parallel workers each take some
    seeds, and a last call with all seeds assembles the saved ones.
    """
    task = get_task(task) if isinstance(task, str) else task
    glue_dir, out_dir = Path(glue_dir), Path(out_dir)
    data_files = hash_files(task_data_files(task, glue_dir))
    key = resume_key(checkpoint=checkpoint or str(model_dir), recipe=recipe.to_dict(),
                     data_files=data_files)
    # QQP/MNLI malformed rows are skipped as the original does, and recorded in the results.
    loaded = {s: glue_tasks.load_split(task, glue_dir, s) for s in ("train", *task.eval_splits)}
    train_ex = loaded["train"].examples[: recipe.max_train_examples]
    eval_sets = {s: loaded[s].examples[: recipe.max_eval_examples] for s in task.eval_splits}
    test_sets = _test_sets(task, glue_dir, loaded)
    wanted = recipe.seeds if only_seeds is None else [s for s in recipe.seeds if s in set(only_seeds)]
    if only_seeds is not None and len(wanted) != len(set(only_seeds)):
        raise ValueError(f"{task.name}: seeds {sorted(set(only_seeds) - set(wanted))} are not in "
                         f"the recipe's seeds {recipe.seeds}")
    done = {s: load_seed(out_dir, task.name, s, key=key) for s in wanted}
    clock = eta.active()
    for seed in (s for s, saved in done.items() if saved is not None and clock is not None):
        clock.skip(f"{task.name} seed {seed}")  # saved by an earlier run: nothing to go
    # what predicting the training majority (STS-B: the training mean) scores on these dev sets
    baseline = baselines.glue_baseline(task, train_ex, eval_sets)
    result = lambda seeds: TaskResult(  # noqa: E731
        task=task.name, primary=task.primary, seeds=seeds,
        num_train=len(glue_tasks.training_examples(task, train_ex)),
        num_eval={s: len(e) for s, e in eval_sets.items()}, data_files=data_files,
        skipped_rows=glue_tasks.skipped_summary(loaded), baseline=baseline)
    if all(done.values()):
        return result(list(done.values()))
    tokenizer = load_tokenizer(model_dir)
    pad_id = tokenizer.token_to_id("[PAD]") or 0
    train_all = glue_tasks.training_examples(task, train_ex)  # MRPC/STS-B: both orders
    rows, segs = encode_pairs(tokenizer, train_all, max_len=recipe.max_seq_len)
    targets = _targets(task, train_all)
    encoded_eval = {s: encode_pairs(tokenizer, ex, max_len=recipe.max_seq_len)
                    for s, ex in {**eval_sets, **test_sets}.items()}
    regression = task.kind == "regression"
    device = resolve_device(recipe)

    def loss_fn(out, idx, dev):
        return sequence_loss(out.logits, targets[idx].to(dev), regression=regression,
                             score_scale=task.score_range[1])

    seeds = []
    for seed in wanted:
        if done[seed] is not None:
            seeds.append(done[seed])
            continue
        seed_everything(seed)
        model = load_model(model_dir, lambda h: SequenceHead(h, task.num_labels,
                                                             dropout=recipe.dropout), device)
        stats = train(model, rows=rows, segs=segs, loss_fn=loss_fn, recipe=recipe,
                      epochs=recipe.epochs or task.epochs, seed=seed, pad_id=pad_id,
                      label=f"{task.name} seed {seed}")
        preds = {s: _decode(task, predict(model, rows=r, segs=g, recipe=recipe,
                                          pad_id=pad_id)[0])
                 for s, (r, g) in encoded_eval.items()}
        seeds.append(_write_seed(task, seed=seed, preds=preds, eval_sets=eval_sets,
                                 test_sets=test_sets, out_dir=out_dir, stats=stats))
        seeds[-1].run_id = run_id
        save_seed(out_dir, task.name, seeds[-1], key=key)
        del model
    return result(seeds)


def _write_seed(task: TaskSpec, *, seed: int, preds: dict[str, list], eval_sets, test_sets,
                out_dir: Path, stats) -> SeedResult:
    dev_rows = []
    for split, examples in eval_sets.items():
        labels, probs = preds[split]
        dev_rows += glue_rows(split, [e.guid for e in examples], labels,
                              [e.label for e in examples], probabilities=probs)
    path = write_predictions(prediction_path(out_dir, task.name, seed), dev_rows)
    test_rel = None
    if test_sets:
        test_rows = [{"split": split, "id": e.guid, "prediction": _test_label(task, split, p)}
                     for split, examples in test_sets.items()
                     for e, p in zip(examples, preds[split][0])]
        test_path = write_predictions(path.with_name(f"seed{seed}.test.jsonl"), test_rows)
        test_rel = str(test_path.relative_to(out_dir))
    return SeedResult(seed=seed, metrics=recompute_metrics(task.name, path),
                      predictions=str(path.relative_to(out_dir)), test_predictions=test_rel,
                      train_loss=stats.losses, steps=stats.steps, seconds=round(stats.seconds, 3))
