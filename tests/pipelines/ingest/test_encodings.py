"""Encodings, line ends and binary data: charset fallback (counted), UTF-16/32 with a BOM, CR-only
and mixed line ends, binary documents anywhere in a file."""
from __future__ import annotations

import dataclasses
import gzip
import io

import pytest

from pipelines.ingest.encodings import binary_reason, decode
from pipelines.ingest.text_stream import LineReader
from tests.pipelines.ingest.test_ingest import CFG, STRICT, kept, offset, rows

WESTERN = ["Caf\u00e9 cr\u00e8me and cr\u00eape \u201cflamb\u00e9e\u201d \u2014 na\u00efve fa\u00e7ade.",
           "Gr\u00fc\u00dfe aus M\u00fcnchen, sch\u00f6ne B\u00e4ren \u00fcber dem Flu\u00df.",
           "Plain ASCII text in the middle.",
           "\u00a1Se\u00f1or! \u00bfQu\u00e9 tal? Ma\u00f1ana ser\u00e1 otro d\u00eda \u2026"]


def blank_line_file(docs: list[str], encoding: str) -> tuple[bytes, list[int]]:
    data, offsets = b"", []
    for d in docs:
        offsets.append(len(data))
        data += (d + "\n\n").encode(encoding)
    return data, offsets


# ---------------------------------------------------------------------------------------------
# Charset fallback
# ---------------------------------------------------------------------------------------------
def test_cp1252_file_is_decoded_and_counted(tmp_path):
    data, offsets = blank_line_file(WESTERN, "cp1252")
    path = tmp_path / "west.txt"
    path.write_bytes(data)
    rs = rows(path)
    assert kept(rs) == WESTERN and [offset(r) for r in rs] == offsets
    assert [r["encoding"] for r in rs] == ["cp1252", "cp1252", "utf-8", "cp1252"]  # ASCII is UTF-8
    strict = rows(path, STRICT)
    assert [r["reason"] for r in strict] == ["ingest:invalid_utf8", "ingest:invalid_utf8", "", "ingest:invalid_utf8"]


