"""electra/checkpoint/mirror.py: the files every rank loads at resume are read once per node.

Ranks are real processes (from a fork server) on one simulated node (``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``,
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

from electra.checkpoint import mirror as cm
from tests._opens import log_opens, opens

TIMEOUT = 120
SHARED = ["mp_rank_00_model_states.pt", "zero/optimizer_state.pt"]  # every rank loads them
PARAMS = ["zero/w/fp32.pt", "zero/w/exp_avg.pt", "zero/b/fp32.pt", "zero/b/exp_avg.pt"]
# as DeepSpeed's universal load: a parameter's files only on the ranks its partition overlaps
OVERLAPS = {0: PARAMS[:2], 1: PARAMS, 2: PARAMS[2:]}


def own(rank: int) -> str:
    return f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"


def loads(rank: int) -> list[str]:
    return [*SHARED, *OVERLAPS[rank], own(rank)]


def env(rank: int, ranks_on_node: int, port: str = "29777") -> dict:
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(ranks_on_node),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}


@pytest.fixture
def load_dir(tmp_path) -> Path:
    """A universal-checkpoint-shaped folder (plus one partition file per rank, as a direct load has)."""
    root = tmp_path / "step_00000010.universal"
    gen = torch.Generator().manual_seed(0)
    for i, rel in enumerate([*SHARED, *PARAMS, own(0), own(1), own(2)]):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"param": torch.randn(64 + i, generator=gen), "name": rel}, root / rel)
    return root


def param_loads(world: int) -> list[list[str]]:
    """Per rank, the parameters whose files it loads (what ``electra.distributed.deepspeed_glue.universal_loads`` gives)."""
    return [sorted({rel.split("/")[1] for rel in OVERLAPS[r]}) for r in range(world)]


def _rank(load_dir, root, rank, world, files, results, loaded, close, log):
    log_opens(load_dir, log)
    mirror = cm.CheckpointMirror.open(root, load_dir, rank=rank, world_size=world, env=env(rank, world),
                                      param_loads=param_loads(world))
    loaded.wait(TIMEOUT)  # every rank has joined before any loads (the runner's barrier)
    out = {}
    for rel in files:
        with mirror.local(load_dir / rel) as local:
            out[rel] = (torch.load(local, weights_only=True), local)
    results.put((rank, out, mirror.copied))
    loaded.wait(TIMEOUT)
    close.wait(TIMEOUT)
    mirror.close()


def clean_context():
    """Rank processes from a fork server: forked from a test process that had run other tests
    (Ray among them), ranks did their work and then exited with status 1 in CI."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "electra.checkpoint.mirror", "tests.electra.checkpoint.test_mirror"])
    return ctx


def _load_shared(load_dir, log):
    log_opens(load_dir, log)
    for rel in SHARED:
        torch.load(load_dir / rel, weights_only=True)


def run_node(load_dir: Path, root: str, world: int, log: Path, *, before_close=None) -> dict:
    ctx = clean_context()
    loaded, close, results = ctx.Barrier(world + 1), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(load_dir, root, r, world, loads(r), results, loaded, close, log))
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


def test_each_file_every_rank_loads_is_read_once_per_node_and_the_copies_go(load_dir, tmp_path):
    root = str(tmp_path / "node")
    left_before_close = []

    def look():
        left_before_close.extend(p.name for p in Path(root).rglob("*.pt"))

    out = run_node(load_dir, root, 3, tmp_path / "opens.log", before_close=look)
    read = opens(tmp_path / "opens.log")
    for rel in SHARED:
        assert read[load_dir / rel] == 1, rel  # once for the node's 3 ranks
    for rel in PARAMS:  # loaded by two of the node's ranks: read once
        assert read[load_dir / rel] == 1, rel
    for r in range(3):
        assert read[load_dir / own(r)] == 1  # a rank's own partition: read by it, directly
    assert sum(copied for _, copied in out.values()) == len(SHARED) + len(PARAMS)
    for rank, (files, _) in out.items():
        assert sorted(files) == sorted(loads(rank))
        for rel, (value, path) in files.items():
            want = torch.load(load_dir / rel, weights_only=True)
            assert value["name"] == rel and torch.equal(value["param"], want["param"])
            assert path.startswith(root) == (rel in SHARED or rel in PARAMS), (rel, path)
    # a parameter's copy went with its last loader; the others stay until the node's last rank closes
    assert len(left_before_close) == len(SHARED)
    assert not any(Path(root).iterdir()), list(Path(root).rglob("*"))  # the last rank to close removed them


