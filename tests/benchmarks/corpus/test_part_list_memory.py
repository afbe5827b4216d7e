"""benchmarks/corpus/part_list_memory.py at small sizes: the shipped part lists against the previous
in-marker lists, on the same parts (the benchmark itself checks that both list the same parts)."""
from __future__ import annotations

from benchmarks.corpus import part_list_memory
import pytest

# slow: a benchmark's smoke run: rerun when its benchmark changes, not on every change (make test-all)
pytestmark = pytest.mark.slow


def test_lists_beside_the_marker_hold_less_and_the_marker_stays_small(tmp_path):
    small, big = (part_list_memory.measure(n, tmp_path) for n in (2_000, 8_000))
    for r in (small, big):
        # the marker names its lists: its size does not follow the parts; the lists do
        assert r["marker_kb_after"] < 2 and r["marker_kb_before"] > 100 * r["marker_kb_after"]
        assert r["held_marker_mb_after"] < 0.01 < r["held_marker_mb_before"]
        assert r["held_input_mb_after"] * 3 < r["held_input_mb_before"]
        assert r["publish_mb_after"] * 5 < r["publish_mb_before"]
    # what still grows (a list being read, the publish's copy) grows linearly, not faster
    assert big["held_input_mb_after"] < 5 * small["held_input_mb_after"]
    assert big["held_marker_mb_after"] < 2 * small["held_marker_mb_after"]
