"""What a lost Ray worker node costs build-corpus: tasks and store requests redone, over its share.

    .venv/bin/python -m benchmarks.corpus.node_loss                       # every kill point
    .venv/bin/python -m benchmarks.corpus.node_loss --kill mark --whole-stage --json out.json

One run builds the same generated corpus on fresh two-node loopback clusters (``ray start``
twice, one CPU each) through a counting S3 proxy in front of moto: once without a kill, then
once per kill point, the worker node SIGKILLed at a chosen call in the middle of ``exact_dedup``
(``tests/flows/test_build_corpus_node_loss.KILL_POINTS``, by the test's ``sitecustomize`` hook,
never by a clock). Side by side, per run and per stage:

* tasks: the Ray tasks the build ran, counted by the same hook on both nodes (every call of Ray
  Data's ``_map_task``, our shuffle's map writers and the tokenizer's tasks, a task killed in
  flight included): retries and lineage reconstructions are calls too, so the stage's count
  with a kill minus the clean build's is the work redone;
* store requests: the proxy's count between stage marks (the driver here runs the stages one by
  one and marks the proxy after each);
* the lost node's share: the tasks the worker node had started in that stage when it died
  (finished or in flight), and for requests the clean stage's requests pro rata to those tasks;
* attempts: the runner's own count in the stage's record (1: Ray's task retries and lineage
  reconstruction absorbed the loss; 2: the attempt failed and the stage ran again from scratch).

``--whole-stage`` adds, per kill point, the policy the issue measured against: the stage attempt
that met the loss is thrown away and the stage runs again from scratch (what the runner does when
a loss surfaces as ``NodeDiedError``/``ObjectLostError``: ``checks.transient``). It is emulated
here by running the stage a second time once the kill happened, so it counts the whole first
attempt (Ray's retries included) plus a whole second one: an upper bound of that policy's cost.

``--surfaced STAGE`` measures the path where a failure does surface: a transient error
(``StoreUnavailableError``, what the runner retries) raised by the part write of a block late in
``STAGE``'s writer pass, after the blocks before it finished (``tests/pipelines/orchestration/
_transient``'s hook; local Ray with one CPU, so "before" is a fact), the stage's parts then
resumed from the block journal (``pipelines.engine.block_journal``), side by side with the old
wipe (emulated: the journal switched off in the driver, so the retry runs the pass from scratch,
as when the runner emptied the stage's folder). Columns: the clean pass's part writes, the ones
the first attempt finished (blocks already running when the error came out finish too) and the
ones it left unfinished, the writes and read tasks the retry ran (after the driver started it),
and redone writes over unfinished ones.

Every build's shards must be byte-identical to the clean build's (sha256 from the manifests).
One build is ``benchmarks.shared.node_loss_build.build_once`` (shared with
``benchmarks/lifecycle/soak.py``); its driver runs in a subprocess (``--drive``): Ray's driver must
not share a process with the proxy, whose threads answer the workers.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.shared.node_loss_build import CFG, build_once, drive  # noqa: E402


# ----------------------------------------------------------------------------- the comparison
def redone(clean: dict[str, Any], killed: dict[str, Any]) -> dict[str, Any]:
    """The killed stage's tasks and requests redone (the kill's build minus the clean one's) over
    the lost node's share: the tasks it had started in that stage, and the clean stage's requests
    pro rata to them. Stages and shards compared whole as well."""
    stage = killed["killed_in"]
    c = next(s for s in clean["stages"] if s["stage"] == stage)
    k = next(s for s in killed["stages"] if s["stage"] == stage)
    lost = k["by_role"].get("kill", 0)
    share_requests = c["requests"] * lost / max(c["tasks"], 1)
    tasks, requests = k["tasks"] - c["tasks"], k["requests"] - c["requests"]
    return {"stage": stage, "attempts": k["attempts"], "runs": k["runs"], "stage_tasks": c["tasks"],
            "lost_share_tasks": lost, "tasks_redone": tasks, "tasks_ratio": round(tasks / max(lost, 1), 2),
            "stage_requests": c["requests"], "lost_share_requests": round(share_requests, 1),
            "requests_redone": requests, "requests_ratio": round(requests / max(share_requests, 1e-9), 2),
            "build_tasks_redone": sum(s["tasks"] for s in killed["stages"]) - sum(s["tasks"] for s in clean["stages"]),
            "identical_shards": killed["shards"] == clean["shards"] and bool(clean["shards"])}


def measure(kill_points: list[str], *, whole_stage: bool = False, num_docs: int = 200,
            tmp: Path | None = None) -> dict[str, Any]:
    """The clean build, then each kill point (and its whole-stage emulation with
    ``whole_stage``), each on a fresh cluster; returns the runs and ``redone`` per kill."""
    from benchmarks.shared.counting_s3 import CountingS3, pointed_at
    from synthetic import prose

    own = tmp is None
    tmp = Path(tempfile.mkdtemp(prefix="node_loss_")) if own else tmp
    try:
        with CountingS3(tmp / "moto.log") as s3, pointed_at(s3.env):  # sources written through the proxy
            from common import storage

            bucket = s3.bucket("nodeloss")
            raw = prose.write_corpus(tmp / "raw", num_docs=num_docs, seed=11)
            for rel in sorted(storage.find(str(raw))):
                storage.write_bytes(f"{bucket}/raw/{rel}", (raw / rel).read_bytes())
            runs = [("clean", None, False)] + [(k, k, False) for k in kill_points]
            runs += [(f"{k}/whole-stage", k, True) for k in kill_points if whole_stage]
            out: dict[str, Any] = {"runs": {}, "redone": {}}
            for name, kill, whole in runs:
                out["runs"][name] = build_once(name, s3=s3, source=f"{bucket}/raw", out=f"{bucket}/out/{name}",
                                               kill=kill, whole_stage=whole, tmp=tmp)
                if kill:
                    out["redone"][name] = redone(out["runs"]["clean"], out["runs"][name])
            return out
    finally:
        if own:
            shutil.rmtree(tmp, ignore_errors=True)


# The runner's attempts, one line each in $TRANSIENT_LOG (a script's prelude; also the runner tests')
ATTEMPT_LOG = """
from pipelines.orchestration import runner
_progress = runner.Progress


