"""The command lines: the top of the import graph (cli -> flows -> pipelines, electra, evaluation).

Each CLI parses flags generated from its job's dataclasses (``common.cli``), reports a user's
mistake as one ``<prog>: error: ...`` line with exit status 2 before anything starts, enters
``flows.runtime.prefect_runtime`` (the user's Prefect server or a private one for the run) and
calls its flow. Nothing imports ``cli``.

    python -m cli.build_corpus             electra-build-corpus
    python -m cli.evaluate                 electra-evaluate
    python -m cli.evaluate_new_checkpoints electra-evaluate-new
    python -m cli.demo                     make demo
"""
