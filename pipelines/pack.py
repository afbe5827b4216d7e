"""ELECTRA example packing: documents -> ``[CLS] A [SEP] B [SEP]`` examples.

The algorithm is ELECTRA's ``build_pretraining_dataset.py`` (``ExampleBuilder``), per document:

1. The document's non-empty lines are tokenised without special tokens and appended, line by
   line, to a buffer. When the buffer holds at least ``target`` tokens an example is made; the
   end of the document flushes whatever is left (a shorter example). Examples never span two
   documents.
2. Making an example: with probability ``single_segment_prob`` (0.10) everything goes to segment
   A; otherwise A targets ``(target - 3) // 2`` tokens. A line goes to A while A is empty or the
   line keeps A under its target; when it would not, and B is still empty and A is under its
   target, a coin flip decides; otherwise it goes to B. Then ``A = A[:L-2]`` and
   ``B = B[:max(0, L - len(A) - 3)]`` with ``L = seq_len`` (the overshoot of the last line is
   dropped, as in the original).
3. The target of the next example is ``L``, or with probability ``short_seq_prob`` (0.05)
   uniform in ``[short_seq_min, L]``. The original carries that draw across document
   boundaries; here every document draws its first target the same way, so each example's
   target is an independent draw whatever the document order.
4. Layout ``[CLS] A [SEP] B [SEP]`` (no second ``[SEP]`` when B is empty); segment ids 0 for
   CLS, A and the first SEP, 1 for B and its SEP.

One deliberate improvement (``PackConfig.split_long_lines``, on by default; off reproduces the
original): the original appends a line whole, so a line longer than an example (a paragraph
or a document without line breaks) is cut to ``L-2`` tokens and the rest of it is lost — a
10,000-token one-line document yields one example. Here a line with more than ``L - 3`` tokens
is fed in pieces of at most A's target, the last piece cut so the buffer reaches the target
exactly; such a line then loses only the 2-3 tokens per example that every full example loses
to its special tokens. Lines that fit an example are handled exactly as in the original.

Determinism: the RNG of a document is seeded from hash(seed, uid), and its split is
``validation`` iff hash(seed, uid) / 2**64 < ``validation_fraction``; the output depends neither
on batch boundaries nor on Ray's block order.

Speed: all lines of a Ray batch are tokenised by one ``encode_batch_fast`` call (Rust, no
offsets; in a Ray task on one thread, as the task holds one CPU: ``raydata.WORKER_THREAD_ENV``);
the packing itself works on Python lists of ids per line (slices and
``+=``), never per token; the output arrays are built once per example.
"""
from __future__ import annotations

import random
from typing import Any, NamedTuple

import numpy as np

from common.hashing import hash64, unit_float
from pipelines.config import PackConfig

_RNG_SALT = 0x5EED_0F_E1EC_7A
_SPLIT_SALT = 0x5B11_7_0F_DA7A


def is_validation(uids: np.ndarray, cfg: PackConfig) -> np.ndarray:
    """Boolean mask: documents whose hash(seed, uid) / 2**64 falls below the validation fraction."""
    return unit_float(hash64(cfg.seed ^ _SPLIT_SALT, uids)) < cfg.validation_fraction


def document_rngs(uids: np.ndarray, cfg: PackConfig) -> list[random.Random]:
    return [random.Random(int(h)) for h in hash64(cfg.seed ^ _RNG_SALT, uids)]


class SpecialIds(NamedTuple):
    cls: int
    sep: int
    pad: int = 0


def _next_target(rng: random.Random, cfg: PackConfig) -> int:
    if rng.random() < cfg.short_seq_prob:
        return rng.randint(cfg.short_seq_min, cfg.seq_len)
    return cfg.seq_len


