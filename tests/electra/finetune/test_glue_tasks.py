"""GLUE readers: the real files (exact counts), generated files in the official layouts, bad input."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from electra.finetune import glue_tasks
from electra.finetune.glue_tasks import GlueDataError, get_task, read_split

from .glue_files import HEADERS, glue_rows, write, write_task

REAL_GLUE = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "glue"

REAL_COUNTS = {"CoLA": (8551, 1043), "SST-2": (67349, 872), "MRPC": (3668, 408),
               "STS-B": (5749, 1500)}


@pytest.mark.parametrize("task", sorted(REAL_COUNTS))
def test_real_glue_files_exact_counts(task):
    if not (REAL_GLUE / task).is_dir():
        pytest.skip(f"real GLUE data not found at {REAL_GLUE} (only on the project's machines)")
    spec = get_task(task)
    train, dev = (read_split(spec, REAL_GLUE, s) for s in ("train", "dev"))
    assert (len(train), len(dev)) == REAL_COUNTS[task]
    for ex in train + dev:
        assert ex.text_a and (ex.text_b is not None) == (task in ("MRPC", "STS-B"))
        if spec.kind == "regression":
            assert 0.0 <= ex.label <= 5.0
        else:
            assert ex.label in spec.labels
    assert len({e.guid for e in dev}) == len(dev)  # ids identify rows


def test_real_files_first_rows():
    if not REAL_GLUE.is_dir():
        pytest.skip(f"real GLUE data not found at {REAL_GLUE}")
    cola = read_split("CoLA", REAL_GLUE, "dev")[0]
    assert cola.text_a == "The sailors rode the breeze clear of the rocks." and cola.label == "1"
    mrpc = read_split("MRPC", REAL_GLUE, "dev")[0]  # header behind a BOM is skipped
    assert mrpc.label == "1" and mrpc.text_a.startswith("He said the foodservice pie")
    stsb = read_split("STS-B", REAL_GLUE, "dev")[1]
    assert stsb.label == 4.75 and stsb.text_b == "A child is riding a horse."


@pytest.mark.parametrize("task", ["QQP", "MNLI", "QNLI", "RTE", "WNLI"])
def test_generated_official_layouts(tmp_path, task):
    write_task(tmp_path, task, n_train=12, n_dev=6, n_test=4)
    spec = get_task(task)
    train = read_split(spec, tmp_path, "train")
    assert len(train) == 12
    rng = random.Random(0)
    expected = glue_rows(task, 12, rng)[3].split("\t")  # same generator, same rows
    col = {"QQP": (3, 4), "MNLI": (8, 9)}.get(task, (1, 2))
    assert (train[3].text_a, train[3].text_b) == (expected[col[0]], expected[col[1]])
    assert train[3].guid == expected[0]
    assert {e.label for e in train} == set(spec.labels)
    for split in spec.eval_splits:
        assert len(read_split(spec, tmp_path, split)) == 6
    for split, path in glue_tasks.find_test_files(spec, tmp_path).items():
        test = glue_tasks.read_tsv(path, task=spec, layout=spec.test, split=split)
        assert len(test) == 4 and all(e.label is None and e.text_b for e in test)


def test_mnli_has_both_dev_sets_and_label_is_last_column(tmp_path):
    write_task(tmp_path, "MNLI", n_train=6, n_dev=3)
    spec = get_task("MNLI")
    assert spec.eval_splits == ("dev_matched", "dev_mismatched")
    dev = read_split(spec, tmp_path, "dev_mismatched")
    assert [e.label for e in dev] == ["contradiction", "entailment", "neutral"]


def test_headerless_cola_and_bom_mrpc(tmp_path):
    write(tmp_path / "CoLA" / "train.tsv", ["src\t1\t\tGood one .", "src\t0\t*\tbad one ."])
    ex = read_split("CoLA", tmp_path, "train")
    assert [(e.text_a, e.label, e.guid) for e in ex] == [("Good one .", "1", "train-1"),
                                                        ("bad one .", "0", "train-2")]
    write(tmp_path / "MRPC" / "dev.tsv",
          ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", '1\t1\t2\t"quoted\tplain'], bom=True)
    (m,) = read_split("MRPC", tmp_path, "dev")
    assert (m.text_a, m.text_b, m.label) == ('"quoted', "plain", "1")  # quotes kept verbatim


def test_malformed_row_names_file_and_line(tmp_path):
    write(tmp_path / "RTE" / "train.tsv",
          [HEADERS["RTE"], "0\ta\tb\tentailment", "1\tonly two fields"])
    with pytest.raises(GlueDataError, match=r"RTE/train\.tsv:3: malformed row: 2 .*expected 4"):
        read_split("RTE", tmp_path, "train")


def test_label_outside_label_set_is_an_error(tmp_path):
    write(tmp_path / "QNLI" / "train.tsv", [HEADERS["QNLI"], "0\tq\ts\tmaybe"])
    with pytest.raises(GlueDataError, match=r"train\.tsv:2: QNLI label 'maybe' not in"):
        read_split("QNLI", tmp_path, "train")
    write(tmp_path / "STS-B" / "train.tsv",
          ["\t".join("abcdefghij"), "0\tg\tf\ty\to\ts\ts\ta\tb\t5.5"])
    with pytest.raises(GlueDataError, match=r"train\.tsv:2: STS-B score 5.5 outside"):
        read_split("STS-B", tmp_path, "train")
    write(tmp_path / "STS-B" / "dev.tsv", ["\t".join("abcdefghij"), "0\tg\tf\ty\to\ts\ts\ta\tb\tx"])
    with pytest.raises(GlueDataError, match=r"dev\.tsv:2: STS-B score 'x' is not a number"):
        read_split("STS-B", tmp_path, "dev")


def test_missing_folder_and_file_list_what_is_expected(tmp_path):
    with pytest.raises(GlueDataError, match=r"MNLI.*task folder missing.*train\.tsv, "
                                            r"dev_matched\.tsv, dev_mismatched\.tsv"):
        read_split("MNLI", tmp_path, "train")
    write(tmp_path / "WNLI" / "train.tsv", [HEADERS["WNLI"]])
    with pytest.raises(GlueDataError, match=r"dev\.tsv: file missing; expected train\.tsv, "
                                            r"dev\.tsv.*found: train\.tsv"):
        read_split("WNLI", tmp_path, "dev")


def test_unknown_task_lists_known_ones():
    with pytest.raises(GlueDataError, match=r"unknown GLUE task 'SST-5'; known tasks: CoLA, "
                                            r"SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI"):
        get_task("SST-5")
    assert get_task("sst2").name == "SST-2" and get_task("sts-b").name == "STS-B"
    assert [t.name for t in glue_tasks.parse_task_list("CoLA, sst-2,CoLA")] == ["CoLA", "SST-2"]


def test_task_registry_matches_the_paper():
    assert {t: get_task(t).epochs for t in glue_tasks.TASKS} == {
        **{t: 3 for t in glue_tasks.TASKS}, "RTE": 10, "STS-B": 10}
    assert {t for t in glue_tasks.TASKS if get_task(t).both_orders} == {"MRPC", "STS-B"}
    assert get_task("STS-B").num_labels == 1 and get_task("MNLI").num_labels == 3


def test_ax_diagnostic_reader(tmp_path):
    assert glue_tasks.read_ax(tmp_path) is None
    write(tmp_path / "diagnostic" / "diagnostic.tsv",
          ["index\tsentence1\tsentence2", "0\ta b\tc d", "1\te\tf"])
    path, rows = glue_tasks.read_ax(tmp_path)
    assert path.name == "diagnostic.tsv" and [r.guid for r in rows] == ["0", "1"]
