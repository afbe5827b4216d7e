"""Prefect flow ``pretrain``: resolve the job, launch the DeepSpeed trainer on a corpus, then
(optionally) queue evaluation of the checkpoints it wrote.

The flow only orders the pre-training runner's phases (``electra.run.runner``): ``resolve``
runs here, in the flow's process, so a bad key, a missing corpus or an impossible batch split
fails the flow run in seconds with the runner's one-line message; the other phases run in the
trainer command ``deepspeed --module electra.train`` (or plain ``python -m electra.train`` for
one process), a subprocess so DeepSpeed's launcher owns its ranks exactly as on the command
line. Rerunning the flow with the same ``out`` resumes from the run's ``latest`` checkpoint, on
any number of ranks, which is the trainer's own behaviour.
"""
from __future__ import annotations

if __name__ == "__main__":  # the old entry `python -m flows.pretrain`: before the imports below
    from flows._script import point_to_command

    point_to_command("pretrain")

import os
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger

REPO = Path(__file__).resolve().parents[1]


def trainer_command(*, config: str, data: str | list[str], out: str, num_gpus: int | None, hostfile: str | None,
                    max_steps: int | None, overrides: list[str], init_from: str | None = None,
                    resume_schedule: bool = False) -> list[str]:
    if num_gpus is None and hostfile is None:
        cmd = [sys.executable, "-m", "electra.train"]
    else:
        cmd = [str(Path(sys.executable).with_name("deepspeed"))]
        cmd += ["--hostfile", hostfile] if hostfile else ["--num_gpus", str(num_gpus)]
        cmd += ["--module", "electra.train"]
    cmd += ["--config", config]
    for location in [data] if isinstance(data, str) else data:
        cmd += ["--data", location]
    cmd += ["--out", out]
    if init_from is not None:
        cmd += ["--init-from", init_from] + (["--resume-schedule"] if resume_schedule else [])
    if max_steps is not None:
        cmd += ["--max-steps", str(max_steps)]
    for o in overrides:
        cmd += ["--set", o]
    return cmd


@flow(name="pretrain", log_prints=True)
def pretrain(config: str, data: str | list[str], out: str, num_gpus: int | None = None, hostfile: str | None = None,
             max_steps: int | None = None, overrides: list[str] | None = None,
             evaluate_glue_dir: str | None = None, evaluate_tasks: str | None = None,
             init_from: str | None = None, resume_schedule: bool = False) -> str:
    """Train (or resume) a run; returns the run directory. ``data``: one corpus or several (mixed by
    ``data.weights`` in ``overrides``); ``init_from``: a checkpoint to start from (electra.checkpoint.init_from)."""
    logger = get_run_logger()
    if hostfile is None:  # the world size is known here; with a hostfile the trainer resolves it
        from electra.run.job import PretrainJob
        import torch

        from electra.run.plan import check_fits_machine, resolve

        plan = resolve(PretrainJob(config, data, out, list(overrides or []), init_from, resume_schedule),
                       world_size=num_gpus or 1)
        # the trainer runs on this machine: a GPU preset without a GPU fails here, in one line
        if estimate := check_fits_machine(plan, cuda=torch.cuda.is_available()):
            logger.warning(estimate)
        logger.info("resolved: %s, corpus %s (seq_len %d), batch %s", config, data, plan.cfg.seq_len, plan.geometry)
    cmd = trainer_command(config=config, data=data, out=out, num_gpus=num_gpus, hostfile=hostfile,
                          max_steps=max_steps, overrides=overrides or [], init_from=init_from,
                          resume_schedule=resume_schedule)
    logger.info("$ %s", " ".join(cmd))
    subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    if evaluate_glue_dir:
        from flows.evaluate_new_checkpoints import evaluate_new_checkpoints

        evaluate_new_checkpoints(runs=str(Path(out).parent), glue_dir=evaluate_glue_dir, tasks=evaluate_tasks)
    return out