def test_mixed_file_decodes_each_document_on_its_own(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(WESTERN[0].encode("utf-8") + b"\n\n" + WESTERN[1].encode("cp1252") + b"\n\n"
                     + "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430? "
                       "\u042d\u0442\u043e \u0442\u0435\u043a\u0441\u0442 \u043d\u0430 \u0440\u0443\u0441\u0441\u043a\u043e\u043c "
                       "\u044f\u0437\u044b\u043a\u0435.".encode("cp1251") + b"\n")
    rs = rows(path)
    assert [r["encoding"] for r in rs] == ["utf-8", "cp1252", "cp1251"]
    assert kept(rs)[:2] == WESTERN[:2] and kept(rs)[2].startswith("\u041f\u0440\u0438\u0432\u0435\u0442")


def test_damaged_utf8_is_not_reinterpreted():
    # Valid multi-byte UTF-8 next to an invalid byte: broken UTF-8, not a legacy charset.
    out = decode("caf\u00e9 ".encode() + b"\xff ok", detect=True, fallback_encoding="cp1252")
    assert out.text is None and "valid UTF-8" in out.encoding and out.error_at == 6
    assert decode(b"caf\xe9", detect=True, fallback_encoding="cp1252") == ("caf\u00e9", "cp1252", -1)
    assert decode(b"caf\xe9", detect=False, fallback_encoding="cp1252").text is None


def test_jsonl_records_in_cp1252(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(b'{"text": "' + d.encode("cp1252") + b'"}\n' for d in WESTERN))
    rs = rows(path)
    assert kept(rs) == WESTERN and rs[0]["encoding"] == "cp1252"


# ---------------------------------------------------------------------------------------------
# UTF-16/32 with a byte-order mark
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le"])
@pytest.mark.parametrize("gz", [False, True])
def test_utf16_with_bom_is_transcoded(tmp_path, codec, gz):
    docs = WESTERN + ["\U0001f600 emoji beyond the BMP, \u4e2d\u6587"]
    text = "\ufeff" + "".join(d + "\r\n\r\n" for d in docs)
    data = text.encode(codec)
    path = tmp_path / ("w.txt.gz" if gz else "w.txt")
    path.write_bytes(gzip.compress(data) if gz else data)
    rs = rows(path)
    assert kept(rs) == docs and {r["encoding"] for r in rs} == {codec}
    # Ids are offsets in the UTF-8 transcoding; the BOM (3 UTF-8 bytes) starts the first line.
    utf8 = text.encode("utf-8")
    assert [offset(r) for r in rs] == [0] + [utf8.index(d.encode()) for d in docs[1:]]


def test_utf16_lone_surrogate_rejects_only_its_document(tmp_path):
    good = "first document\n\n".encode("utf-16-le")
    bad = "bad ".encode("utf-16-le") + b"\x00\xd8" + " here\n\n".encode("utf-16-le")  # lone high surrogate
    path = tmp_path / "s.txt"
    path.write_bytes(b"\xff\xfe" + good + bad + "last one\n".encode("utf-16-le"))
    rs = rows(path)
    assert [r["reason"] for r in rs] == ["", "ingest:invalid_utf8", ""]
    assert kept(rs) == ["first document", "last one"] and "utf-16-le" in rs[1]["detail"]


# ---------------------------------------------------------------------------------------------
# Line ends
# ---------------------------------------------------------------------------------------------
def test_line_reader_splits_like_universal_newlines():
    data = b"a\rb\r\nc\n\rd\r\r\ne\n\n\r\rlast" + b"x\r" * 5 + b"\r\nend\r"
    for chunk in (1, 2, 3, 5, 64):
        lines = list(LineReader(io.BytesIO(data), max_line=100, chunk=chunk))
        assert [ln.data for ln in lines] == data.splitlines(keepends=True), chunk
        assert [ln.offset for ln in lines] == [data.index(ln.data, ln.offset) for ln in lines]
        assert sum(ln.length for ln in lines) == len(data)


@pytest.mark.parametrize("eol", [b"\r", b"\r\n", b"\n"])
def test_cr_only_and_crlf_files_split_documents(tmp_path, eol):
    path = tmp_path / "mac.txt"
    path.write_bytes(eol.join([b"one a", b"one b", b"", b"two", b"", b"", b"three"]) + eol)
    assert kept(rows(path)) == ["one a\none b".replace("\n", eol.decode()), "two", "three"]
    assert kept(rows(path, dataclasses.replace(CFG, text_mode="line"))) == ["one a", "one b", "two", "three"]


def test_mixed_line_ends(tmp_path):
    path = tmp_path / "mix.txt"
    data = b"alpha\r\nbeta\r\rgamma\n\ndelta\r\n\r\nepsilon\rzeta"
    path.write_bytes(data)
    rs = rows(path)
    assert kept(rs) == ["alpha\r\nbeta", "gamma", "delta", "epsilon\rzeta"]
    assert [offset(r) for r in rs] == [data.index(w) for w in (b"alpha", b"gamma", b"delta", b"epsilon")]


# ---------------------------------------------------------------------------------------------
# Binary data, wherever it is
# ---------------------------------------------------------------------------------------------
def test_binary_documents_are_found_anywhere_and_alone(tmp_path):
    filler = "\n\n".join(f"ordinary paragraph number {i} with words" for i in range(400))  # > 8 KB
    blob = bytes(range(256)) * 4
    path = tmp_path / "late.txt"
    path.write_bytes(filler.encode() + b"\n\n" + blob.replace(b"\n", b"") + b"\n\nafter the blob\n\n"
                     + b"ctrl \x1b[0m\x07\x08\x01\x02 text\n")
    rs = rows(path)
    assert [r["reason"] for r in rs if r["reason"]] == ["ingest:binary", "ingest:binary"]
    assert len(filler.encode()) > 8192 and kept(rs)[-1] == "after the blob" and len(kept(rs)) == 401
    assert "NUL byte at document byte 0" in rs[400]["detail"] and "control bytes" in rs[-1]["detail"]


def test_binary_reason_thresholds():
    assert binary_reason(b"text\twith\fform feeds\r\n", 0.05) is None
    assert binary_reason(b"a\x00b", 0.5).startswith("NUL byte at document byte 1")
    assert binary_reason(b"\x1b" + b"x" * 19, 0.05) is None  # 1 in 20: at the threshold
    assert binary_reason(b"\x1b\x1b" + b"x" * 18, 0.05) is not None


def test_config_checks_the_new_fields():
    from common.config import ConfigError
    from pipelines.config import CorpusConfig

    cfg = CorpusConfig.from_dict({"ingest": {"fallback_encoding": "latin-1", "max_control_ratio": 0.1}})
    assert cfg.ingest.fallback_encoding == "latin-1" and cfg.ingest.detect_charset
    for bad in ({"fallback_encoding": "klingon-8"}, {"max_control_ratio": 2.0}, {"detect_charset": "yes"}):
        with pytest.raises(ConfigError):
            CorpusConfig.from_dict({"ingest": bad})
