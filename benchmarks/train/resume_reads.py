"""Checkpoint bytes each rank reads from the run directory at resume, at 8, 64 and 512 ranks,
with and without the node's checkpoint mirror (``electra.checkpoint.mirror``).

    .venv/bin/python benchmarks/train/resume_reads.py [--ranks 8,64,512] [--ranks-per-node 8]
        [--scale 64] [--tensors 96] [--json OUT] [--smoke]

A checkpoint shaped like ELECTRA-Large's, its sizes divided by ``--scale`` (335M parameters: the
model states in bf16, 2 bytes per parameter; the optimiser state 12: fp32 masters and two
moments), in the two layouts a resume loads:

* **direct** (the same world size, stage and precision): ``mp_rank_00_model_states.pt``, which
  every rank loads, and one ZeRO partition per rank (the optimiser state / W), its own;
* **universal** (another world size): the model states and ``zero/optimizer_state.pt``, which
  every rank loads, and per parameter tensor (``--tensors`` of them, sizes in Large's
  proportions) ``zero/<name>/{fp32,exp_avg,exp_avg_sq}.pt``, which a rank loads only where its
  new ZeRO partition (its 1/W of the flattened parameters) overlaps the tensor, as DeepSpeed does.

For each world size W, one node's ranks (``--ranks-per-node`` processes from a fork server,
ranks 0..n-1 of W, with ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` as a launcher sets them) load their
files with ``torch.load``: directly (``data.node_cache: null``) and through ``CheckpointMirror``
(a node folder under the temp folder; told which parameters each rank loads, as the trainer
tells it). Each rank logs its opens of the run directory's files (``tests._opens``: a wrapper of
``open``, not the mirror's counters); opens weighted by file sizes are the bytes read from the
run directory. A node's reads depend only on its own ranks, so one node stands for each of the
W / n nodes: per rank = node / n, in total = node x W / n. The partition files are sized for W; the shared files do not depend on W.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

LARGE_PARAMS = 335_000_000
MB = 1 << 20


def write_checkpoint(root: Path, *, params: int, tensors: int, world: int) -> dict:
    """Both layouts' files under ``root`` but the partitions (``measure`` writes the node's), and
    what each rank loads: ``{"direct": f(rank), "universal": f(rank)}`` (module docstring)."""
    import torch

    (root / "zero").mkdir(parents=True, exist_ok=True)
    torch.save({"module": {"w": torch.zeros(params, dtype=torch.bfloat16)}}, root / "mp_rank_00_model_states.pt")
    torch.save({"param_groups": [{"lr": 1e-4}]}, root / "zero" / "optimizer_state.pt")
    # Large's tensors: a few big (embeddings, 1024x4096 feed-forward) and many small (biases, norms)
    weights = [4.0 if i % 3 == 0 else 1.0 if i % 3 == 1 else 0.01 for i in range(tensors)]
    sizes = [max(1, int(params * w / sum(weights))) for w in weights]
    starts = [sum(sizes[:i]) for i in range(tensors)]
    for i, n in enumerate(sizes):
        for state in ("fp32", "exp_avg", "exp_avg_sq"):
            (root / f"zero/t{i:03d}").mkdir(parents=True, exist_ok=True)
            torch.save({"param": torch.zeros(n)}, root / f"zero/t{i:03d}/{state}.pt")
    total, shared = sum(sizes), ["mp_rank_00_model_states.pt", "zero/optimizer_state.pt"]

    def universal(rank: int) -> list[str]:
        lo, hi = rank * total // world, (rank + 1) * total // world  # the rank's new partition
        overlap = [i for i in range(tensors) if starts[i] < hi and starts[i] + sizes[i] > lo]
        return shared + [f"zero/t{i:03d}/{state}.pt" for i in overlap for state in ("fp32", "exp_avg", "exp_avg_sq")]

    return {"direct": lambda rank: [shared[0], own(rank)], "universal": universal}


def own(rank: int) -> str:
    return f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"


def _rank(root, files, rank, world, per_node, mirror_root, log, done, param_loads):
    try:
        _load_files(root, files, rank, world, per_node, mirror_root, log, done, param_loads)
    except BaseException:  # the parent raises with it: a child's stderr may be nobody's
        Path(f"{log}.error-{rank}").write_text(traceback.format_exc())
        done.abort()
        raise


def _load_files(root, files, rank, world, per_node, mirror_root, log, done, param_loads):
    import torch

    from electra.checkpoint.mirror import CheckpointMirror
    from tests._opens import log_opens

    log_opens(root, log)
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(per_node),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": f"3{world:04d}"}
    mirror = None if mirror_root is None else CheckpointMirror.open(mirror_root, root, rank=rank, world_size=world,
                                                                     env=env, param_loads=param_loads)
    done.wait()  # every rank of the node has joined before any loads (the trainer's barrier)
    for rel in files:
        path = os.path.join(root, rel)
        if mirror is None:
            torch.load(path, weights_only=True)
        else:
            with mirror.local(path) as local:
                torch.load(local, weights_only=True)
    done.wait()
    if mirror is not None:
        mirror.close()


def node_bytes(root: Path, files_of_rank, *, world: int, per_node: int, mirror_root: str | None, log: Path) -> int:
    """Bytes one node's ranks read from ``root``: opens logged in the ranks x file sizes."""
    from tests._opens import opens

    # ranks start clean from a server process (forked from a test process, they inherited its
    # state: one failed in CI after other tests had run in that process)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "electra.checkpoint.mirror", "benchmarks.train.resume_reads"])
    from benchmarks.train.resume_reads import _rank as target  # by module name, also when run as a script

    done = ctx.Barrier(per_node)
    # per rank of the world, the parameters it loads (electra.distributed.deepspeed_glue.universal_loads); the
    # node's ranks' are what counts here
    loads = [sorted({rel.split("/")[1] for rel in files_of_rank(r) if rel.startswith("zero/t")})
             if r < per_node else [] for r in range(world)]
    procs = [ctx.Process(target=target, args=(str(root), files_of_rank(r), r, world, per_node, mirror_root, str(log),
                                             done, loads)) for r in range(per_node)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    errors = sorted(log.parent.glob(f"{log.name}.error-*"))
    if errors or any(p.exitcode for p in procs):
        raise RuntimeError(f"a rank process failed (exit codes {[p.exitcode for p in procs]}):\n"
                           + "\n".join(e.read_text() for e in errors))
    counted = opens(log)
    log.unlink(missing_ok=True)
    return sum(n * f.stat().st_size for f, n in counted.items())


def measure(worlds: list[int], *, per_node: int, scale: float, tensors: int) -> list[dict]:
    import torch

    params = int(LARGE_PARAMS / scale)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            root = Path(tmp) / f"w{world}" / "step_00001000"
            loads = write_checkpoint(root, params=params, tensors=tensors, world=world)
            for rank in range(per_node):  # this node's partitions, sized for W
                torch.save({"optimizer_state_dict": torch.zeros(3 * params // world)}, root / own(rank))
            for kind, files in loads.items():
                row = {"world": world, "layout": kind, "ranks_per_node": per_node}
                for mode, mirror_root in (("without", None), ("with", str(Path(tmp) / "node"))):
                    b = node_bytes(root, files, world=world, per_node=per_node, mirror_root=mirror_root,
                                   log=Path(tmp) / "opens.log")
                    row[f"{mode}_node_mb"] = round(b / MB, 2)
                    row[f"{mode}_per_rank_mb"] = round(b / per_node / MB, 2)
                    row[f"{mode}_total_gb"] = round(b * world / per_node / 1024 / MB, 3)
                row["ratio"] = round(row["without_node_mb"] / max(row["with_node_mb"], 1e-9), 2)
                rows.append(row)
    return rows


def report(rows: list[dict], *, scale: float) -> list[str]:
    out = [f"Resume: checkpoint bytes read from the run directory (ELECTRA-Large's sizes / {scale:g}; "
           "one node measured per world size)",
           f"{'ranks':>6} {'layout':>10} {'per rank, without':>18} {'per rank, with':>15} {'all ranks, without':>19} "
           f"{'all ranks, with':>16} {'ratio':>6}"]
    for r in rows:
        out.append(f"{r['world']:>6} {r['layout']:>10} {r['without_per_rank_mb']:>15.2f} MB {r['with_per_rank_mb']:>12.2f} MB "
                   f"{r['without_total_gb']:>16.3f} GB {r['with_total_gb']:>13.3f} GB {r['ratio']:>5.2f}x")
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="8,64,512")
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--scale", type=float, default=64.0, help="divide Large's sizes by this")
    p.add_argument("--tensors", type=int, default=96)
    p.add_argument("--json")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    worlds = [int(x) for x in args.ranks.split(",")]
    if args.smoke:
        worlds, args.ranks_per_node, args.scale, args.tensors = [2, 4], 2, 4096.0, 6
    rows = measure(worlds, per_node=args.ranks_per_node, scale=args.scale, tensors=args.tensors)
    print("\n".join(report(rows, scale=args.scale)), flush=True)
    result = {"resume_reads": rows, "args": vars(args)}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