def progress(run, *, attempt):  # each attempt's start in the hook's log, in time order
    with open(os.environ["TRANSIENT_LOG"], "a") as f:
        f.write(f"attempt {run.stage.name} {attempt}\\n")
    return _progress(run, attempt=attempt)


runner.Progress = progress
"""
SURFACED_SCRIPT = """
import contextlib, json, os, sys
from pipelines.engine import block_journal, raydata
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
if sys.argv[4] == "wipe":  # the old policy: no journal, the retry runs the whole pass again
    block_journal.stage = lambda *a, **k: contextlib.nullcontext()
""" + ATTEMPT_LOG + """raydata.init_ray(num_cpus=1)
b = CorpusBuild(CorpusJob([sys.argv[1]], sys.argv[2], CorpusConfig.from_dict(json.loads(sys.argv[3]))))
m = b.run()
print("RESULT " + json.dumps({"attempts": {s: b.result(s).stats["attempts"] for s in b.order},
                              "shards": [s.sha256 for s in m.shards]}))
"""


def _surfaced_build(raw: Path, out: Path, log: Path, *, stage: str = "", nth: int = 0,
                    mode: str = "journal") -> dict[str, Any]:
    hook = REPO / "tests" / "pipelines" / "orchestration" / "_transient"
    env = {**os.environ, "PYTHONPATH": f"{hook}{os.pathsep}{REPO}", "TRANSIENT_LOG": str(log),
           "TRANSIENT_STAGE": stage, "TRANSIENT_NTH": str(nth), "TRANSIENT_ROW_GROUP_ROWS": "4"}
    done = subprocess.run([sys.executable, "-c", SURFACED_SCRIPT, str(raw), str(out), json.dumps(CFG), mode],
                          cwd=str(REPO), env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"surfaced build {mode} failed: {(done.stdout + done.stderr)[-3000:]}")
    result = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))[7:])
    return {**result, "log": log.read_text().splitlines()}


# The stage whose parts each stage's writer pass reads (no later stage reads them again).
SOURCE = {"filter": "ingest", "exact_dedup": "filter", "near_dedup": "exact_dedup", "pack": "near_dedup"}


def measure_surfaced(stages: list[str], *, num_docs: int = 150, tmp: Path | None = None) -> dict[str, Any]:
    """Per stage: a transient failure at its part write number ``writes - 3``, the retry with the
    block journal and with the old wipe (emulated); part writes and read tasks redone."""
    from synthetic import prose

    own = tmp is None
    tmp = Path(tempfile.mkdtemp(prefix="surfaced_")) if own else tmp
    try:
        raw = prose.write_corpus(tmp / "raw", num_docs=num_docs, seed=5)
        clean = _surfaced_build(raw, tmp / "clean", tmp / "clean.log")
        out: dict[str, Any] = {}
        for stage in stages:
            writes = sum(1 for x in clean["log"] if x.startswith(f"write {stage} "))
            nth = writes - 3
            for mode in ("wipe", "journal"):
                got = _surfaced_build(raw, tmp / f"{stage}-{mode}", tmp / f"{stage}-{mode}.log", stage=stage,
                                      nth=nth, mode=mode)
                lines = got["log"]
                retry = lines.index(f"attempt {stage} 2")
                first = [x for x in lines[:retry] if x.startswith(f"write {stage} ")]
                finished = len(first) - 1  # the first attempt's writes but the failed one
                after = lines[retry + 1:]
                redone = sum(1 for x in after if x.startswith(f"write {stage} "))
                unfinished = writes - finished
                out[f"{stage}/{mode}"] = {
                    "stage": stage, "attempts": got["attempts"][stage], "writes": writes, "finished": finished,
                    "unfinished": unfinished, "writes_redone": redone,
                    "reads_redone": sum(1 for x in after if x == f"read {SOURCE[stage]}"),
                    "ratio": round(redone / unfinished, 2), "identical_shards": got["shards"] == clean["shards"]}
        return out
    finally:
        if own:
            shutil.rmtree(tmp, ignore_errors=True)


def surfaced_table(result: dict[str, Any]) -> str:
    rows = [f"{'run':<16} {'att':>3} {'writes':>6} {'finished':>8} {'unfinished':>10} {'redone':>6} {'reads':>5} "
            f"{'ratio':>6} same"]
    for name, r in result.items():
        rows.append(f"{name:<16} {r['attempts']:>3} {r['writes']:>6} {r['finished']:>8} {r['unfinished']:>10} "
                    f"{r['writes_redone']:>6} {r['reads_redone']:>5} {r['ratio']:>6} "
                    f"{'yes' if r['identical_shards'] else 'NO'}")
    return "\n".join(rows)


def table(result: dict[str, Any]) -> str:
    head = (f"{'run':<30} {'stage':<12} {'att':>3} {'tasks':>6} {'lost':>5} {'redone':>6} {'ratio':>6} "
            f"{'reqs':>6} {'lost':>6} {'redone':>7} {'ratio':>6} same")
    rows = [head]
    for name, r in result["redone"].items():
        rows.append(f"{name:<30} {r['stage']:<12} {r['attempts']:>3} {r['stage_tasks']:>6} "
                    f"{r['lost_share_tasks']:>5} {r['tasks_redone']:>6} {r['tasks_ratio']:>6} "
                    f"{r['stage_requests']:>6} {r['lost_share_requests']:>6} {r['requests_redone']:>7} "
                    f"{r['requests_ratio']:>6} {'yes' if r['identical_shards'] else 'NO'}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    from benchmarks.shared.machine import finish, machine, machine_line
    from tests.flows.test_build_corpus_node_loss import KILL_POINTS

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kill", action="append", choices=sorted(KILL_POINTS),
                   help="kill point (repeatable; default: every one)")
    p.add_argument("--whole-stage", action="store_true",
                   help="also emulate the old policy: the stage that met the loss run again from scratch")
    p.add_argument("--docs", type=int, default=200, help="documents in the generated corpus")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--surfaced", action="append", choices=sorted(SOURCE),
                   help="instead: a transient failure surfaced late in this stage's writer pass (repeatable)")
    p.add_argument("--drive", help=argparse.SUPPRESS)  # the driver subprocess's spec
    args = p.parse_args(argv)
    if args.drive:
        return drive(json.loads(args.drive))
    m = machine()
    print(machine_line(m))
    if args.surfaced:
        print("local Ray, 1 CPU; a StoreUnavailableError at the stage's part write number (writes - 3)")
        surfaced = measure_surfaced(args.surfaced)
        print(surfaced_table(surfaced))
        return finish({"surfaced": surfaced, "machine": m}, args.json)
    print("cluster: two Ray nodes on loopback (ray start x2, 1 CPU each), moto S3 behind a counting proxy")
    result = measure(args.kill or list(KILL_POINTS), whole_stage=args.whole_stage, num_docs=args.docs)
    result["machine"] = m
    print(table(result))
    finish(result, args.json)


if __name__ == "__main__":
    main()
