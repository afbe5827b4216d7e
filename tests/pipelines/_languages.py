"""Real non-English text for tests: the committed assets and, when extracted, the held-out set.

``documents(lang)`` reads ``tests/assets/languages/<lang>.txt`` (written by
``benchmarks/corpus/language_texts.py --write-assets``; sources and licences in ``SOURCES.md`` there):
~30 documents per development language, separated by lines holding only ``%%%``. Prose sections
of the translated Debian Reference (the Debian FAQ for ``ko``) for the ``PROSE_LANGS``, fortune-cookie entries for the
``FORTUNE_LANGS``.

``heldout_documents(lang)`` reads ``bench_out/languages/heldout/<lang>.jsonl``, which only exists
after ``python benchmarks/corpus/language_texts.py`` has run on this machine (it needs the .deb files).
Held-out text is for acceptance checks, never for calibration or committed assets; a test that
uses it skips when it is absent::

    docs = heldout_documents("ja")
    if docs is None:
        pytest.skip(HELDOUT_MISSING)
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "tests" / "assets" / "languages"
HELDOUT = ROOT / "bench_out" / "languages" / "heldout"
SEPARATOR = "%%%"

PROSE_LANGS = ("zh-cn", "zh-tw", "fr", "de", "es", "pt", "ko")
FORTUNE_LANGS = ("zh-fortunes", "de-fortunes")
LANGS = PROSE_LANGS + FORTUNE_LANGS  # the development languages, i.e. the committed assets
HELDOUT_LANGS = ("ja", "it", "it-fortunes", "ru-fortunes")
# The script most letters of each language's documents are in (see tests' ``dominant_script``).
SCRIPT = {"zh-cn": "Han", "zh-tw": "Han", "zh-fortunes": "Han", "fr": "Latin", "de": "Latin",
          "es": "Latin", "pt": "Latin", "de-fortunes": "Latin", "ko": "Hangul", "ja": "Japanese",
          "it": "Latin", "it-fortunes": "Latin", "ru-fortunes": "Cyrillic"}
HELDOUT_MISSING = ("held-out language texts absent: run `python benchmarks/corpus/language_texts.py` "
                   "(needs the Debian packages in /tmp/deb, or --fetch)")


def asset_path(lang: str) -> Path:
    """The committed asset file of a development language."""
    if lang not in LANGS:
        raise ValueError(f"{lang!r} is not a development language ({', '.join(LANGS)})")
    return ASSETS / f"{lang}.txt"


def documents(lang: str) -> list[str]:
    """The asset's documents, in file order, each stripped of surrounding blank lines."""
    text = asset_path(lang).read_text(encoding="utf-8")
    docs = []
    current: list[str] = []
    for line in text.splitlines():
        if line == SEPARATOR:
            docs.append("\n".join(current).strip("\n"))
            current = []
        else:
            current.append(line)
    docs.append("\n".join(current).strip("\n"))
    return [d for d in docs if d.strip()]


def heldout_documents(lang: str, root: Path | None = None) -> list[str] | None:
    """The held-out documents of ``lang`` (texts only), or None when not extracted here."""
    if lang not in HELDOUT_LANGS:
        raise ValueError(f"{lang!r} is not a held-out language ({', '.join(HELDOUT_LANGS)})")
    path = (root or HELDOUT) / f"{lang}.jsonl"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]
