"""``python -m flows.NAME``: a flow module run as a script names the command that runs its flow.

The command lines live in ``cli/`` (installed as ``electra-*``) and, for pre-training, in
``electra.train``; a flow module may not import ``cli`` (imports go one way, ``cli -> flows``:
tests/test_import_graph.py). Older docs and scripts ran ``python -m flows.build_corpus ...``,
which imported the flow, did nothing and exited 0 (after tens of seconds of imports on a busy
machine). Each flow module now hands such a run here before its own imports (Prefect, Ray, torch),
so the answer comes at once and no Prefect server starts: one line on stderr naming the command,
with the arguments given, and exit status 2 (a usage error, as argparse's).
"""
from __future__ import annotations

import shlex
import sys
from typing import NoReturn

# flow module -> (installed command, its module form)
COMMANDS = {
    "build_corpus": ("electra-build-corpus", "cli.build_corpus"),
    "pretrain": ("electra-train", "electra.train"),
    "evaluate": ("electra-evaluate", "cli.evaluate"),
    "evaluate_new_checkpoints": ("electra-evaluate-new", "cli.evaluate_new_checkpoints"),
}


def point_to_command(flow_module: str, argv: list[str] | None = None) -> NoReturn:
    """Say which command runs ``flows.<flow_module>``'s flow, then exit 2."""
    command, module = COMMANDS[flow_module]
    args = shlex.join(sys.argv[1:] if argv is None else argv) or "--help"
    print(f"python -m flows.{flow_module}: error: this module holds the Prefect flow, not a command line; run "
          f"{command} {args} (or python -m {module} {args})", file=sys.stderr)
    sys.exit(2)
