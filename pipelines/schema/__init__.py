"""The corpus contract: the corpus layout, the compact shard format and ``manifest.json``.

This is the package the trainer (``electra/data/stream.py``) imports from ``pipelines`` (with the
tokenizer folder's ``pipelines.tokenizer_files``); everything another tool reads from a corpus is
defined here once: the names in ``layout``, the shard format in ``shards``, the manifest in
``manifest``, all importable as ``pipelines.schema.X``. A corpus is a location (local path or
URI) holding::

    manifest.json                          the commit point: what it does not list does not exist
    tokenizer/<key>/                       tokenizer.json, vocab.txt, tokenizer_config.json
    shards/<generation>/{train,validation}-NNNNNN.tar   one folder per generation (``generations``)
    index/<generation>/                    that generation's dedup index (``pipelines.dedup.corpus_index``)
    rejected/<stage>-<key>/part-*.jsonl.zst
    rejected/<stage>-<key>/_parts-<sha>.arrow  that stage's list of them, named and hashed by the manifest
    .work/                                 stage caches (build-corpus's, safe to delete)

Every folder named by a key is written once and never changed: a new build with other inputs
writes new folders, then replaces ``manifest.json`` (one atomic write), then deletes folders that
neither the new nor the previous manifest names. A reader that loaded the old manifest keeps
reading consistent files; a build killed before its manifest leaves the old corpus untouched.

**The rejected-part lists live apart from the manifest** (format 4). A 10 TB build quarantines
about a million parts; listed inline (format 2) they made ``manifest.json`` the largest thing
every training rank downloads and parses at start, for a list no trainer reads, and as one file
beside it (format 3) the build's driver still assembled them all at once. Each document stage's
list is an Arrow file in its own quarantine folder (``schema.rejected``), named by its content and
named in the manifest's ``rejected_lists`` with its sha256, size and counts, so a reader still on
the previous manifest keeps reading the previous lists (publishing deletes lists no kept
manifest names). Two readers: ``Manifest.parse`` (the trainer) reads the manifest only and
leaves ``rejected`` empty, while ``Manifest.load`` (the build's tools) also reads the lists and
checks their sha256. Format 2 and 3 manifests are still read by both. Both also check the
manifest's own seal, a ``"sha256"`` over its canonical JSON (``sealed``; absent from manifests
written before it, which are read unchecked).

**Shards** are plain WebDataset tars. A sample is a *chunk* of consecutive examples (not one
example), so the 512-byte tar header and padding are paid per chunk, not per example. Chunk
``c`` (key ``cNNNNNN``, no dots) has three ``.npy`` members:

* ``cNNNNNN.tokens.npy`` — every input id of the chunk's examples concatenated, ``[CLS] A [SEP]
  B [SEP]`` each, unpadded; ``uint16`` when the vocabulary has at most 65,536 entries, else
  ``int32`` (``token_dtype``);
* ``cNNNNNN.layout.npy`` — ``uint32`` of shape (n, 2): per example its length and the index of
  its first segment-B token (the length itself when there is no segment B). Segment ids are
  0 before that index and 1 from it on, which is all ELECTRA's layout can express;
* ``cNNNNNN.keys.npy`` — ``uint64`` of shape (n, 2): the document uid and the example's
  ordinal in its document (the example key ``{uid:016x}-{ordinal:05d}``).

A shard costs 2 bytes per token plus 24 per example and ~2 KB per chunk (``bytes_per_token`` in
the manifest's statistics). ``webdataset`` decodes the members with its default ``.npy``
decoder, ``tarfile`` + ``numpy.load`` read them too, and ``read_shard`` parses a shard from a
stream. Chunks and the examples in them are in key order, and tar headers are fixed (mtime 0,
uid/gid 0, mode 0644): the same examples always give byte-identical shards.
"""
from __future__ import annotations

from pipelines.schema.layout import (  # noqa: F401  (the contract, one namespace)
    shard_name, tokenizer_json, token_dtype, example_key, FORMAT_VERSION, READABLE_VERSIONS,
    MANIFEST_NAME, TOKENIZER_DIR, SHARDS_DIR, INDEX_DIR, REJECTED_DIR, WORK_DIR, SPLITS, TOKENIZER_JSON,
    VOCAB_TXT, TOKENIZER_CONFIG, TOKENIZER_FILES, TOKENS, LAYOUT, KEYS, MEMBERS, CHUNK_TOKENS, SPECIAL_TOKENS,
)
from pipelines.schema.generations import (  # noqa: F401  (the contract, one namespace)
    shard_generation, generations_of, generation_names, restricted,
)
from pipelines.schema.manifest import (  # noqa: F401  (the contract, one namespace)
    TokenizerInfo, ShardInfo, SplitInfo, GenerationInfo, Manifest, read_manifest_bytes,
)
from pipelines.schema.rejected import (  # noqa: F401  (the contract, one namespace)
    part_list_schema, list_name, is_list_name, RejectedInfo, RejectedIndex, RejectedList, part_list_bytes, read_part_list,
    rejected_list, write_rejected_lists, read_rejected,
)
from pipelines.schema.shards import (  # noqa: F401  (the contract, one namespace)
    Examples, chunk_bounds, encode_shard, decode_sample, read_shard,
)
