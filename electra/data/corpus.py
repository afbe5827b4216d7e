"""Opening a corpus by location and reading its shards: identity checks, a cheap metadata check,
and content verified while it streams.

A corpus is a location string (a local path, ``file://``, ``s3://``, ``gs://``, ``https://``);
every byte goes through ``common.storage``, so no rank assumes a disk another machine wrote. The
manifest is the commit point: a shard it does not list does not exist. Three steps:

1. ``open_corpus`` reads ``manifest.json`` once (its sha256, kept in checkpoints, is that of the
   bytes read) and ``tokenizer.json`` from ``manifest.tokenizer.path``, and refuses a corpus that
   does not fit the config or the checkpoint: seq_len, the tokenizer's sha256 (against the
   manifest: replaced after the build; against the checkpoint: the wrong corpus for this run),
   its vocabulary size, ``[PAD] = 0``.
2. ``check_shards`` checks metadata only: one listing per shard folder (``list_shard_folders``,
   shared by the train and validation splits, which live in the same folder), compared with the
   manifest's names and sizes (a shard the listing lacks is asked for once by name, which is also
   how a store that cannot list, plain HTTP, is served). That costs a few requests whatever the
   corpus size; hashing every shard up front cost every rank one full read of the split before
   step 1. The trainer runs it on rank 0 only and broadcasts the answer
   (``distributed.on_rank0``), so a missing or truncated shard is found, and with
   ``data.skip_corrupt`` left out of the plan, identically on every rank even if the store
   changes between two ranks' listings.
3. ``read_shard`` verifies content in the same pass that parses it: the stream goes through a
   ``HashingReader``, ``schema.read_shard`` parses it front to back, the rest (tar end padding)
   is drained, then byte count, sha256 and example count are compared with the manifest. So a
   shard altered after the manifest was written (same size, other bytes) is found only when the
   stream reaches it, mid-epoch, and that is always an error, never a skip: skipping it on the
   rank that met it would leave that rank with fewer batches than the others (they would wait in
   a collective forever) and would break the exact-resume guarantee.

``ShardCache`` holds the decoded shards one loader worker needs, by position in the epoch's shard
order, and reads ahead along the worker's schedule (the order in which its streams first need
each shard, computed by ``electra.data.sample_order``): the next ``prefetch`` shards of it load in a
thread pool while the current ones are consumed, which hides an object store's latency, and
nothing the worker's streams do not need in the epoch is ever read. Threads suffice: the work is
network I/O, sha256 and numpy copies, which mostly release the GIL. The worker evicts a shard
after the last step that uses it; the memory bound is stated in ``electra.data.stream``. Where the
shards come from is a ``ShardSource``: by default the store (``read_shard``); with
``data.node_cache``, the node's shared copies (``electra.data.node_cache``), which ``read_shard``
fills through ``copy_to`` with exactly the bytes it verified.
"""
from __future__ import annotations

import itertools
import json
import logging
import posixpath
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import IO, BinaryIO, Protocol

from common import storage
from common.hashing import HashingReader, sha256_bytes
from electra.data.corpus_view import restrict
from pipelines import schema

log = logging.getLogger(__name__)

# Ranged-GET size on object stores. Shards are read front to back once, so large blocks mean few
# requests; 16 MiB stays small next to the decoded shard it becomes.
READ_BLOCK = 16 << 20
READ_ATTEMPTS = 3  # failed reads in a row that got no further than an earlier one (read_shard)
RETRY_PAUSE_S = 1.0


class CorpusMismatchError(ValueError):
    """The corpus does not fit the config or the checkpoint (seq_len, tokenizer)."""


class ShardReadError(RuntimeError):
    """Reading a shard kept failing (network, store): not damage, but the run cannot go on."""


class CorruptShardError(RuntimeError):
    """A shard that is missing, truncated, altered or unreadable; the message names its location."""


