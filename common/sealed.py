"""JSON files that carry their own checksum: ``manifest.json``, a dedup index's ``_index.json``,
a checkpoint's ``meta.json``.

Why. Every other artifact of a corpus is checked against something that names it: a shard
against the manifest's sha256, the tokenizer against the manifest's ``tokenizer.sha256``, a
rejected-part list against the manifest's ``rejected_lists``, an index part against
``_index.json``'s crc32, a stage's part list against its marker. The manifest (and an index's
``_index.json``) are the roots of those chains: nothing names them, so a byte changed in one
went unseen whenever the JSON still parsed. A flipped digit changed a shard's example count or
``seq_len`` (a training run then refused or misread an intact shard), an index's ``partitions``
(an append then probed the wrong parts: duplicates missed, silently).

Design. The file holds, beside its fields, ``"sha256"``: the sha256 of the object's canonical
JSON without that field (keys sorted, no whitespace, ASCII: ``canonical``). ``seal`` computes it
over the object exactly as a reader will parse it back (the pretty JSON is parsed once, so a
tuple or an integer dict key hashes as the list or string a reader sees) and writes the same
pretty JSON as before (``indent=2``, sorted keys) with the field added. ``unseal`` parses,
removes the field, recomputes and compares, and raises ``DamagedJSON`` (a ``ValueError``) in
one line naming the file when they differ.

Trade-offs. A checksum inside the file, rather than a sum file beside it: one object, one atomic
write, so the manifest stays the single commit point and a reader makes no second request (a
training rank reads the manifest at every start). Over the canonical form rather than the raw
bytes: the file stays human-readable JSON and a reader need not know where in the text the
field sits. Files without the field (every manifest written before this, and format 2/3 ones)
are read as before, unchecked. A flip inside the word ``sha256`` itself leaves an unchecked file
whose content is intact (the flip only renamed the field), which is harmless. The bytes are a
function of the content alone, so a rerun of the same build writes a byte-identical manifest.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

SEAL = "sha256"


class DamagedJSON(ValueError):
    """A sealed JSON file whose content does not match its own checksum."""


def canonical(obj: Any) -> bytes:
    """The bytes a seal covers: ``obj`` as compact, key-sorted, ASCII JSON."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def digest(obj: Any) -> str:
    return hashlib.sha256(canonical(obj)).hexdigest()


def seal(obj: dict[str, Any]) -> bytes:
    """``obj`` as pretty JSON (``indent=2``, sorted keys, a final newline) with ``"sha256"`` over
    its canonical form added. ``obj`` must not hold that key itself."""
    if SEAL in obj:
        raise ValueError(f"a sealed object cannot have its own {SEAL!r} field")
    plain = json.loads(json.dumps(obj, sort_keys=True))  # as a reader will see it
    plain[SEAL] = digest(plain)
    return (json.dumps(plain, indent=2, sort_keys=True) + "\n").encode()


def unseal(data: bytes, where: str, *, what: str = "file", fix: str = "") -> Any:
    """The parsed JSON of ``data`` (from ``where``), its seal checked and removed. An object
    without a seal (written before seals) is returned as it is. ``json.JSONDecodeError`` and
    ``UnicodeDecodeError`` pass through for the caller to name; a seal that does not match raises
    ``DamagedJSON`` naming ``where``, ``what`` it is and the ``fix``."""
    obj = json.loads(data)
    if not isinstance(obj, dict) or SEAL not in obj:
        return obj
    want = obj.pop(SEAL)
    got = digest(obj)
    if got != want:
        shown = want[:12] if isinstance(want, str) else repr(want)
        raise DamagedJSON(f"{where}: damaged {what}: its content's sha256 {got[:12]} differs from the "
                          f"{shown} it was written with (bytes changed after it was written)"
                          + (f"; {fix}" if fix else ""))
    return obj
