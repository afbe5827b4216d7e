"""Fixtures shared by the trainer's end-to-end tests (a module's own ``corpus`` fixture wins)."""
from __future__ import annotations

import pytest

from tests.electra._corpus import write_tiny_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """35 training examples in 5 shards of awkward sizes (divisible by neither 2 ranks nor 2 x 2
    workers) and 11 validation examples, at seq_len 32."""
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"), seq_len=32, train_shards=(9, 7, 5, 11, 3),
                             validation_shards=(6, 5))