@dataclass(frozen=True)
class CorpusInfo:
    root: str  # the corpus location, as given (path or URI)
    manifest: schema.Manifest
    manifest_sha256: str
    tokenizer_sha256: str
    vocab_size: int

    def uri(self, relative: str) -> str:
        """A path of the manifest (relative to the corpus) as a location."""
        return storage.join(self.root, relative)

    @property
    def data_sha256(self) -> str:
        """Identity of what the data stream is a function of: seq_len, tokenizer, shard list."""
        shards = [[s.path, s.split, s.num_examples, s.sha256] for s in self.manifest.shards]
        blob = json.dumps([self.manifest.seq_len, self.tokenizer_sha256, shards]).encode()
        return sha256_bytes(blob)

    @property
    def tokenizer_uri(self) -> str:
        return self.uri(self.manifest.tokenizer.path)

    def copy_tokenizer(self, dest: str) -> None:
        """The corpus tokenizer's files into the folder ``dest`` (a path or URI). By name, not by
        listing: an https:// corpus cannot be listed. The optional files may be absent;
        tokenizer.json itself was read (and its sha256 checked) by ``open_corpus``."""
        for name in schema.TOKENIZER_FILES:
            try:
                data = storage.read_bytes(storage.join(self.tokenizer_uri, name))
            except storage.StorageError:
                continue
            storage.write_bytes(storage.join(dest, name), data)


@dataclass(frozen=True)
class ShardRef:
    uri: str
    num_examples: int
    bytes: int
    sha256: str
    generation: str = ""  # the corpus generation it belongs to (its folder; the sample log names it)


def open_corpus(corpus: str, *, seq_len: int | None = None, tokenizer_sha256: str | None = None,
                manifest_sha256: str | None = None, data_sha256: str | None = None,
                allow_change: bool = False, generations: Sequence[str] | None = None) -> CorpusInfo:
    """Load and check a corpus: its seq_len must equal ``seq_len`` (unless None); its tokenizer (and, when
    resuming, its manifest) must equal the checkpoint's. A location without a manifest (missing
    bucket, wrong prefix) raises ``FileNotFoundError`` naming it. ``generations``: the checkpoint's
    newest ones; the corpus is then seen as those only, the identity compared on them (a corpus
    that grew since resumes: ``electra.data.corpus_growth``)."""
    root = str(corpus)
    raw = schema.read_manifest_bytes(root)
    where = storage.join(root, schema.MANIFEST_NAME)
    manifest = schema.Manifest.parse(raw, where)
    if seq_len is not None and manifest.seq_len != seq_len:
        raise CorpusMismatchError(f"{where}: corpus seq_len {manifest.seq_len} != config data.seq_len "
                                  f"{seq_len}; rebuild the corpus or set data.seq_len={manifest.seq_len}")
    tok_uri = schema.tokenizer_json(root, manifest.tokenizer.path)
    try:
        tok_bytes = storage.read_bytes(tok_uri)
    except storage.StorageError as exc:
        raise CorpusMismatchError(f"{tok_uri}: missing tokenizer ({exc})") from exc
    tok_sha = sha256_bytes(tok_bytes)
    if tok_sha != manifest.tokenizer.sha256:
        raise CorpusMismatchError(f"{tok_uri}: sha256 {tok_sha[:12]} != manifest's "
                                  f"{manifest.tokenizer.sha256[:12]}: tokenizer replaced after the build")
    if tokenizer_sha256 is not None and tok_sha != tokenizer_sha256:
        raise CorpusMismatchError(f"{tok_uri}: tokenizer sha256 {tok_sha[:12]} differs from the "
                                  f"checkpoint's {tokenizer_sha256[:12]}: wrong corpus for this run")
    from tokenizers import Tokenizer  # local: only needed here

    vocab = Tokenizer.from_str(tok_bytes.decode("utf-8")).get_vocab_size()
    if vocab != manifest.tokenizer.vocab_size:
        raise CorpusMismatchError(f"{where}: tokenizer vocab_size {manifest.tokenizer.vocab_size} but "
                                  f"{tok_uri} has {vocab} tokens")
    if manifest.tokenizer.special_tokens.get("[PAD]") != 0:
        raise CorpusMismatchError(f"{where}: [PAD] must be id 0 (attention mask is ids != 0)")
    man_sha = sha256_bytes(raw)
    info = CorpusInfo(root, manifest, man_sha, tok_sha, vocab)
    if generations is not None:
        info = restrict(info, generations)
    if data_sha256 is not None and info.data_sha256 != data_sha256:
        message = (f"{where}: the corpus's shards differ from the checkpoint's (data sha256 "
                   f"{data_sha256[:12]} -> {info.data_sha256[:12]}: republished?); the saved data "
                   "position points into another stream")
        if not allow_change:
            raise CorpusMismatchError(message + "; resume on the original corpus, start a new run "
                                                "directory, or set data.allow_corpus_change=true")
        log.warning("%s (data.allow_corpus_change: going on)", message)
    elif manifest_sha256 is not None and man_sha != manifest_sha256:
        if data_sha256 is None:  # a checkpoint from before data_sha256: cannot tell what changed
            log.warning("%s changed since the checkpoint; the data position may not match", where)
        else:
            log.info("%s changed since the checkpoint (statistics only: the same shards)", where)
    return info


