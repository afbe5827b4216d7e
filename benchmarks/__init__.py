"""The project's benchmarks, grouped by job: ``corpus`` (build-corpus), ``train`` (pre-training),
``evaluate`` (fine-tuning, evaluation, the ELECTRA-vs-MLM comparison and the demo's checks),
``gpu`` (the GPU benchmark and check), ``lifecycle`` (build and train together under faults), and
``shared`` (the helpers they share). The package is installed with the project, so
``python benchmarks/GROUP/NAME.py`` works from any folder without a ``sys.path`` patch, as does
``python -m benchmarks.GROUP.NAME``."""
