"""Neutral helpers that both ``pipelines`` and ``electra`` import: storage by URI, hashing, config loading.

Nothing here knows about corpora, models, Ray or Prefect.
"""