def list_shard_folders(corpus: CorpusInfo, splits: Sequence[str] = schema.SPLITS) -> dict[str, dict[str, int]]:
    """Folder -> (name -> size) for every folder holding shards of ``splits``: one listing per
    folder, shared by the splits (train and validation live in the same ``shards/<generation>/``)."""
    folders = sorted({posixpath.dirname(s.path) for split in splits for s in corpus.manifest.shards_for(split)})
    return {folder: _file_sizes(corpus.uri(folder)) for folder in folders}


def check_shards(corpus: CorpusInfo, split: str, *, skip_corrupt: bool = False,
                 listings: dict[str, dict[str, int]] | None = None) -> tuple[list[ShardRef], list[str]]:
    """The split's shards whose listing matches the manifest, and the locations of those skipped
    (missing or of another size); content is verified later, by ``read_shard``. ``listings``
    (``list_shard_folders``) lets several splits share one listing; without it the split's
    folders are listed here."""
    infos = corpus.manifest.shards_for(split)
    if listings is None:
        listings = list_shard_folders(corpus, (split,))
    good, skipped = [], []
    for info in infos:
        uri = corpus.uri(info.path)
        folder, name = posixpath.split(info.path)
        size = listings.get(folder, {}).get(name)
        if size is None:  # not in the listing: ask by name before calling it missing
            found = storage.info(uri)
            size = None if found is None else int(found["size"])
        if size == info.bytes:
            good.append(ShardRef(uri, info.num_examples, info.bytes, info.sha256,
                                 schema.shard_generation(info) or corpus.manifest.generation))
            continue
        problem = ("missing" if size is None else
                   f"{size} bytes, manifest says {info.bytes} (truncated or altered after the manifest was written)")
        if not skip_corrupt:
            raise CorruptShardError(f"{uri}: {problem} (set data.skip_corrupt=true to skip it)")
        log.warning("skipping corrupt shard %s: %s", uri, problem)
        skipped.append(uri)
    if skipped:
        log.warning("%d of %d %s shards skipped as corrupt", len(skipped), len(infos), split)
    return good, skipped


def _file_sizes(folder: str) -> dict[str, int]:
    """Name -> size of the files directly in ``folder``, from one listing (empty when the store
    has no such folder or cannot list)."""
    return {name: size for name, size in storage.list_sizes(folder).items() if "/" not in name}


