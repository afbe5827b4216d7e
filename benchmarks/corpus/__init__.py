"""Build-corpus benchmarks: each stage against its baseline, the pipeline at scale (driver memory,
shuffles, store requests), node loss, languages, filters and deduplication."""
