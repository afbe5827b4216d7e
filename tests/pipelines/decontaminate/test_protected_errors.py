"""What the protected set does with mixed and bad input: a folder's own files and its task
subfolders are both protected; a file that is not UTF-8 or not SQuAD-shaped is a one-line
``ConfigError`` naming it, raised when the build is planned (``fingerprint``), before any stage;
a task none of whose texts is 13 tokens long is a warning; a ``paths`` that is not a list is
refused before ``--decontaminate`` adds to it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.config import ConfigError
from pipelines.decontaminate.protected import build, discover, fingerprint

LONG = " ".join(f"word{i}" for i in range(20))


def _tsv(path: Path, cells: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("index\tsentence\n" + "".join(f"{i}\t{c}\n" for i, c in enumerate(cells)))


def test_a_folder_with_its_own_files_and_task_subfolders_protects_both(tmp_path):
    mixed = tmp_path / "mix"
    mixed.mkdir()
    (mixed / "dev-v2.0.json").write_text(json.dumps({"version": "v2.0", "data": []}))
    _tsv(mixed / "CoLA" / "dev.tsv", [LONG])
    found = {(Path(f.uri).name, f.task or "squad") for f in discover([str(mixed)])}
    assert found == {("dev-v2.0.json", "squad"), ("dev.tsv", "CoLA")}


@pytest.mark.parametrize("content", [
    {"version": "1.1", "data": {"title": "not a list"}},
    {"data": [{"paragraphs": [{"context": LONG, "qas": [{"question": "q", "answers": None}]}]}, "oops"]},
    {"data": [{"paragraphs": "not a list of paragraphs"}]},
])
def test_a_malformed_squad_file_fails_at_planning_in_one_line(tmp_path, content):
    bad = tmp_path / "squad" / "dev.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(content))
    with pytest.raises(ConfigError, match=f"{bad} is not a SQuAD JSON file") as err:
        fingerprint([str(bad)])
    assert "\n" not in str(err.value)


def test_a_file_that_is_not_utf8_fails_at_planning_naming_it(tmp_path):
    bad = tmp_path / "MRPC" / "dev.tsv"
    bad.parent.mkdir()
    bad.write_bytes(("index\tsentence\n0\t" + LONG + "\n").encode("utf-16"))
    with pytest.raises(ConfigError, match=f"{bad} is not UTF-8 text"):
        fingerprint([str(tmp_path / "MRPC")])


def test_a_task_with_no_text_long_enough_is_a_warning(tmp_path):
    _tsv(tmp_path / "glue" / "CoLA" / "dev.tsv", ["a short sentence", "another one"])
    _tsv(tmp_path / "glue" / "MRPC" / "dev.tsv", [LONG])
    protected = build([str(tmp_path / "glue")], 13)
    assert {f["task"]: (f["texts"], f["with_ngram"]) for f in protected.files} == {"CoLA": (6, 0), "MRPC": (4, 1)}
    assert protected.warnings() == ["decontamination: no text of CoLA has 13 tokens; nothing of it is protected"]


def test_paths_that_are_not_a_list_are_refused_before_the_flag_adds_to_them():
    from pipelines.corpus_job import corpus_config

    with pytest.raises(ConfigError, match="decontaminate.paths: expected a list"):
        corpus_config(config={"decontaminate": {"paths": "glue"}}, decontaminate=["mix"])