def read_shard(shard: ShardRef, *, attempts: int = READ_ATTEMPTS, copy_to: BinaryIO | None = None) -> schema.Examples:
    """All examples of a shard, parsed and verified against the manifest in one streaming read.

    ``common.storage`` already retries transient store errors inside the read (and raises
    ``StoreUnavailableError`` when the store stays down: passed on as it is). Any other failing
    read (an ``OSError`` other than a missing object) is retried from the start with a growing
    pause, until ``attempts`` reads in a row failed without getting further into the shard than
    an earlier one (``common.retry``'s rule for counts: a read that got further starts the count
    again, so a store failing a share of requests cannot use the count up on a long shard that
    keeps advancing), then raised as ``ShardReadError`` naming the shard; a missing or altered
    shard is never retried. ``copy_to`` (a seekable binary file, emptied before each
    attempt) receives the bytes as they stream, so a caller keeps a copy of exactly what was
    verified (``electra.data.node_cache``); a failed write to it raises ``CopyWriteError``, never retried.
    """
    stalled = best = 0  # failed reads in a row without progress; the furthest byte a read reached
    for attempt in itertools.count(1):
        reached = [0]
        try:
            if copy_to is not None:
                copy_to.seek(0)
                copy_to.truncate()
            return _read_verified(shard, copy_to, reached)
        except storage.MissingObject as exc:
            raise CorruptShardError(f"{shard.uri}: missing (deleted after the manifest was written)") from exc
        except storage.StoreUnavailableError:
            raise
        except OSError as exc:
            stalled = 1 if reached[0] > best else stalled + 1
            best = max(best, reached[0])
            if stalled >= attempts:
                raise ShardReadError(f"{shard.uri}: read failed {attempt} times (the last {stalled} got no further "
                                     f"than byte {best}): {exc!r}") from exc
            log.warning("%s: read failed at byte %d (%r); retrying (%d of %d)", shard.uri, reached[0], exc,
                        stalled + 1, attempts)
            time.sleep(RETRY_PAUSE_S * 2 ** min(stalled - 1, 4))
    raise AssertionError("unreachable")


class CopyWriteError(RuntimeError):
    """Writing the copy of a shard being read failed (a full disk): the copy's fault, not the store's."""


class _Copying:
    """A stream that writes what it reads to ``sink``."""

    def __init__(self, raw: IO[bytes], sink: BinaryIO):
        self._raw, self._sink = raw, sink

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        try:
            written = self._sink.write(data)
        except OSError as exc:
            raise CopyWriteError(f"writing a copy failed ({exc})") from exc
        if written is not None and written != len(data):  # an unbuffered file on a full disk
            raise CopyWriteError(f"writing a copy failed ({written} of {len(data)} bytes written)")
        return data


class _Counting:
    """A stream that counts the bytes read through it (a local copy whose sha256 was checked)."""

    def __init__(self, raw: IO[bytes]):
        self._raw, self.bytes_read = raw, 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self.bytes_read += len(data)
        return data

    def drain(self, chunk: int = 1 << 20) -> None:
        while self.read(chunk):
            pass


def _read_verified(shard: ShardRef, copy_to: BinaryIO | None = None, reached: list[int] | None = None
                   ) -> schema.Examples:
    """``reached[0]``: set to the bytes read when the read ends, failed or not (``read_shard``'s progress)."""
    with storage.open_input(shard.uri, block_size=READ_BLOCK) as raw:
        reader = HashingReader(raw if copy_to is None else _Copying(raw, copy_to))
        try:
            return _parse_checked(reader, shard)
        finally:
            if reached is not None:
                reached[0] = reader.bytes_read


def parse_verified_copy(stream: IO[bytes], shard: ShardRef) -> schema.Examples:
    """The examples of a local copy of ``shard`` whose bytes were verified against the manifest
    (sha256 included) when they were read from the store (``electra.data.node_cache``): parsed, with
    the byte and example counts checked again; the sha256 is not recomputed."""
    return _parse_checked(_Counting(stream), shard)


