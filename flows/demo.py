"""`make demo`: the whole chain on an embedded default, no network, no GPU.

1. generate a raw corpus (mixed formats, planted duplicates, a few bad files) and a small
   learnable GLUE-format task — nothing is downloaded;
2. build-corpus → WebDataset shards + manifest;
3. pre-train the `tiny` preset with the real trainer (DeepSpeed engine, single process);
4. evaluate the checkpoint (fine-tune over seeds) and print where the report is.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipelines import synthetic

REPO = Path(__file__).resolve().parents[1]


def _run(cmd: list[str]) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="demo_out", help="folder for everything the demo writes")
    p.add_argument("--docs", type=int, default=3000, help="generated documents")
    p.add_argument("--steps", type=int, default=300, help="pre-training steps")
    p.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out).resolve()
    for stale in (out / "run", out / "eval"):  # a demo starts from scratch: an earlier demo's
        if stale.exists():                     # run would resume on a rebuilt corpus and refuse it
            print(f"removing the previous demo's {stale}", flush=True)
            shutil.rmtree(stale)
    raw = synthetic.write_corpus(out / "raw", num_docs=args.docs, seed=0)
    glue = out / "glue"
    synthetic.write_sentiment_task(glue, seed=1)

    py = sys.executable
    _run([py, "-m", "flows.build_corpus", "--source", str(raw), "--out", str(out / "corpus"),
          "--vocab-size", "4000", "--seq-len", "128", "--validation-fraction", "0.05"])
    _run([py, "electra/train.py", "--config", "electra/configs/tiny.json", "--data", str(out / "corpus"),
          "--out", str(out / "run"), "--max-steps", str(args.steps), "--save-every", str(max(1, args.steps // 2))])
    _run([py, "-m", "flows.evaluate", "--checkpoint", str(out / "run"), "--glue-dir", str(glue),
          "--tasks", "SST-2", "--seeds", str(args.seeds), "--size", "small",
          # The paper's fine-tuning LR is for 14M+ parameter models; the demo's 2-layer, 64-wide
          # model needs a larger one and a few more passes over its 600 examples.
          "--lr", "6e-3", "--epochs", "4", "--batch-size", "16", "--max-seq-len", "48", "--threads", "1",
          "--out", str(out / "eval")])
    results = json.loads((out / "eval" / "results.json").read_text())
    print(json.dumps(results.get("tasks", results), indent=1)[:2000])
    print(f"\ncorpus:  {out / 'corpus' / 'manifest.json'}\nrun:     {out / 'run'}\n"
          f"report:  {out / 'eval' / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
