"""Decontamination: drop documents that share an n-gram with the evaluation sets (``protected``, ``check``)."""
