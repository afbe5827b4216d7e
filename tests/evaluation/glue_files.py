"""Writers of small GLUE/SQuAD files in the official layouts (test data generated per test)."""
from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("red blue green small large quick slow happy sad bright dark cold warm old new "
         "river mountain city forest garden window table story music letter").split()

HEADERS = {
    "QQP": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
    "QNLI": "index\tquestion\tsentence\tlabel",
    "RTE": "index\tsentence1\tsentence2\tlabel",
    "WNLI": "index\tsentence1\tsentence2\tlabel",
    "MRPC": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
    "STS-B": ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
              "sentence2\tscore"),
    "MNLI": ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
             "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"),
}


def sentence(rng: random.Random, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write(path: Path, lines: list[str], *, bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((("\ufeff" if bom else "") + "\n".join(lines) + "\n").encode("utf-8"))
    return path


def glue_rows(task: str, n: int, rng: random.Random, *, test: bool = False) -> list[str]:
    """``n`` data rows of ``task`` in the official column layout."""
    rows = []
    for i in range(n):
        a, b = sentence(rng), sentence(rng)
        if task == "QQP":
            rows.append(f"{i}\t{a}\t{b}" if test else f"{i}\t{2*i}\t{2*i+1}\t{a}\t{b}\t{i % 2}")
        elif task in ("QNLI", "RTE"):
            lab = "entailment" if i % 2 else "not_entailment"
            rows.append(f"{i}\t{a}\t{b}" + ("" if test else f"\t{lab}"))
        elif task == "WNLI":
            rows.append(f"{i}\t{a}\t{b}" + ("" if test else f"\t{i % 2}"))
        elif task == "MRPC":
            rows.append(f"{i}\t{2*i}\t{2*i+1}\t{a}\t{b}" if test else
                        f"{i % 2}\t{2*i}\t{2*i+1}\t{a}\t{b}")
        elif task == "STS-B":
            meta = f"{i}\tmain-news\tfile\t2012\t{i}\tnone\tnone"
            rows.append(f"{meta}\t{a}\t{b}" + ("" if test else f"\t{(i * 0.7) % 5:.3f}"))
        elif task == "MNLI":
            lab = ("contradiction", "entailment", "neutral")[i % 3]
            parse = f"( {a} )\t( {b} )\t(ROOT {a})\t(ROOT {b})"
            rows.append(f"{i}\t{i}\t{i}e\tfiction\t{parse}\t{a}\t{b}" + ("" if test else f"\t{lab}\t{lab}"))
    return rows


def write_task(glue_dir: Path, task: str, *, n_train: int = 12, n_dev: int = 6,
               n_test: int = 0, seed: int = 0) -> Path:
    rng = random.Random(seed)
    folder = glue_dir / task
    dev_names = ["dev_matched", "dev_mismatched"] if task == "MNLI" else ["dev"]
    write(folder / "train.tsv", [HEADERS[task]] + glue_rows(task, n_train, rng))
    for name in dev_names:
        write(folder / f"{name}.tsv", [HEADERS[task]] + glue_rows(task, n_dev, rng))
    if n_test:
        test_header = {"QQP": "id\tquestion1\tquestion2",
                       "MRPC": "index\t#1 ID\t#2 ID\t#1 String\t#2 String"}.get(
            task, "\t".join(HEADERS[task].split("\t")[:-1 if task != "MNLI" else -2]))
        for name in (["test_matched", "test_mismatched"] if task == "MNLI" else ["test"]):
            write(folder / f"{name}.tsv", [test_header] + glue_rows(task, n_test, rng, test=True))
    return folder


def write_keyword_sst2(glue_dir: Path, *, n_train: int, n_dev: int, n_test: int = 0,
                       seed: int = 0, keyword: str = "excellent") -> Path:
    """SST-2-format task a tiny model can learn: label 1 iff ``keyword`` is in the sentence."""
    rng = random.Random(seed)

    def rows(n: int, test: bool) -> list[str]:
        out = []
        for i in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 9))]
            label = i % 2
            # label 0 gets a filler word in place of the keyword: both classes have the same
            # length spread, so length-bucketed batches are not sorted by label
            words.insert(rng.randrange(len(words) + 1), keyword if label else "ordinary")
            text = " ".join(words) + " "
            out.append(f"{i}\t{text}" if test else f"{text}\t{label}")
        return out

    folder = glue_dir / "SST-2"
    write(folder / "train.tsv", ["sentence\tlabel"] + rows(n_train, False))
    write(folder / "dev.tsv", ["sentence\tlabel"] + rows(n_dev, False))
    if n_test:
        write(folder / "test.tsv", ["index\tsentence"] + rows(n_test, True))
    return folder


def squad_json(path: Path, *, version: str, n_paragraphs: int = 3, seed: int = 0,
               impossible_every: int = 0) -> Path:
    """A small SQuAD file: each question asks for a distinct word of its context."""
    rng = random.Random(seed)
    paragraphs = []
    for p in range(n_paragraphs):
        words = [rng.choice(WORDS) for _ in range(30)]
        context = "The " + " ".join(words) + ". Answer: Zeta-" + str(p) + " ends here."
        qas = []
        for q in range(3):
            qid = f"p{p}q{q}"
            if impossible_every and q % impossible_every == 0:
                qas.append({"id": qid, "question": f"what is missing {q}?", "answers": [],
                            "is_impossible": True})
                continue
            text = f"Zeta-{p}"
            start = context.index(text)
            qa = {"id": qid, "question": f"which zeta {q}?",
                  "answers": [{"text": text, "answer_start": start},
                              {"text": "the " + text if q == 1 else text, "answer_start": start}]}
            if version == "2.0":
                qa["is_impossible"] = False
            qas.append(qa)
        paragraphs.append({"context": context, "qas": qas})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": f"v{version}",
                                "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return path


def independent_glue_scores(task: str, rows: list[dict]) -> dict[str, float]:
    """A GLUE prediction file's scores (percent) by scikit-learn/scipy, not the project's code.

    Constant predictions score 0 correlation, the convention the project defines (scipy: NaN).
    """
    import numpy as np
    from scipy import stats
    from sklearn import metrics as skm

    def one(split_rows: list[dict]) -> dict[str, float]:
        y = [r["label"] for r in split_rows]
        p = [r["prediction"] for r in split_rows]
        if task == "STS-B":
            y, p = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
            if len(set(p)) < 2 or len(set(y)) < 2:
                return {"pearson": 0.0, "spearman": 0.0}
            return {"pearson": 100 * stats.pearsonr(p, y)[0],
                    "spearman": 100 * stats.spearmanr(p, y)[0]}
        y, p = [str(v) for v in y], [str(v) for v in p]
        if task == "CoLA":
            return {"mcc": 100 * skm.matthews_corrcoef(y, p)}
        out = {"accuracy": 100 * skm.accuracy_score(y, p)}
        if task in ("MRPC", "QQP"):
            out["f1"] = 100 * skm.f1_score(y, p, pos_label="1", zero_division=0)
        return out

    splits: dict[str, list[dict]] = {}
    for r in rows:
        splits.setdefault(r["split"], []).append(r)
    if task == "MNLI":
        suffix = {"dev_matched": "_m", "dev_mismatched": "_mm"}
        return {k + suffix[s]: v for s, rs in splits.items() for k, v in one(rs).items()}
    (only,) = splits.values()
    return one(only)
