"""Exact and near-duplicate removal over the parts of a stage, moving no text.

``exact`` (blake2b of the text) and ``near`` (verified MinHash-LSH + ``components``) each compute
small key rows per document, shuffle only those (``pipelines.engine.shuffle``), and mark the
removed documents in place in a second read of the parts (``marks``). The kept copy of every
group is the smallest uid, so the result depends only on the documents, never on block layout.
"""
from pipelines.dedup.exact import EXACT, digest_rows, exact_dedup, exact_marks
from pipelines.dedup.candidates import signature_rows
from pipelines.dedup.near import NEAR, bucket_edges, near_dedup

__all__ = ["EXACT", "NEAR", "bucket_edges", "digest_rows", "exact_dedup", "exact_marks", "near_dedup",
           "signature_rows"]
