"""Exact and near-duplicate removal (``docs/interfaces.md``)."""
from pipelines.dedup.exact import (EXACT, NEAR, Marks, bucket_edges, digest_rows, exact_dedup, exact_marks,
                                   mark_documents, near_dedup, signature_buckets)

__all__ = ["EXACT", "NEAR", "Marks", "bucket_edges", "digest_rows", "exact_dedup", "exact_marks",
           "mark_documents", "near_dedup", "signature_buckets"]
