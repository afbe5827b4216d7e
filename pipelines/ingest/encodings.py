"""Text encodings for ingestion: per-document decoding with a counted fallback, UTF-16/32 by BOM,
and a binary test that looks at every document.

**Decoding a document** (``decode``): strict UTF-8 first. A document that is not valid UTF-8 is
either damaged UTF-8 or text in a legacy charset. It counts as damaged UTF-8, and stays an
``ingest:invalid_utf8`` reject, when it also holds valid multi-byte UTF-8 sequences (mixing is
what broken UTF-8 looks like, and legacy text almost never forms them). Otherwise
``charset-normalizer`` judges the document's own bytes: the configured ``fallback_encoding``
(cp1252 by default) is asked first and used when the detector finds its decoding plausible (a
low "chaos" score), because on short Western text an open detection cannot tell cp1250, cp1252,
cp1257 or even cp932 apart and picks one at random; only when the fallback reads as mojibake
(cp1251 Cyrillic read as cp1252, say) does the open detection choose. A document of a few
words (under ``MIN_DETECT_BYTES``) is not judged at all: any answer would be a guess, so the
configured fallback is used whenever it can decode the bytes. The encoding actually used comes back with the text and is counted per
encoding in the ingest stage's statistics, so a fallback is never silent. Detection looks at one
document only (never at its neighbours), so a document decodes the same whether its file is read
whole or as byte ranges; the price is one detector call per non-UTF-8 document.

**UTF-16/32 with a byte-order mark** (``bom_codec``, ``Transcoder``): the file is transcoded to
UTF-8 while streaming (an incremental decoder, so memory stays one chunk) and split like any
UTF-8 file. Offsets (hence ids) of such a file are byte offsets in its UTF-8 transcoding, the BOM
counted as the 3 bytes of a UTF-8 BOM. A lone surrogate passes through as an invalid UTF-8
sequence, so only the document holding it is rejected. UTF-16 without a BOM is not guessed.

**Binary** (``binary_reason``): a document with a NUL byte, or whose share of C0 control bytes
(other than tab, newline, carriage return, vertical tab, form feed) or DEL is above
``max_control_ratio``, is ``ingest:binary``. It is decided per document, wherever the document
lies in the file, so one bad part never condemns a whole good file (and a file of binary data
becomes a series of bounded ``ingest:binary`` rows).
"""
from __future__ import annotations

import codecs
import re
from collections import deque
from typing import BinaryIO, NamedTuple

import charset_normalizer

# (BOM, codec), longest first: the UTF-32-LE BOM starts with the UTF-16-LE one.
BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
        (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
# Wide encodings are only accepted with a BOM, never proposed for a document in the middle of a file.
_NO_DETECT = ["utf_16", "utf_16_be", "utf_16_le", "utf_32", "utf_32_be", "utf_32_le", "utf_7"]
_VALID_MULTIBYTE = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}"
                              rb"|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}"
                              rb"|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}")
# The most "chaos" (charset-normalizer's mess score) the preferred encoding's reading may show.
# Above the library's 0.2 default: a short line of curly quotes ("\x93No, sir.\x94") scores
# about 0.3 in cp1252, while cp1251/cp1253/Shift-JIS text read as cp1252 stays well above.
PREFERRED_CHAOS = 0.35
# Below this many bytes no detector judgement means anything ("\x93Yes.\x94" comes out cp1125 or
# cp037): the fallback encoding is used whenever it can decode the bytes.
MIN_DETECT_BYTES = 32
_CONTROL = bytes(i for i in range(32) if i not in (9, 10, 11, 12, 13)) + b"\x7f"
_NOT_CONTROL = bytes(i for i in range(256) if bytes([i]) not in _CONTROL)


class Decoded(NamedTuple):
    text: str | None  # None: not decodable
    encoding: str  # the codec used ("utf-8", "cp1252", ...); on failure, why
    error_at: int = -1  # on failure: index of the first bad byte (UTF-8)


def binary_reason(data: bytes, max_control_ratio: float) -> str | None:
    """Why ``data`` is not text (NUL bytes, too many control bytes), or None."""
    if not data:
        return None
    nul = data.find(b"\x00")
    if nul >= 0:
        return f"NUL byte at document byte {nul}"
    controls = len(data) - len(data.translate(None, _CONTROL))
    if controls and controls > max_control_ratio * len(data):
        return f"{controls} control bytes in {len(data)} (> max_control_ratio={max_control_ratio})"
    return None