def _make_example(sentences: list[list[int]], target: int, rng: random.Random,
                  cfg: PackConfig, special: SpecialIds) -> tuple[list[int], list[int]]:
    """ELECTRA's ``_create_example`` on the buffered sentences."""
    max_len = cfg.seq_len
    if rng.random() < cfg.single_segment_prob:
        a_target = 100000
    else:
        a_target = (target - 3) // 2
    first: list[int] = []
    second: list[int] = []
    for sentence in sentences:
        if (not first or len(first) + len(sentence) < a_target
                or (not second and len(first) < a_target and rng.random() < 0.5)):
            first += sentence
        else:
            second += sentence
    first = first[:max_len - 2]
    second = second[:max(0, max_len - len(first) - 3)]
    ids = [special.cls, *first, special.sep]
    segs = [0] * len(ids)
    if second:
        ids += second
        ids.append(special.sep)
        segs += [1] * (len(second) + 1)
    return ids, segs


class _Builder:
    """The per-document buffer of ELECTRA's ``ExampleBuilder``."""

    def __init__(self, rng: random.Random, cfg: PackConfig, special: SpecialIds):
        self.rng, self.cfg, self.special = rng, cfg, special
        self.examples: list[tuple[list[int], list[int]]] = []
        self.buf: list[list[int]] = []
        self.buf_len = 0
        self.target = _next_target(rng, cfg)

    def add(self, sentence: list[int]) -> None:
        self.buf.append(sentence)
        self.buf_len += len(sentence)
        if self.buf_len >= self.target:
            self.flush()

    def add_in_pieces(self, line: list[int]) -> None:
        start = 0
        while start < len(line):
            take = min(len(line) - start, max(1, (self.target - 3) // 2), self.target - self.buf_len)
            self.add(line[start:start + take])
            start += take

    def flush(self) -> None:
        if self.buf_len > 0:
            self.examples.append(_make_example(self.buf, self.target, self.rng, self.cfg, self.special))
            self.target = _next_target(self.rng, self.cfg)
        self.buf, self.buf_len = [], 0


def pack_document(token_lines: list[list[int]], rng: random.Random, cfg: PackConfig,
                  special: SpecialIds, *, split_long_lines: bool | None = None,
                  ) -> list[tuple[list[int], list[int]]]:
    """All examples of one document, as (input_ids, segment_ids) lists, in document order.

    ``split_long_lines`` None means ``cfg.split_long_lines`` (see the module docstring).
    """
    split_long = cfg.split_long_lines if split_long_lines is None else split_long_lines
    max_piece = cfg.seq_len - 3
    builder = _Builder(rng, cfg, special)
    for line in token_lines:
        if split_long and len(line) > max_piece:
            builder.add_in_pieces(line)
        else:
            builder.add(line)
    builder.flush()  # the end of a document ends its last example
    return builder.examples


def document_lines(text: str) -> list[str]:
    """The non-empty lines of a document (line breaks of any kind; whitespace-only lines dropped)."""
    return [ln for ln in text.splitlines() if ln.strip()]


class ExamplePacker:
    """A batch of document rows -> a batch of example rows (the pack stage calls one instance per
    Ray worker process, built once from the tokenizer on the store: ``stages._pack_rows``).
    Input columns ``uid`` and ``text`` (others are
    ignored); output (a pyarrow table) ``uid``, ``ordinal`` (the example's index in its
    document), ``split``, ``input_ids`` (list of int32, unpadded) and ``b_start`` (index of the
    first segment-B token, the length when there is none). A document without tokens yields
    no example (the pack stage counts those as ``documents_without_examples``).
    """

    def __init__(self, tokenizer: Any, cfg: PackConfig):
        """``tokenizer``: a ``tokenizers.Tokenizer`` or the path of a local ``tokenizer.json``."""
        from tokenizers import Tokenizer

        self.cfg = cfg
        self.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.from_file(str(tokenizer))
        # Truncation/padding set in a tokenizer.json would silently cut documents.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        ids = {t: self.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"tokenizer {tokenizer}: missing special token(s) {missing}")
        self.special = SpecialIds(cls=ids["[CLS]"], sep=ids["[SEP]"], pad=ids["[PAD]"])
        self._encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)

    def tokenize(self, texts: Any) -> list[list[list[int]]]:
        """Token ids per line per document, with one tokenizer call for the whole batch."""
        doc_lines = [document_lines(str(t)) for t in texts]
        flat = [ln for lines in doc_lines for ln in lines]
        encodings = self._encode(flat, add_special_tokens=False) if flat else []
        out, pos = [], 0
        for lines in doc_lines:
            out.append([e.ids for e in encodings[pos:pos + len(lines)]])
            pos += len(lines)
        return out

    def __call__(self, batch: dict[str, np.ndarray]) -> Any:
        import pyarrow as pa

        uids = np.asarray(batch["uid"], dtype=np.int64)
        token_docs = self.tokenize(batch["text"])
        rngs = document_rngs(uids, self.cfg)
        valid = is_validation(uids, self.cfg)
        out_uid, ordinals, splits, b_start, ids_flat, lengths = [], [], [], [], [], []
        for uid, lines, rng, is_val in zip(uids.tolist(), token_docs, rngs, valid.tolist()):
            examples = pack_document(lines, rng, self.cfg, self.special)
            if not examples:
                continue
            split = "validation" if is_val else "train"
            for n, (ids, segs) in enumerate(examples):
                out_uid.append(uid)
                ordinals.append(n)
                splits.append(split)
                b_start.append(len(ids) - sum(segs))  # segments are 0...0 1...1
                ids_flat += ids
                lengths.append(len(ids))
        offsets = np.zeros(len(lengths) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        input_ids = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(ids_flat, pa.int32()))
        return pa.table({"uid": pa.array(out_uid, pa.int64()), "ordinal": pa.array(ordinals, pa.int32()),
                         "split": pa.array(splits, pa.string()), "input_ids": input_ids,
                         "b_start": pa.array(b_start, pa.int32())})


# ----------------------------------------------------------------------------- fill
# Below this share of non-pad positions a build warns: padding is compute the trainer spends
# on nothing (examples never span documents, so short documents make short examples).
MIN_FILL = 0.85


def fill(tokens: int, examples: int, seq_len: int) -> float:
    """Non-pad share of the positions of ``examples`` padded to ``seq_len`` (0 when empty)."""
    return round(tokens / (examples * seq_len), 4) if examples else 0.0


def fill_warnings(splits: dict[str, dict[str, Any]], seq_len: int, text_mode: str) -> list[str]:
    """One warning per split whose fill is below ``MIN_FILL``, with the likely cause."""
    if text_mode in ("blank_line", "line"):
        cause = (f"ingest.text_mode={text_mode} makes every {'paragraph' if text_mode == 'blank_line' else 'line'} "
                 "a document, and examples never span documents; for books use the books profile "
                 "(profile=books: a whole file is one document)")
    else:
        cause = "the documents are short for seq_len (examples never span documents); a smaller pack.seq_len fits them"
    out = []
    for split, s in sorted(splits.items()):
        share = fill(s["tokens"], s["examples"], seq_len)
        if s["examples"] and share < MIN_FILL:
            out.append(f"{split}: examples fill {share:.0%} of their {seq_len} positions "
                       f"({s['tokens'] / s['examples']:.0f} tokens per example, below {MIN_FILL:.0%}): {cause}")
    return out


def empty_split_warnings(splits: dict[str, dict[str, Any]], validation_fraction: float,
                         documents: int) -> list[str]:
    """A warning per split that drew no example although it could have. The split is drawn per
    whole document, so a few long documents (books) easily leave one split empty: the validation
    split when none of them drew it, the train split when all of them did (one book alone goes to
    validation with probability ``validation_fraction``). An empty train split is the loud one: the
    trainer has nothing to read."""
    out = []
    if documents and not splits.get("train", {}).get("examples"):
        went = splits.get("validation", {}).get("documents", 0)
        one = "with 1 document, it" if documents == 1 else f"all {documents} documents"
        out.append(f"train: no examples, so pre-training on this corpus has nothing to read: {went} of {documents} "
                   f"document{'s' if documents != 1 else ''} went to validation (documents are split whole "
                   f"between train and validation, each by a hash of its id against "
                   f"pack.validation_fraction={validation_fraction}; {one} drew validation); fix: rebuild with "
                   "--validation-fraction 0 (no validation split), or add documents")
    if validation_fraction > 0 and not splits.get("validation", {}).get("examples"):
        out.append(f"validation: no examples; pack.validation_fraction={validation_fraction} of {documents} "
                   "documents drew none (the split is by whole document): raise --validation-fraction "
                   "for few, long documents")
    return out
