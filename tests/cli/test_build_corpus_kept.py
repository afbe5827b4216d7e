"""``electra-build-corpus`` on plain text of one long hard-wrapped text (issue 48): the ``web``
profile cuts it at blank lines into paragraphs that ``gopher_quality:min_doc_words`` drops, and
a build that keeps under ``filter.min_kept_share`` (5%) of its documents is one error line, exit 2,
naming the rule and the profile that fits (``--profile books``), instead of "corpus written" with a
51-token vocabulary. ``--set filter.min_kept_share=0`` builds it anyway, from the filter stage the
failed build cached, the line then a warning; ``--profile books`` builds it as it should be built.
The command line runs in-process (``cli.build_corpus.main``), on the shared local Ray."""
from __future__ import annotations

import json
import textwrap

from cli.build_corpus import main
from pipelines import schema
from tests.pipelines._languages import documents


def guide(folder):
    """One long Spanish text (the Debian Reference asset) hard-wrapped at 72 columns in paragraphs
    of 20 words, after one paragraph long enough for every web filter (kept: 1 of ~120)."""
    docs = documents("es")
    words = " ".join(docs[1:]).split()
    paragraphs = [" ".join(docs[0].split())]  # one line of 121 words and 6 sentences: kept
    paragraphs += [textwrap.fill(" ".join(words[i:i + 20]), width=72) for i in range(0, len(words) - 19, 20)]
    folder.mkdir()
    (folder / "guia.txt").write_text("\n\n".join(paragraphs) + "\n")
    return len(paragraphs)


def test_plain_text_kept_at_one_percent_is_one_error_line_until_allowed(tmp_path, ray_local, capsys):
    n = guide(tmp_path / "raw")
    out = tmp_path / "out"
    argv = ["--source", str(tmp_path / "raw"), "--out", str(out), "--language", "es", "--vocab-size", "300",
            "--seq-len", "64"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("build-corpus: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err[-4000:]
    line = errors[0]
    assert line.startswith(f"build-corpus: error: filter kept 1 of {n} documents; dropped by gopher_quality:"
                           f"min_doc_words {n - 1}; dropped documents' languages (all {n - 1}): es "), line
    assert ("likely cause: ingest.text_mode=blank_line made each blank-line block of the plain text (guia.txt: "
            "hard-wrapped paragraphs, median ") in line
    assert "fix: --profile books (a whole file is one document), or --set ingest.text_mode=file; " in line
    assert "--language en" not in line
    assert line.endswith(f"; kept {1 / n:.2%}, below filter.min_kept_share=0.05: to build anyway, "
                         "--set filter.min_kept_share=0")
    assert not (out / schema.MANIFEST_NAME).exists()
    (marker,) = out.glob(f"{schema.WORK_DIR}/filter-*/_SUCCESS")  # the filter stage finished and is kept
    filtered = json.loads(marker.read_text())["stats"]
    assert sum(c["kept"] + c["dropped"] for c in filtered["languages"].values()) == n  # every drop counted

    # Allowed: the same build, from the cached filter stage; the line is a warning.
    assert main([*argv, "--set", "filter.min_kept_share=0"]) == 0
    printed = capsys.readouterr().out.splitlines()
    manifest = schema.Manifest.load(str(out))
    assert manifest.stats["filter"] == filtered  # not filtered again: the record of the first run
    warned = [w for w in manifest.warnings if w.startswith(f"filter kept 1 of {n} documents")]
    assert len(warned) == 1 and "--profile books" in warned[0]
    assert f"warning: {warned[0]}" in printed
    # The ingest stage said it first, from the file's first bytes, before filtering
    (hint,) = manifest.stats["ingest"]["warnings"]
    assert hint.startswith("raw/guia.txt: hard-wrapped text (lines broken at about ") and "--profile books" in hint

    books = tmp_path / "books"
    assert main([*argv[:2], "--out", str(books), *argv[4:], "--profile", "books"]) == 0
    capsys.readouterr()
    manifest = schema.Manifest.load(str(books))
    assert manifest.stats["filter"]["documents_out"] == 1 and manifest.languages == {"es": {"kept": 1, "dropped": 0}}
    assert not any(w.startswith("filter kept") for w in manifest.warnings)
