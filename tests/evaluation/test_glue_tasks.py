"""GLUE readers: the real files (exact counts), generated files in the official layouts, bad input."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from evaluation import glue_tasks
from evaluation.glue_tasks import GlueDataError, get_task, read_split

from .glue_files import HEADERS, glue_rows, write, write_task

REAL_GLUE = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "glue"

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
    with pytest.raises(GlueDataError, match=r"unknown GLUE task 'SST-5'; known tasks: ") as err:
        get_task("SST-5")
    known = str(err.value).split("known tasks: ")[1].split(", ")
    assert known == sorted(glue_tasks.TASKS, key=str.lower)  # by name, whatever the file system says
    assert {"CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI"} <= set(known)
    assert get_task("sst2").name == "SST-2" and get_task("sts-b").name == "STS-B"
    assert [t.name for t in glue_tasks.parse_task_list("CoLA, sst-2,CoLA")] == ["CoLA", "SST-2"]


GLUE = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")


def test_task_registry_matches_the_paper():
    assert {t: get_task(t).epochs for t in GLUE} == {**{t: 3 for t in GLUE}, "RTE": 10, "STS-B": 10}
    assert {t for t in GLUE if get_task(t).both_orders} == {"MRPC", "STS-B"}
    assert {t for t in GLUE if get_task(t).skip_malformed} == {"QQP", "MNLI"}
    assert get_task("STS-B").num_labels == 1 and get_task("MNLI").num_labels == 3


def test_ax_and_wnli_test_sets_predicted_by_mnli(tmp_path):
    ax, wnli = get_task("MNLI").also_predicts
    assert glue_tasks.read_extra(ax, tmp_path) is None
    write(tmp_path / "diagnostic" / "diagnostic.tsv",
          ["index\tsentence1\tsentence2", "0\ta b\tc d", "1\te\tf"])
    write(tmp_path / "AX" / "AX.tsv", ["index\tsentence1\tsentence2", "0\ta\tb"])  # second choice
    path, rows = glue_tasks.read_extra(ax, tmp_path)
    assert path.name == "diagnostic.tsv" and [r.guid for r in rows] == ["0", "1"]
    assert (rows[0].text_a, rows[0].text_b, rows[0].label) == ("a b", "c d", None)
    write_task(tmp_path, "WNLI", n_train=2, n_dev=2, n_test=3)
    path, rows = glue_tasks.read_extra(wnli, tmp_path)
    assert path == tmp_path / "WNLI" / "test.tsv" and len(rows) == 3
    assert wnli.relabel == {"entailment": "1", "contradiction": "0", "neutral": "0"}


@pytest.mark.parametrize("ending", ["\n\n", "\n\n\n", "\r\n\r\n", "\n \n"])
def test_trailing_blank_lines_are_not_rows(tmp_path, ending):
    path = tmp_path / "RTE" / "train.tsv"
    path.parent.mkdir()
    path.write_bytes(("\n".join([HEADERS["RTE"], "0\ta\tb\tentailment", "1\tc\td\tnot_entailment"])
                      + ending).encode())
    assert [(e.guid, e.label) for e in read_split("RTE", tmp_path, "train")] == [
        ("0", "entailment"), ("1", "not_entailment")]


def test_blank_line_inside_a_strict_task_is_an_error(tmp_path):
    write(tmp_path / "RTE" / "train.tsv", [HEADERS["RTE"], "0\ta\tb\tentailment", "",
                                          "1\tc\td\tentailment"])
    with pytest.raises(GlueDataError, match=r"RTE/train\.tsv:3: malformed row: 1 .*expected 4"):
        glue_tasks.load_split("RTE", tmp_path, "train")


def _break_rows(path: Path, broken: dict[int, str]) -> list[str]:
    """Insert ``broken`` rows before the given 0-based data-row positions; the good rows."""
    lines = path.read_text().split("\n")[:-1]
    header, good = lines[0], lines[1:]
    out = [header]
    for i, row in enumerate(good):
        if i in broken:
            out.append(broken[i])
        out.append(row)
    write(path, out)
    return good


def test_qqp_malformed_rows_are_skipped_and_counted(tmp_path):
    # As in the official QQP download: a question holding a newline splits one row into two
    # lines (4 and 3 fields); also a row with a stray extra tab (7 fields).
    write_task(tmp_path, "QQP", n_train=10, n_dev=4, n_test=3)
    train = tmp_path / "QQP" / "train.tsv"
    good = _break_rows(train, {2: "900\t1\t2\twhy is the\nsky blue?\tok\t1",
                               7: "901\t3\t4\ta\tb\t0\textra"})
    split = glue_tasks.load_split("QQP", tmp_path, "train")
    assert [e.guid for e in split.examples] == [r.split("\t")[0] for r in good]
    assert read_split("QQP", tmp_path, "train") == split.examples
    # header is line 1; broken rows sit before data rows 2 and 7 (the first one spans 2 lines)
    assert [(r.line, r.reason, r.detail) for r in split.skipped] == [
        (4, "malformed-row", "4 tab-separated fields, expected 6"),
        (5, "malformed-row", "3 tab-separated fields, expected 6"),
        (11, "malformed-row", "7 tab-separated fields, expected 6")]
    assert all(r.path == str(train) for r in split.skipped)
    summary = glue_tasks.skipped_summary({"train": split})
    assert summary == {"train": {"path": str(train), "skipped": 3,
                                 "rows": [r.to_dict() for r in split.skipped]}}
    assert glue_tasks.skipped_summary({"dev": glue_tasks.load_split("QQP", tmp_path, "dev")}) == {}
    # test files too, when read with the skipped rows kept; the strict reader refuses them
    test = tmp_path / "QQP" / "test.tsv"
    _break_rows(test, {1: "77\tonly a question"})
    spec = get_task("QQP")
    loaded = glue_tasks.load_tsv(test, task=spec, layout=spec.test, split="test")
    assert len(loaded.examples) == 3 and [r.line for r in loaded.skipped] == [3]
    with pytest.raises(GlueDataError, match=r"QQP/test\.tsv:3: malformed row"):
        glue_tasks.read_tsv(test, task=spec, layout=spec.test, split="test")


def test_mnli_malformed_rows_are_skipped_on_every_split(tmp_path):
    write_task(tmp_path, "MNLI", n_train=6, n_dev=3)
    _break_rows(tmp_path / "MNLI" / "dev_matched.tsv", {0: "bad\trow"})
    split = glue_tasks.load_split("MNLI", tmp_path, "dev_matched")
    assert len(split.examples) == 3 and [(r.line, r.detail) for r in split.skipped] == [
        (2, "2 tab-separated fields, expected 12")]
    assert glue_tasks.load_split("MNLI", tmp_path, "dev_mismatched").skipped == []
    # a label outside the label set is still an error, never a skip
    _break_rows(tmp_path / "MNLI" / "train.tsv",
                {0: "\t".join(["9"] * 10 + ["maybe", "maybe"])})
    with pytest.raises(GlueDataError, match=r"train\.tsv:2: MNLI label 'maybe' not in"):
        read_split("MNLI", tmp_path, "train")


@pytest.mark.parametrize("task", ["MRPC", "STS-B"])
def test_both_orders_training_examples_hold_every_pair_swapped(tmp_path, task):
    write_task(tmp_path, task, n_train=8, n_dev=2)
    spec = get_task(task)
    originals = read_split(spec, tmp_path, "train")
    train = glue_tasks.training_examples(spec, originals)
    assert len(train) == 2 * len(originals)
    pairs = [(e.text_a, e.text_b, e.label) for e in train]
    for e in originals:  # each read pair is trained on in both orders, with its own label
        assert (e.text_a, e.text_b, e.label) in pairs and (e.text_b, e.text_a, e.label) in pairs
    assert {e.guid for e in train} == {e.guid for e in originals} | {
        e.guid + "-swap" for e in originals}
    rte = get_task("RTE")
    write_task(tmp_path, "RTE", n_train=4, n_dev=2)
    rte_train = read_split(rte, tmp_path, "train")
    assert glue_tasks.training_examples(rte, rte_train) == rte_train
