"""The protected set: every n-gram of the evaluation sets' dev and test texts, as sorted hashes.

``decontaminate.paths`` names what to protect; each entry is one of

* a GLUE-format task folder (``glue_data/CoLA``): its ``dev*.tsv`` and ``test*.tsv`` files, task
  named after the folder;
* a folder of such folders (``glue_data``): each subfolder with dev or test files is a task;
* a SQuAD JSON file (``dev-v2.0.json``), or a folder holding ``dev*.json`` / ``test*.json``: the
  contexts, questions and answers, task ``squad-v<version>`` from the file's ``version`` (``squad``
  without one);
* a single ``.tsv`` file: task named after its folder.

Every cell of a TSV row is a text (ids and labels are too short to make an n-gram, and a header
cell is one word), so the reader needs no per-task column table and a new GLUE-format task works
as is. Windows never cross cells: the two sentences of a pair are two texts.

``build`` reads each file once, hashes every window of ``n`` tokens (``ngrams``), and returns the
sorted unique hashes with, for each, the file it came from first: 8 + 4 bytes per n-gram. The
filter stage builds it once per build on the driver and hands it to every worker through Ray's
object store; workers never read the evaluation files. ``fingerprint`` (the files' sha256) goes
into the filter stage's cache key, so an edited dev set reruns the filtering.
"""
from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common import storage
from common.config import ConfigError
from common.hashing import sha256_bytes
from pipelines.decontaminate.ngrams import tokens, window_hashes


@dataclass(frozen=True)
class ProtectedFile:
    uri: str
    task: str
    kind: str  # "glue" or "squad"


@dataclass
class ProtectedSet:
    n: int
    hashes: np.ndarray  # uint64, sorted, unique
    source: np.ndarray  # int32: index into ``files`` of each hash's first file
    files: list[dict[str, Any]] = field(default_factory=list)  # uri, task, sha256, bytes, texts, ngrams

    def record(self) -> dict[str, Any]:
        """What the manifest keeps: the protected files with their hashes, and the set's size."""
        return {"ngram": self.n, "ngrams": int(len(self.hashes)), "files": self.files}

    def warnings(self) -> list[str]:
        """Tasks this set cannot protect: none of their texts is ``n`` tokens long."""
        empty = sorted({f["task"] for f in self.files} - {f["task"] for f in self.files if f["ngrams"]})
        return [f"decontamination: no text of {task} has {self.n} tokens; nothing of it is protected"
                for task in empty]


def _is_eval_file(name: str, suffix: str) -> bool:
    base = posixpath.basename(name)
    return base.endswith(suffix) and (base.startswith("dev") or base.startswith("test"))


def discover(paths: list[str]) -> list[ProtectedFile]:
    """The dev and test files ``paths`` name (see the module docstring), in a fixed order."""
    found: list[ProtectedFile] = []
    for path in paths:
        if path.endswith((".json", ".tsv")) and not storage.exists(path):
            raise ConfigError(f"decontaminate.paths: {path} does not exist")
        if path.endswith(".json"):
            found.append(ProtectedFile(path, "", "squad"))
            continue
        if path.endswith(".tsv"):
            where = os.path.abspath(path) if storage.is_local(path) else path  # "dev.tsv" run in its folder
            found.append(ProtectedFile(path, posixpath.basename(posixpath.dirname(where)), "glue"))
            continue
        found += _folder_files(path)
    return found


def _folder_files(path: str) -> list[ProtectedFile]:
    """A task folder's dev/test files, or those of its task subfolders."""
    if not storage.exists(path):
        raise ConfigError(f"decontaminate.paths: {path} does not exist")
    rel = storage.find(path)
    top = path.rstrip("/")
    # Named after the folder as given or, for a local ".", as it is called.
    name = posixpath.basename(os.path.abspath(top) if storage.is_local(top) else top)
    here = _task_files(top, name, [r for r in rel if "/" not in r])
    for sub in sorted({r.split("/")[0] for r in rel if r.count("/") == 1}):  # both levels, always
        here += _task_files(storage.join(top, sub), sub, [r.split("/")[1] for r in rel
                                                          if r.startswith(sub + "/") and r.count("/") == 1])
    if not here:
        raise ConfigError(f"decontaminate.paths: {path} holds no dev*/test* .tsv or SQuAD .json files "
                          "(expected a GLUE task folder, a folder of them, or a SQuAD JSON file)")
    return here


def _task_files(folder: str, task: str, names: list[str]) -> list[ProtectedFile]:
    tsv = [ProtectedFile(storage.join(folder, e), task, "glue") for e in sorted(names) if _is_eval_file(e, ".tsv")]
    squad = [ProtectedFile(storage.join(folder, e), "", "squad") for e in sorted(names) if _is_eval_file(e, ".json")]
    return tsv + squad


def texts_of(f: ProtectedFile, data: bytes) -> tuple[str, Iterator[str]]:
    """(task name, the texts) of one file's bytes; a file that is not UTF-8 or not of its format
    is a one-line ``ConfigError`` naming it."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"decontaminate.paths: {f.uri} is not UTF-8 text ({exc})") from None
    if f.kind == "glue":
        return f.task, [cell for line in text.splitlines() for cell in line.split("\t")]
    try:
        doc = json.loads(text)
        version = str(doc.get("version") or "").removeprefix("v")
        texts = []
        for article in doc["data"]:
            for para in article.get("paragraphs") or []:
                texts.append(str(para.get("context") or ""))
                for qa in para.get("qas") or []:
                    texts.append(str(qa.get("question") or ""))
                    texts += [str(a.get("text") or "") for a in (qa.get("answers") or []) + (qa.get("plausible_answers") or [])]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"decontaminate.paths: {f.uri} is not a SQuAD JSON file "
                          f"(data[].paragraphs[].context/qas; {type(exc).__name__}: {exc})") from None
    return (f"squad-v{version}" if version else "squad"), texts


def build(paths: list[str], n: int) -> ProtectedSet:
    """Read every file once and hash its n-grams (see the module docstring)."""
    files = discover(paths)
    chunks, sources, records = [], [], []
    for i, f in enumerate(files):
        data = storage.read_bytes(f.uri)
        task, texts = texts_of(f, data)
        hashes = [h for h in (window_hashes(tokens(t), n) for t in texts) if len(h)]
        h = np.unique(np.concatenate(hashes)) if hashes else np.zeros(0, np.uint64)
        chunks.append(h)
        sources.append(np.full(len(h), i, dtype=np.int32))
        # texts: TSV cells or SQuAD strings; with_ngram: those long enough to hold a window
        records.append({"uri": f.uri, "task": task, "sha256": sha256_bytes(data), "bytes": len(data),
                        "texts": len(texts), "with_ngram": len(hashes), "ngrams": int(len(h))})
    all_hashes = np.concatenate(chunks) if chunks else np.zeros(0, np.uint64)
    all_sources = np.concatenate(sources) if sources else np.zeros(0, np.int32)
    # The first file (in the order given) that holds an n-gram owns it.
    order = np.argsort(all_hashes, kind="stable")
    hashes, first = np.unique(all_hashes[order], return_index=True)
    return ProtectedSet(n=n, hashes=hashes, source=all_sources[order][first], files=records)


def fingerprint(paths: list[str]) -> list[tuple[str, str]]:
    """(uri, sha256) of every protected file: what the filter stage's key covers. Each file is
    also parsed here, at planning, so a bad one fails before any stage runs."""
    out = []
    for f in discover(paths):
        data = storage.read_bytes(f.uri)
        texts_of(f, data)
        out.append((f.uri, sha256_bytes(data)))
    return out
