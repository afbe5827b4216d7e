"""How much of the corpus's text a tokenizer covers: its [UNK] share and bytes per token, measured early.

A tokenizer that covers nothing builds a corpus quietly: a model folder whose tokenizer has only
the 5 special tokens (what transformers 5 saves after ``BertTokenizerFast(vocab_file=...)``,
which ignores that argument) gave a corpus that was 96% ``[UNK]``, and nothing said so. So the
tokenizer stage measures, on a bounded sample of the text it is about to tokenize:

* the **[UNK] share**: the tokens the tokenizer's model emits for unknown input over all the
  tokens it produces for the text, without the ``[CLS]``/``[SEP]`` its post-processor adds (the
  text is encoded as the pack stage encodes it: each non-empty line, no special tokens);
* the **bytes per token**: the sample's UTF-8 bytes over those tokens (about 4 for English prose
  with a fitting vocabulary; a tokenizer that maps whole words or lines to ``[UNK]`` gives more).

Above ``WARN_SHARE`` (1%) the build warns, naming the tokenizer (``tokenizer.pretrained=LOCATION``
or "the trained tokenizer") and the share, through the tokenizer stage's ``stats["warnings"]``
(the one path every warning takes: the manifest, one log line and one line at the end of the
run). Above ``tokenizer.max_unk_share`` (0.20) the stage fails with ``UncoveredText``, a
``ConfigError``: one line on the command line, exit 2, naming the share, the vocabulary size and
the key that allows it. The stage fails before pack, the stage that would encode every document.

The sample: the first ``MEASURE_BYTES`` (4 MB) of text of the tokenizer's sample, in the order
of a hash of (``tokenizer.sample_seed``, uid) (``tokenizer_sample``: a document is chosen by its
id, never by where Ray's blocks or the dedup shuffles put it). A trained tokenizer is measured in
its training task, on the sample it was trained on (``tokenizer_sample.train_and_measure``): no
read. A pretrained tokenizer's stage writes a sample of that size the same way
(``tokenizer_sample.write_sample``) and encodes it in one Ray task (``measure_sample``). Either
way the encoding is done where the text is, with the tokenizer the stage wrote, read back from
the store (exactly the file the pack stage uses), and the driver never holds a document.
Trade-offs:

* The same documents for either kind of tokenizer (the same seed chooses them), so a trained
  and a pretrained tokenizer are measured on the same text of a corpus; a trained tokenizer's
  is text it was trained on, which can only lower its share (characters outside its alphabet
  are ``[UNK]`` either way, the usual cause).
* The choice depends on the documents only: the share does not change with the cluster, the
  shuffle settings or a rerun. Reading a few row groups at evenly spaced places of the input
  parts instead would have bounded the reads, but the parts' layout follows the dedup shuffles
  (``shuffle.reduce_tasks``: two per CPU), so a build's figure, and whether it passes near the
  threshold, would have followed the cluster it ran on.
* The price: the pretrained path, which read no text before, makes one pass over the corpus to
  choose its 4 MB (the hashing read tasks of the trained path's sample; they write only the
  chosen rows). It reads what a document stage reads and writes nearly nothing (figures in
  ``docs/build-corpus.md``). A uid-column-only first pass (Parquet projection) would cut
  it to the ids and the row groups of the chosen documents, in ``pipelines.engine.parts``.
* Encoding 4 MB costs about a second of one CPU (``docs/build-corpus.md``), little next to even a
  small training; drawn from thousands of documents, the share's sampling error is far below the
  1% and 20% lines.

The sample is a gate, not the corpus's figure: the pack stage counts the exact ``[UNK]`` share of
every split's examples as it writes them (``pipelines.shard.example_summary``), and the manifest
records both (``stats.summary.unk_share``: ``sample``, ``train``, ``validation``).

The threshold decides whether the stage's output is used, never what it is, so it is not in the
stage's cache key (``CorpusConfig.sections``): a changed ``max_unk_share`` reruns nothing, and
``check_recorded`` applies it to a reused tokenizer stage's record, at planning (before pack
runs again: ``CorpusBuild.plan``) and at publish, so a cached tokenizer whose measured share a
lowered threshold no longer allows is still refused.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from common import storage
from common.config import ConfigError
from pipelines import schema
from pipelines.config import TokenizerConfig

WARN_SHARE = 0.01  # above this share of [UNK] the build warns
MEASURE_BYTES = 4 << 20  # text encoded at most
ENCODE_LINES = 1024  # lines per tokenizer call: the Encoding objects of one call stay small


class UncoveredText(ConfigError):
    """The tokenizer leaves more of the sample's tokens ``[UNK]`` than ``tokenizer.max_unk_share``
    allows. A ``ConfigError``: the command line prints its one line and exits 2."""


@dataclass(frozen=True)
class Coverage:
    """What the sample measured: its documents, UTF-8 bytes, tokens and ``[UNK]`` tokens, and the
    seconds the measurement took (reading the tokenizer back and encoding)."""
    texts: int = 0
    bytes: int = 0
    tokens: int = 0
    unk_tokens: int = 0
    seconds: float = 0.0

    @property
    def unk_share(self) -> float:
        return self.unk_tokens / self.tokens if self.tokens else 0.0

    @property
    def bytes_per_token(self) -> float | None:
        return self.bytes / self.tokens if self.tokens else None

    def record(self) -> dict[str, Any]:
        """The tokenizer stage's statistics: the counts and both figures, rounded."""
        bpt = self.bytes_per_token
        return {"unk_share": round(self.unk_share, 6), "bytes_per_token": None if bpt is None else round(bpt, 3),
                "coverage_sample": {**asdict(self), "seconds": round(self.seconds, 3)}}


