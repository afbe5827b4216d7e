"""Normalisation and quality filtering of documents: small blocks with one interface.

``normalize_text`` (``normalize``) canonicalises a document; ``filter_batch`` (``base``) runs the
blocks ``filter.blocks`` lists, in order, on every document. Each block is one module here that
declares itself (``registry``; docs/add-a-filter.md) and implements ``block``'s interface: ``gopher_quality``, ``gopher_repetition``,
``c4``, ``fineweb`` (datatrove's heuristics and default thresholds), ``code`` (source code),
``language`` (py3langid), ``lm_quality`` (a Kneser-Ney trigram model's context gain) and,
optionally, ``pii``. Each block's module documents its rules. Decontamination against
evaluation sets (``pipelines.decontaminate``) runs after the blocks, in the same stage.
"""
from pipelines.filters.base import build_blocks, filter_batch, run_blocks
from pipelines.filters.block import Block, Doc, Verdict
from pipelines.filters.normalize import UNICODE_FORMS, normalize_text

__all__ = ["UNICODE_FORMS", "Block", "Doc", "Verdict", "build_blocks", "filter_batch", "normalize_text",
           "run_blocks"]