def _parse_checked(reader: HashingReader | _Counting, shard: ShardRef) -> schema.Examples:
    examples, parse_error = None, None
    try:
        examples = schema.read_shard(reader, shard.uri)
    except ValueError as exc:
        parse_error = exc
    reader.drain()
    if reader.bytes_read != shard.bytes:
        raise CorruptShardError(f"{shard.uri}: {reader.bytes_read} bytes, manifest says {shard.bytes} "
                                "(truncated or altered after the manifest was written)")
    if isinstance(reader, HashingReader) and reader.hexdigest() != shard.sha256:
        raise CorruptShardError(f"{shard.uri}: sha256 differs from the manifest (altered after the "
                                "manifest was written)")
    if parse_error is not None:  # the bytes the manifest names, yet unreadable: a bad build
        raise CorruptShardError(str(parse_error)) from parse_error
    if len(examples) != shard.num_examples:
        raise CorruptShardError(f"{shard.uri}: {len(examples)} examples, manifest says {shard.num_examples}")
    return examples


class ShardSource(Protocol):
    """Where a ``ShardCache`` gets the shards at positions of its order (``electra.data.node_cache``):
    ``read`` one, and ``release`` one the reader will not ask for again in this pass."""

    def read(self, index: int) -> schema.Examples: ...

    def release(self, index: int) -> None: ...


class ShardCache:
    """Decoded shards by position in one epoch's shard order, read on demand and ahead along a
    schedule (module docstring).

    ``schedule`` lists positions in the order the reader will first need them (default: all, in
    order); ``read_ahead(upto)`` starts reading the first ``upto`` entries not read yet, in
    ``prefetch`` threads (with ``prefetch`` 0 every read happens in ``get``), so nothing outside
    the schedule is ever read ahead. ``evict`` forgets shards the reader no longer needs and
    tells ``source`` (default: each shard read from the store, ``read_shard``) it is done with
    them. ``bytes_read`` and ``reads`` (positions, in completion order) count what was read: each
    read is one whole, verified pass over a shard."""

    def __init__(self, ordered: list[ShardRef], *, prefetch: int = 0, schedule: Sequence[int] | None = None,
                 source: ShardSource | None = None):
        self.ordered = ordered
        self.prefetch = prefetch
        self.schedule = list(range(len(ordered))) if schedule is None else [int(i) for i in schedule]
        self.source = source
        self.loaded: dict[int, schema.Examples] = {}
        self.pending: dict[int, Future] = {}
        self.next = 0  # schedule entries before it were handed to read-ahead (or passed by)
        self.bytes_read = 0
        self.reads: list[int] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(prefetch, thread_name_prefix="shard-read-ahead") if prefetch else None

    def _read(self, index: int) -> schema.Examples:
        examples = read_shard(self.ordered[index]) if self.source is None else self.source.read(index)
        with self._lock:
            self.bytes_read += self.ordered[index].bytes
            self.reads.append(index)
        return examples

    def read_so_far(self) -> tuple[int, list[int]]:
        """``(bytes_read, reads)`` as of now (reads complete in read-ahead threads)."""
        with self._lock:
            return self.bytes_read, list(self.reads)

    def read_ahead(self, upto: int) -> None:
        """Make sure the first ``upto`` schedule entries are loaded or loading (no-op without threads)."""
        while self.next < min(upto, len(self.schedule)):
            index = self.schedule[self.next]
            self.next += 1
            if self._pool is not None and index not in self.loaded and index not in self.pending:
                self.pending[index] = self._pool.submit(self._read, index)

    def get(self, index: int) -> schema.Examples:
        if index not in self.loaded:
            future = self.pending.pop(index, None)
            self.loaded[index] = future.result() if future is not None else self._read(index)
        return self.loaded[index]

    def evict(self, indices: Iterable[int]) -> None:
        """Forget the shards at ``indices`` (a read of one still pending is cancelled) and release
        them to the source."""
        for index in map(int, indices):
            self.loaded.pop(index, None)
            future = self.pending.pop(index, None)
            if future is not None and not future.cancel():
                wait([future])  # running: let it end before the release, which may delete its file
            if self.source is not None:
                self.source.release(index)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ShardCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
