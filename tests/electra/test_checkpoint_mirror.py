"""electra/checkpoint_mirror.py: the files every rank loads at resume are read once per node.

Ranks are real processes (forked) on one simulated node (``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``,
as the launchers set them), loading a checkpoint-shaped folder through the mirror. The source's
opens are counted by a wrapper of ``open`` in the ranks (``tests._opens``), not by the mirror; what each rank
loaded is compared with the parent's own ``torch.load`` of the source. Every wait is on an event
or a barrier; a timeout only guards against a hang."""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch

from electra import checkpoint_mirror as cm
from tests._opens import log_opens, opens

TIMEOUT = 120
SHARED = ["mp_rank_00_model_states.pt", "zero/w/fp32.pt", "zero/w/exp_avg.pt", "zero/b/fp32.pt",
          "zero/optimizer_state.pt"]


def own(rank: int) -> str:
    return f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"


def env(rank: int, ranks_on_node: int, port: str = "29777") -> dict:
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(ranks_on_node),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}


@pytest.fixture
def load_dir(tmp_path) -> Path:
    """A universal-checkpoint-shaped folder: shared files and one partition file per rank."""
    root = tmp_path / "step_00000010.universal"
    gen = torch.Generator().manual_seed(0)
    for i, rel in enumerate([*SHARED, own(0), own(1), own(2)]):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"param": torch.randn(64 + i, generator=gen), "name": rel}, root / rel)
    return root


def _rank(load_dir, root, rank, world, files, results, loaded, close, log):
    log_opens(load_dir, log)
    mirror = cm.CheckpointMirror.open(root, load_dir, rank=rank, world_size=world, env=env(rank, world))
    loaded.wait(TIMEOUT)  # every rank has joined before any loads (the runner's barrier)
    out = {}
    for rel in files:
        with mirror.local(load_dir / rel) as local:
            out[rel] = (torch.load(local, weights_only=True), local)
    results.put((rank, out, mirror.copied))
    loaded.wait(TIMEOUT)
    close.wait(TIMEOUT)
    mirror.close()


def run_node(load_dir: Path, root: str, world: int, log: Path, *, before_close=None) -> dict:
    ctx = mp.get_context("fork")
    loaded, close, results = ctx.Barrier(world + 1), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(load_dir, root, r, world, [*SHARED, own(r)], results, loaded, close,
                                                 log))
             for r in range(world)]
    for p in procs:
        p.start()
    loaded.wait(TIMEOUT)
    got = [results.get(timeout=TIMEOUT) for _ in range(world)]
    loaded.wait(TIMEOUT)
    if before_close is not None:
        before_close()
    close.set()
    for p in procs:
        p.join(TIMEOUT)
        assert p.exitcode == 0
    return {rank: (files, copied) for rank, files, copied in got}


def test_each_shared_file_is_read_once_per_node_and_the_copies_go(load_dir, tmp_path):
    root = str(tmp_path / "node")
    left_before_close = []

    def look():  # the per-parameter copies went with their last reader; the model states stay
        left_before_close.extend(p.name for p in Path(root).rglob("*.pt"))

    out = run_node(load_dir, root, 3, tmp_path / "opens.log", before_close=look)
    read = opens(tmp_path / "opens.log")
    for rel in SHARED:
        assert read[load_dir / rel] == 1, rel  # once for the node's 3 ranks
    for r in range(3):
        assert read[load_dir / own(r)] == 1  # a rank's own partition: read by it, directly
    assert sum(copied for _, copied in out.values()) == len(SHARED)
    for rank, (files, _) in out.items():
        for rel in [*SHARED, own(rank)]:
            want = torch.load(load_dir / rel, weights_only=True)
            value, path = files[rel]
            assert value["name"] == rel and torch.equal(value["param"], want["param"])
            assert path.startswith(root) == (rel in SHARED), (rel, path)
    assert len(left_before_close) == 1  # the model-states copy, loaded twice on the universal path
    assert not any(Path(root).iterdir()), list(Path(root).rglob("*"))  # the last rank to close removed it


def test_without_the_mirror_every_rank_reads_every_shared_file(load_dir, tmp_path):
    """The counter's control, and what ``data.node_cache: null`` means: one read per rank."""
    assert cm.CheckpointMirror.open(None, load_dir, rank=0, world_size=2, env=env(0, 2)) is None
    assert cm.CheckpointMirror.open(str(tmp_path / "n"), load_dir, rank=0, world_size=1, env={}) is None
    log = tmp_path / "opens.log"

    def rank():
        log_opens(load_dir, log)
        for rel in SHARED:
            torch.load(load_dir / rel, weights_only=True)

    procs = [mp.get_context("fork").Process(target=rank) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT)
        assert p.exitcode == 0
    read = opens(log)
    assert all(read[load_dir / rel] == 3 for rel in SHARED), read
    assert not (tmp_path / "n").exists()


def test_a_copy_that_cannot_be_made_is_read_from_the_source_with_one_warning(load_dir, tmp_path, caplog):
    root = tmp_path / "node"
    mirror = cm.CheckpointMirror.open(str(root), load_dir, rank=0, world_size=2, env=env(0, 2))
    try:
        for rel in SHARED[:2]:  # the copies' temporary names are taken by folders: every write fails
            os.mkdir(os.path.join(mirror.folder, cm._digest(rel) + ".pt.tmp"))
        with caplog.at_level(logging.WARNING, logger="electra.checkpoint_mirror"):
            for rel in SHARED[:2]:
                with mirror.local(load_dir / rel) as local:
                    assert local == str(load_dir / rel)
                    assert torch.load(local, weights_only=True)["name"] == rel
            with mirror.local(load_dir / SHARED[2]) as local:  # the others still mirror
                assert local.startswith(str(root))
        assert len([r for r in caplog.records if "read from" in r.getMessage()]) == 1
        assert mirror.copied == 1
    finally:
        mirror.close()
    assert not any(root.iterdir())


def test_files_outside_the_load_folder_are_read_as_they_are(load_dir, tmp_path):
    mirror = cm.CheckpointMirror.open(str(tmp_path / "node"), load_dir, rank=1, world_size=2, env=env(1, 2))
    try:
        elsewhere = tmp_path / "other.pt"
        torch.save({"x": 1}, elsewhere)
        with mirror.local(elsewhere) as local:
            assert local == str(elsewhere)
        assert mirror.copied == 0
    finally:
        mirror.close()


def test_a_copy_deleted_by_its_count_stays_readable_to_a_load_already_given_it(load_dir, tmp_path):
    """A rank that loads a file twice makes the count come early: the copy is deleted while
    another load holds its path, which must still open (each load reads its own link)."""
    root = tmp_path / "node"
    mirror = cm.CheckpointMirror.open(str(root), load_dir, rank=0, world_size=2, env=env(0, 2))
    rel = "zero/w/fp32.pt"
    try:
        with mirror.local(load_dir / rel) as held:
            for _ in range(2):  # two more loads: the count (2 ranks) is reached, the copy deleted
                with mirror.local(load_dir / rel) as local:
                    assert torch.load(local, weights_only=True)["name"] == rel
            assert not (Path(mirror.folder) / (cm._digest(rel) + ".pt")).exists()
            assert torch.load(held, weights_only=True)["name"] == rel
        assert mirror.copied == 1
        assert not list(Path(mirror.folder).glob("*.pt"))  # no copy nor link left (a count, till close)
    finally:
        mirror.close()