def test_without_the_mirror_every_rank_reads_every_shared_file(load_dir, tmp_path):
    """The counter's control, and what ``data.node_cache: null`` means: one read per rank."""
    assert cm.CheckpointMirror.open(None, load_dir, rank=0, world_size=2, env=env(0, 2)) is None
    assert cm.CheckpointMirror.open(str(tmp_path / "n"), load_dir, rank=0, world_size=1, env={}) is None
    log = tmp_path / "opens.log"

    procs = [clean_context().Process(target=_load_shared, args=(load_dir, log)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT)
        assert p.exitcode == 0
    read = opens(log)
    assert all(read[load_dir / rel] == 3 for rel in SHARED), read
    assert not (tmp_path / "n").exists()


def test_a_parameter_one_rank_of_the_node_loads_is_read_from_the_source(load_dir, tmp_path):
    loads = [["w"], ["w", "b"], ["x"], ["b"]]  # ranks 0-1 on this node, 2-3 on the next
    mirror = cm.CheckpointMirror.open(str(tmp_path / "node"), load_dir, rank=1, world_size=4, env=env(1, 2),
                                      param_loads=loads)
    try:
        assert mirror.param_counts == {"w": 2}  # "b": one rank of this node (and one of the next)
        with mirror.local(load_dir / "zero/b/fp32.pt") as local:
            assert local == str(load_dir / "zero/b/fp32.pt")
        with mirror.local(load_dir / "zero/w/fp32.pt") as local:
            assert local.startswith(str(tmp_path / "node"))
    finally:
        mirror.close()


def test_a_copy_deleted_by_its_count_stays_readable_to_a_load_already_given_it(load_dir, tmp_path):
    """A rank that loads a file twice makes the count come early: the copy is deleted while
    another load holds its path, which must still open (each load reads its own link)."""
    mirror = cm.CheckpointMirror.open(str(tmp_path / "node"), load_dir, rank=0, world_size=2, env=env(0, 2),
                                      param_loads=[["w"], ["w"]])
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


def test_a_copy_that_cannot_be_made_is_read_from_the_source_with_one_warning(load_dir, tmp_path, caplog):
    root = tmp_path / "node"
    mirror = cm.CheckpointMirror.open(str(root), load_dir, rank=0, world_size=2, env=env(0, 2))
    try:
        blocked = SHARED[0]  # its copy's temporary name is taken by a folder: the write fails
        os.mkdir(os.path.join(mirror.folder, cm._digest(blocked) + ".pt.tmp"))
        with caplog.at_level(logging.WARNING, logger="electra.checkpoint.mirror"):
            for _ in range(2):
                with mirror.local(load_dir / blocked) as local:
                    assert local == str(load_dir / blocked)
                    assert torch.load(local, weights_only=True)["name"] == blocked
            with mirror.local(load_dir / SHARED[1]) as local:  # the other still mirrors
                assert local.startswith(str(root))
        assert len([r for r in caplog.records if "read from" in r.getMessage()]) == 1
        assert mirror.copied == 1
    finally:
        mirror.close()
    assert not any(root.iterdir())


def test_no_mirror_where_its_folder_cannot_be_made(load_dir, tmp_path, caplog):
    (tmp_path / "file").write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="electra.checkpoint.mirror"):
        mirror = cm.CheckpointMirror.open(str(tmp_path / "file" / "node"), load_dir, rank=0, world_size=2,
                                          env=env(0, 2))
    assert mirror is None and "none on this node" in caplog.text


def test_files_outside_the_load_folder_are_read_as_they_are(load_dir, tmp_path):
    mirror = cm.CheckpointMirror.open(str(tmp_path / "node"), load_dir, rank=1, world_size=2, env=env(1, 2))
    try:
        elsewhere = tmp_path / "mp_rank_00_model_states.pt"  # a shared name, but not under the load folder
        torch.save({"x": 1}, elsewhere)
        with mirror.local(elsewhere) as local:
            assert local == str(elsewhere)
        assert mirror.copied == 0
    finally:
        mirror.close()