# ----------------------------------------------------------------------------- the count
def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def unk_id(tokenizer: Any) -> int | None:
    """The id the tokenizer's model gives unknown input (WordPiece/BPE/WordLevel ``unk_token``,
    Unigram ``unk_id``); ``[UNK]``'s id when the model names none."""
    model = json.loads(tokenizer.to_str()).get("model", {})
    if isinstance(model.get("unk_id"), int):
        return int(model["unk_id"])
    return tokenizer.token_to_id(model.get("unk_token") or "[UNK]")


def count(tokenizer: Any, texts: list[str]) -> Coverage:
    """Encode ``texts`` as the pack stage does (each non-empty line, no special tokens) and count
    the tokens and the unknown ones."""
    from pipelines.pack import document_lines

    tokenizer.no_truncation()
    tokenizer.no_padding()
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    unk = unk_id(tokenizer)
    lines = [line for t in texts for line in document_lines(t)]
    tokens = unknown = 0
    for first in range(0, len(lines), ENCODE_LINES):
        for e in encode(lines[first:first + ENCODE_LINES], add_special_tokens=False):
            ids = e.ids
            tokens += len(ids)
            unknown += ids.count(unk) if unk is not None else 0
    return Coverage(texts=len(texts), bytes=sum(len(_utf8(t)) for t in texts), tokens=tokens, unk_tokens=unknown)


def measure_written(out_dir: str, texts: list[str]) -> Coverage:
    """``count`` of ``texts`` with the tokenizer written to ``out_dir``, read back from the store,
    timed. Runs where it is called: in the training task, or in ``tokenizer_sample.measure_sample``'s."""
    from tokenizers import Tokenizer

    start = time.perf_counter()
    tokenizer = Tokenizer.from_str(storage.read_text(storage.join(out_dir, schema.TOKENIZER_JSON)))
    got = count(tokenizer, texts)
    return Coverage(**{**asdict(got), "seconds": time.perf_counter() - start})


# ----------------------------------------------------------------------------- the verdict
def tokenizer_name(cfg: TokenizerConfig) -> str:
    return f"tokenizer.pretrained={cfg.pretrained}" if cfg.pretrained else "the trained tokenizer"


def _allowing(share: float) -> str:
    """The smallest threshold of two decimals above ``share``."""
    return f"{min(1.0, (int(share * 100) + 1) / 100):.2f}"


def review(coverage: Coverage, cfg: TokenizerConfig, vocab_size: int) -> list[str]:
    """The warnings for ``coverage`` (none, or one above ``WARN_SHARE``); raises ``UncoveredText``
    above ``cfg.max_unk_share``."""
    share, bpt = coverage.unk_share, coverage.bytes_per_token
    if share <= WARN_SHARE and share <= cfg.max_unk_share:
        return []
    said = f"{tokenizer_name(cfg)}: {share:.1%} of the sample's tokens are [UNK] ({bpt or 0:.1f} bytes per token)"
    if share > cfg.max_unk_share:
        fix = ("use another --tokenizer" if cfg.pretrained else
               "raise --vocab-size or tokenizer.character_coverage (1 keeps every character)")
        raise UncoveredText(f"{said}: this tokenizer does not cover the text (a {vocab_size}-token vocabulary); "
                            f"{fix}, or allow it with --set tokenizer.max_unk_share={_allowing(share)}")
    return [f"{said}; check that the tokenizer covers this text's scripts"]


def check_recorded(stats: dict[str, Any], cfg: TokenizerConfig) -> None:
    """``review`` of a finished tokenizer stage's statistics against the current threshold (a
    record without a measurement, from older code, passes)."""
    sample = stats.get("coverage_sample")
    if sample:
        review(Coverage(**sample), cfg, int(stats.get("vocab_size", 0)))
