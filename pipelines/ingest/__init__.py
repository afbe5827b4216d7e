"""Ingestion: raw sources → document rows (``docs/interfaces.md``).

``sources`` resolves what the user named into files with stable names and listed sizes;
``documents`` reads one file (or a byte range of it) into rows, through the format readers beside
it (``streams``, ``text_stream``, ``splitters``, ``json_array``, ``warc``, ``parquet``,
``seekable``, ``encodings``; Wikipedia dumps: ``mediawiki``, ``multistream``, ``wikitext``,
``wikinames``); ``members``, ``integrity`` and ``spill`` check compressed input in
the one pass that reads it, and ``listed`` holds every read to the listed size; ``dataset`` plans
the read tasks and runs them on Ray Data.
"""
from pipelines.ingest.dataset import ReadTask, ingest_dataset, plan_reads
from pipelines.ingest.documents import file_kind, iter_rows, read_documents, splittable
from pipelines.ingest.sources import SourceError, Sources, resolve_sources

__all__ = ["ReadTask", "SourceError", "Sources", "file_kind", "ingest_dataset", "iter_rows", "plan_reads",
           "read_documents", "resolve_sources", "splittable"]
