"""Pre-training benchmarks: the step, the trainer, start-up and resume reads, the data mixture,
checkpoint conversion, and the reference loss curves."""