def decode(data: bytes, *, detect: bool, fallback_encoding: str) -> Decoded:
    """The text of one document's bytes (see the module docstring for the rules)."""
    try:
        return Decoded(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError as exc:
        failed = Decoded(None, exc.reason, exc.start)
    if not detect:
        return failed
    if _VALID_MULTIBYTE.search(data):
        return failed._replace(encoding=f"{failed.encoding} (in text that also holds valid UTF-8)")
    encoding = detect_charset(data, fallback_encoding)
    if encoding is None:
        return failed._replace(encoding=f"{failed.encoding}; no charset fits the bytes")
    try:
        return Decoded(data.decode(encoding), encoding)
    except UnicodeDecodeError:  # the detector's decode and ours disagree: treat as undecodable
        return failed._replace(encoding=f"{failed.encoding}; {encoding} does not decode it")


def detect_charset(data: bytes, preferred: str) -> str | None:
    """The charset of non-UTF-8 bytes: ``preferred`` when the detector finds it plausible,
    else the detector's best guess among all charsets (None if none fits)."""
    wanted = codecs.lookup(preferred).name
    if len(data) < MIN_DETECT_BYTES:  # too short to judge: the prior decides if it can decode it
        try:
            data.decode(wanted)
            return wanted
        except UnicodeDecodeError:
            pass
    if charset_normalizer.from_bytes(data, cp_isolation=[wanted], threshold=PREFERRED_CHAOS).best() is not None:
        return wanted
    best = charset_normalizer.from_bytes(data, cp_exclusion=_NO_DETECT).best()
    return None if best is None else codecs.lookup(best.encoding).name


def bom_codec(head: bytes) -> str | None:
    """``utf-16-le`` etc. when ``head`` starts with a UTF-16/32 byte-order mark."""
    for bom, codec in BOMS:
        if head.startswith(bom):
            return codec
    return None


class Transcoder:
    """A readable stream of the UTF-8 transcoding of a UTF-16/32 stream (BOM kept as U+FEFF).

    ``out_offset(n)`` maps an offset in the source stream to the output offset up to which every
    byte came from source bytes before it: a compressed file's verified offset is known in source
    bytes (``integrity``), documents are split in output bytes. After every source read the pair
    (source bytes consumed, output bytes produced) is recorded; ``members.MemberStream`` never
    returns two members' bytes in one read, so every member end is such a point. Bytes the
    incremental decoder holds back (half a code unit) count as not yet output: conservative.
    """

    def __init__(self, source: BinaryIO, codec: str, *, head: bytes = b"", chunk: int = 1 << 20):
        self._source, self._chunk, self._head = source, chunk, head
        self._decoder = codecs.getincrementaldecoder(codec)("surrogatepass")
        self._in = 0  # source bytes consumed
        self._outpos = 0  # output bytes produced
        self._marks: deque[tuple[int, int]] = deque([(0, 0)])

    def _read_source(self) -> bytes:
        if self._head:
            data, self._head = self._head, b""
            return data
        read1 = getattr(self._source, "read1", None)
        return read1(self._chunk) if read1 is not None else self._source.read(self._chunk)

    def _encode(self, data: bytes, final: bool = False) -> bytes:
        try:
            out = self._decoder.decode(data, final).encode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # odd bytes at the very end: an invalid byte rejects that document
            out = b"\xff"
        self._in += len(data)
        self._outpos += len(out)
        self._marks.append((self._in, self._outpos))
        return out

    def out_offset(self, source_offset: int) -> int:
        """The output offset whose bytes all come from source bytes before ``source_offset``
        (queries must not go backwards: older points are dropped)."""
        marks = self._marks
        while len(marks) > 1 and marks[1][0] <= source_offset:
            marks.popleft()
        return marks[0][1] if marks[0][0] <= source_offset else 0

    def read(self, n: int = -1) -> bytes:
        while True:
            data = self._read_source()
            if not data:
                return self._encode(b"", final=True)
            out = self._encode(data)
            if out:
                return out

    read1 = read

    def close(self) -> None:
        pass
