"""First contact with build-corpus, through the real CLI (``python -m cli.build_corpus`` in a
subprocess: its own Prefect server, local Ray): a source with no usable text ends in one
``build-corpus: error:`` line, exit 2, naming the reasons with counts and the quarantine folder,
and no traceback; one book that draws the validation split ends in a loud warning naming
``--validation-fraction``."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from common.hashing import stable_uid
from pipelines import schema
from pipelines.config import PackConfig
from pipelines.ingest import resolve_sources
from pipelines.pack import is_validation
from synthetic.prose import documents
from tests._procs import run_in_group

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def build_corpus(*args: str, timeout: float = 600) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the CLI; its process group (Prefect server, Ray) killed after."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    done = run_in_group([sys.executable, "-m", "cli.build_corpus", *args], cwd=str(ROOT), env=env,
                        timeout=timeout, separate_stderr=True)
    return done.returncode, done.output, done.stderr


def quarantined(out: Path, stage: str) -> list[dict]:
    import zstandard

    rows = []
    for part in sorted(out.glob(f"{schema.REJECTED_DIR}/{stage}-*/*.jsonl.zst")):
        rows += [json.loads(line) for line in zstandard.decompress(part.read_bytes()).decode().splitlines()]
    return rows


def one_error_line(code: int, stdout: str, stderr: str) -> str:
    assert code == 2, stdout[-2000:] + stderr[-4000:]
    assert "Traceback" not in stdout + stderr, stderr[-4000:]
    errors = [line for line in stderr.splitlines() if line.startswith("build-corpus: error:")]
    assert len(errors) == 1, stderr[-4000:]
    return errors[0]


def test_empty_sources_end_in_one_line_naming_the_files_before_anything_starts(tmp_path):
    """Every file empty: the pre-flight's line, naming the files, before a server or Ray starts."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(3):
        (raw / f"f{i}.txt").write_bytes(b"")
    (raw / "blank.txt").write_bytes(b"\n\n  \n")
    out = tmp_path / "out"
    code, stdout, stderr = build_corpus("--source", str(raw), "--out", str(out))
    line = one_error_line(code, stdout, stderr)
    assert line.startswith("build-corpus: error: no source file holds a document (4 files; empty_file: "
                           "raw/blank.txt, raw/f0.txt, raw/f1.txt and 1 more); likely cause: the files hold no "
                           "text"), line
    assert "Prefect" not in stdout + stderr and not out.exists()


def test_binary_sources_too_many_to_read_first_end_in_the_stage_line_naming_the_quarantine(tmp_path):
    """More files than the pre-flight reads: the ingest stage judges them, and its line (reasons,
    counts, the quarantine) is the one error line; nothing is lost from the quarantine."""
    from pipelines.orchestration.preflight import READ_FILES

    raw = tmp_path / "raw"
    raw.mkdir()
    n = READ_FILES + 1
    for i in range(n):  # control bytes and no line break: one document per file
        (raw / f"f{i:03d}.txt").write_bytes(bytes([0, i % 250 + 1, 200, 7]) * 750)
    out = tmp_path / "out"
    line = one_error_line(*build_corpus("--source", str(raw), "--out", str(out)))
    assert line.startswith(f"build-corpus: error: ingest kept 0 of {n} documents in {n} files, every one rejected: "
                           f"binary {n}; likely cause: "), line
    folder = line.rsplit("each dropped document and its reason: ", 1)[1]
    assert folder.startswith(str(out / schema.REJECTED_DIR / "ingest-")) and Path(folder).is_dir()
    rows = quarantined(out, "ingest")  # nothing lost: every file is there with its reason
    assert sorted(r["id"].split(":")[0] for r in rows) == [f"raw/f{i:03d}.txt" for i in range(n)]
    assert {r["reason"] for r in rows} == {"ingest:binary"}
    assert not (out / schema.MANIFEST_NAME).exists()


def test_documents_all_filtered_end_in_one_line_with_rules_languages_and_the_quarantine(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    # English documents of twelve words each: Gopher's 50-word minimum drops every one.
    (raw / "short.txt").write_text("\n\n".join(" ".join(d.split()[:12]) for d in documents(40, seed=1)))
    out = tmp_path / "out"
    line = one_error_line(*build_corpus("--source", str(raw), "--out", str(out)))
    assert line.startswith("build-corpus: error: filter kept 0 of 40 documents; "
                           "dropped by gopher_quality:min_doc_words 40; dropped documents' languages (all 40): "
                           ), line
    assert "likely cause: the rule gopher_quality.min_doc_words drops nearly all en text of this kind" in line
    assert "fix: relax filter.by_language.en.gopher_quality.min_doc_words" in line
    assert line.endswith("/") and f"reason: {out / schema.REJECTED_DIR}/filter-" in line
    assert len(quarantined(out, "filter")) == 40


def validation_name(folder: Path) -> str:
    """A file name whose one document draws the validation split under the default pack config."""
    cfg = PackConfig()
    for i in range(10_000):
        path = folder / f"book{i}.txt"
        path.write_text("x")
        name = resolve_sources([str(path)]).names[0]
        path.unlink()
        if is_validation(np.array([stable_uid(f"{name}:0")], dtype=np.int64), cfg)[0]:
            return path.name
    raise AssertionError("no name draws validation")


def test_one_book_in_validation_warns_naming_the_flag(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    body = "\n\n".join(documents(60, seed=2))
    (raw / validation_name(raw)).write_text(
        "The Project Gutenberg EBook of A Test\n\n*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***\n"
        + body + "\n\nEnd of the Project Gutenberg EBook of A Test\n\nProject Gutenberg-tm licence\n")
    out = tmp_path / "out"
    code, stdout, stderr = build_corpus("--source", str(raw), "--out", str(out), "--profile", "books",
                                        "--vocab-size", "800")
    assert code == 0, stderr[-4000:]
    assert "train: 0 documents" in stdout
    warnings = [line for line in stdout.splitlines() if line.startswith("warning: train: no examples")]
    assert len(warnings) == 1, stdout
    assert "1 of 1 document went to validation" in warnings[0]
    assert "fix: rebuild with --validation-fraction 0" in warnings[0]
    manifest = schema.Manifest.load(str(out))  # nothing finished is lost: the corpus is there
    assert manifest.splits["validation"].num_documents == 1 and manifest.warnings[0].startswith("train: no examples")
    assert manifest.stats["ingest"]["boilerplate"] == {"headers": 1, "footers": 1, "bytes_removed": len(
        "The Project Gutenberg EBook of A Test\n\n*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***\n")
        + len("End of the Project Gutenberg EBook of A Test\n\nProject Gutenberg-tm licence")}
