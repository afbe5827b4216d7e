"""A tiny randomly initialised HF export, small GLUE/SQuAD files and a fake run folder, shared
by the evaluation flow tests (``tiny`` is a fixture in ``tests/flows/conftest.py``)."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from tests.evaluation.glue_files import sentence, squad_json, write, write_keyword_sst2, write_task
from tests.evaluation.tiny_model import tiny_export, train_tokenizer


def build_tiny(root: Path) -> dict:
    tok = train_tokenizer(root / "tok")
    export = tiny_export(root / "hf", tokenizer_dir=tok)
    glue = root / "glue"
    write_keyword_sst2(glue, n_train=200, n_dev=100, n_test=8)
    write_task(glue, "MNLI", n_train=24, n_dev=9, n_test=5)
    write(glue / "diagnostic" / "diagnostic.tsv", ["index\tsentence1\tsentence2", "0\ta b\tc",
                                                  "1\td\te f"])
    write(glue / "WNLI" / "test.tsv", ["index\tsentence1\tsentence2", "0\tx y\tz", "1\tu\tv"])
    rng = random.Random(3)
    stsb = ["\t".join("index genre filename year old_index source1 source2 sentence1 "
                      "sentence2 score".split())]
    stsb += [f"{i}\tg\tf\t2012\t{i}\tnone\tnone\t{sentence(rng)}\t{sentence(rng)}\t"
             f"{(i * 0.37) % 5:.3f}" for i in range(24)]
    write(glue / "STS-B" / "train.tsv", stsb)
    write(glue / "STS-B" / "dev.tsv", stsb[:13])
    squad = root / "squad"
    squad_json(squad / "train-v2.0.json", version="2.0", n_paragraphs=4, impossible_every=3)
    squad_json(squad / "dev-v2.0.json", version="2.0", n_paragraphs=2, seed=1, impossible_every=3)
    return {"root": root, "export": export, "glue": glue, "squad": squad}



def make_run(root: Path, export: Path, steps: list[int]) -> Path:
    run = root / "runs" / "run1"
    for step in steps:
        d = run / "checkpoints" / f"step_{step:08d}"
        shutil.copytree(export, d / "hf")
        (d / "meta.json").write_text(json.dumps({"step": step, "tokens_seen": step * 100}))
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 10.0 / s, "gen_loss": 5.0 / s}) + "\n"
        for s in range(1, 25)))
    return run


