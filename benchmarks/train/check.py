"""What a pre-training run measured, and whether its Hugging Face export is the model it trained.

    python benchmarks/train/check.py RUN_DIR [--json out.json]

Reads ``RUN_DIR/metrics.jsonl`` (the trainer's records) and prints, for the logged windows after
the first (which holds start-up, allocator warm-up and kernel selection): optimizer steps/s,
tokens/s, MFU (the trainer's, against the datasheet peak of ``electra.run.metrics_log.peak_flops``),
the most device memory a rank held (``max_memory_gib``, CUDA only), and the losses of the first
and last windows with the evaluations. Then it checks the export: ``transformers`` loads
``RUN_DIR/hf/discriminator`` and ``hf/generator`` (``ElectraForPreTraining``,
``ElectraForMaskedLM``), and their logits on a real paragraph, tokenised by the run's tokenizer,
are compared with those of our model rebuilt from the newest checkpoint's fp32 master weights
read straight from the DeepSpeed files (``electra.checkpoint.deepspeed_states``): two implementations, two
paths from the same training state. Both run in fp32 with TF32 off. Exit status 1 when the
export does not load or its logits differ by more than ``--tol`` (relative to their scale).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from electra.checkpoint import run_layout as layout

PARAGRAPH = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
             "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season "
             "of Light, it was the season of Darkness.")


def training_figures(run_dir: Path) -> dict:
    """Steps/s, tokens/s, MFU and memory over the windows after the first; first and last losses."""
    records = [json.loads(line) for line in (run_dir / layout.METRICS).read_text().splitlines() if line.strip()]
    train = [r for r in records if r.get("kind") == "train"]
    if len(train) < 2:
        raise SystemExit(f"{run_dir / layout.METRICS}: fewer than two train records; nothing to measure")
    steady, rates = train[1:], []
    for prev, rec in zip(train, train[1:]):
        seconds = rec["tokens"] / rec["tokens_per_sec"] if rec["tokens_per_sec"] else None
        if seconds:
            rates.append((rec["step"] - prev["step"]) / seconds)
    keys = ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_auc")
    memory = [r["max_memory_gib"] for r in train if r.get("max_memory_gib") is not None]
    mfu = [r["mfu"] for r in steady if r.get("mfu") is not None]
    return {
        "steps": train[-1]["step"], "windows": len(train),
        "steps_per_s": statistics.median(rates) if rates else None,
        "tokens_per_s": statistics.median(r["tokens_per_sec"] for r in steady),
        "mfu_datasheet": statistics.median(mfu) if mfu else None,
        "max_memory_gib": max(memory) if memory else None,
        "first": {k: train[0].get(k) for k in keys}, "last": {k: train[-1].get(k) for k in keys},
        "eval": [{k: r.get(k) for k in ("step", "eval_loss", "eval_disc_auc", "eval_gen_acc")}
                 for r in records if r.get("kind") == "eval"],
    }


def export_check(run_dir: Path, tol: float) -> dict:
    """Logits of the ``transformers`` load of the export vs ours from the checkpoint's masters."""
    import transformers
    from tokenizers import Tokenizer

    from electra.config import ElectraConfig
    from electra.checkpoint.deepspeed_states import checkpoint_state_dict
    from electra.model.networks import ElectraForPretraining

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    step_dir = layout.find_latest(run_dir)
    if step_dir is None:
        raise FileNotFoundError(f"{run_dir}: no complete checkpoint (the run ended before its first save)")
    cfg = ElectraConfig.from_dict(json.loads((run_dir / layout.CONFIG).read_text()), source=str(run_dir))
    ours = ElectraForPretraining(cfg.model)
    state = {k[len("model."):]: v for k, v in checkpoint_state_dict(step_dir).items() if k.startswith("model.")}
    ours.load_state_dict(state, strict=True)
    ours = ours.to(device).eval()
    hf = run_dir / layout.HF
    disc = transformers.ElectraForPreTraining.from_pretrained(hf / "discriminator").to(device).eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(hf / "generator").to(device).eval()
    tok = Tokenizer.from_file(str(run_dir / layout.TOKENIZER / "tokenizer.json"))
    ids = torch.tensor([tok.encode(PARAGRAPH).ids[:cfg.model.max_position_embeddings]], device=device)
    seg = torch.zeros_like(ids)
    with torch.no_grad():
        d_ours = ours.discriminator_logits(ids, seg)
        g_ours = ours.generator_logits(ids, seg)
        d_hf = disc(input_ids=ids, token_type_ids=seg).logits
        g_hf = gen(input_ids=ids, token_type_ids=seg).logits

    def rel(a, b):
        return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-12))

    out = {"checkpoint": str(step_dir), "tokens": ids.shape[1], "transformers": transformers.__version__,
           "discriminator_max_rel_diff": rel(d_ours.view_as(d_hf), d_hf),
           "generator_max_rel_diff": rel(g_ours.view_as(g_hf), g_hf)}
    out["ok"] = out["discriminator_max_rel_diff"] <= tol and out["generator_max_rel_diff"] <= tol
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="a run folder written by electra/train.py")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative logit difference of the export")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    result = {"training": training_figures(args.run_dir)}
    t = result["training"]
    print(f"{t['steps']} steps: {t['steps_per_s'] or 0:.3f} steps/s, {t['tokens_per_s']:.0f} tokens/s, "
          f"MFU {100 * (t['mfu_datasheet'] or 0):.1f}% (datasheet peak), max memory "
          f"{t['max_memory_gib'] if t['max_memory_gib'] is not None else '-'} GiB")
    print(f"loss first {t['first']} -> last {t['last']}; eval {t['eval']}")
    try:
        result["export"] = export_check(args.run_dir, args.tol)
    except Exception as exc:  # reported, not raised: the figures above still get written
        result["export"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(f"export: {result['export']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["export"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
