"""Evaluation benchmarks: fine-tuning, the evaluation scan, the ELECTRA-vs-MLM comparison and the
demo's seeds and probes."""
