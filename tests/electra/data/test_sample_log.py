"""The sample log across a resume: each step once, from the ranks that trained it.

A run on 4 ranks killed after step 5 with its last checkpoint at step 3, resumed on 2 ranks:
the union of a step's keys over every rank file must be what was trained, so the files of ranks
2 and 3 must end at step 3 like those of ranks 0 and 1 (which the resumed ranks cut themselves).
"""
from __future__ import annotations

import json

from electra.data.sample_log import SampleLog, read_sample_log, sample_log_path


def _killed_run(run_dir, world: int, steps: int) -> dict[int, dict[int, list[tuple[int, ...]]]]:
    """Rank logs as a run of ``world`` ranks leaves them after ``steps`` steps: rank r's key of
    step s is (100 * s + r, 0)."""
    logs = {}
    for r in range(world):
        log = SampleLog(run_dir, r, enabled=True)
        for s in range(1, steps + 1):
            log.add([(100 * s + r, 0)])
            log.end_step(s)
        log.close()
        logs[r] = read_sample_log(run_dir, r)
    return logs


def _union(run_dir, step: int) -> list[tuple[int, ...]]:
    files = sorted((run_dir / "samples").glob("rank*.jsonl"))
    return [k for f in files for line in f.read_text().splitlines()
            if (rec := json.loads(line))["step"] == step for k in map(tuple, rec["keys"])]


def test_a_resume_on_fewer_ranks_cuts_the_departed_ranks_logs(tmp_path):
    before = _killed_run(tmp_path, world=4, steps=5)
    assert sorted(before[3]) == [1, 2, 3, 4, 5]
    resumed = [SampleLog(tmp_path, r, enabled=True, resume_step=3, world_size=2) for r in (1, 0)]  # any order
    for r, log in zip((1, 0), resumed):
        for s in (4, 5):
            log.add([(100 * s + 10 + r, 0)])  # what the resumed 2 ranks train
            log.end_step(s)
        log.close()
    for r in (2, 3):  # departed: cut at the resume step, earlier steps kept as trained
        assert read_sample_log(tmp_path, r) == {s: before[r][s] for s in (1, 2, 3)}
    for s in (1, 2, 3):
        assert sorted(_union(tmp_path, s)) == [(100 * s + r, 0) for r in range(4)]
    for s in (4, 5):  # only the two ranks that trained it
        assert sorted(_union(tmp_path, s)) == [(100 * s + 10, 0), (100 * s + 11, 0)]


def test_only_rank_0_cuts_other_ranks_and_a_disabled_log_is_cut_too(tmp_path):
    _killed_run(tmp_path, world=3, steps=4)
    SampleLog(tmp_path, 1, enabled=False, resume_step=2, world_size=1).close()
    assert sorted(read_sample_log(tmp_path, 1)) == [1, 2]  # its own file, though it logs no more
    assert sorted(read_sample_log(tmp_path, 2)) == [1, 2, 3, 4]  # not rank 0: others' files untouched
    assert sorted(read_sample_log(tmp_path, 0)) == [1, 2, 3, 4]
    SampleLog(tmp_path, 0, enabled=False, resume_step=2, world_size=1).close()
    assert [sorted(read_sample_log(tmp_path, r)) for r in (0, 1, 2)] == [[1, 2]] * 3
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == [f"rank{r}.jsonl" for r in range(3)]


def test_a_resume_on_more_ranks_keeps_every_earlier_step(tmp_path):
    _killed_run(tmp_path, world=1, steps=3)
    for r in (0, 1):
        SampleLog(tmp_path, r, enabled=True, resume_step=3, world_size=2).close()
    assert sorted(read_sample_log(tmp_path, 0)) == [1, 2, 3]
    assert sample_log_path(tmp_path, 1).read_text() == ""  # a new rank's log starts empty


def test_each_record_names_the_generation_of_each_example(tmp_path):
    from electra.data.sample_log import read_sample_generations

    log = SampleLog(tmp_path, 0, enabled=True)
    log.add([(1, 0), (2, 0)], ["g0", "g1"])
    log.add([(3, 1)])  # a batch without generations (none known): named ""
    log.end_step(1)
    log.close()
    rec = json.loads(sample_log_path(tmp_path, 0).read_text())
    assert rec == {"step": 1, "keys": [[1, 0], [2, 0], [3, 1]], "generation": ["g0", "g1", ""]}
    assert read_sample_generations(tmp_path, 0) == {1: ["g0", "g1", ""]}
