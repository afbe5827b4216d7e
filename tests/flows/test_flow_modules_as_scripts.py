"""``python -m flows.NAME``, the entry of older docs and scripts, no longer imports the flow, does
nothing and exits 0: every flow module run as a script answers at once, before Prefect is even
imported (so no Prefect server can start), with one line naming the command that runs its flow
(with the arguments given) and exit status 2. The flow modules may not import ``cli``
(tests/test_import_graph.py), so they name the command rather than run it."""
from __future__ import annotations

import ast
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# flow module -> the command that runs its flow, and that command's module form
EXPECTED = {"build_corpus": ("electra-build-corpus", "cli.build_corpus"),
            "pretrain": ("electra-train", "electra.train"),
            "evaluate": ("electra-evaluate", "cli.evaluate"),
            "evaluate_new_checkpoints": ("electra-evaluate-new", "cli.evaluate_new_checkpoints")}
ARGS = {"none": [], "help": ["--help"], "flags": ["--source", "raw docs", "--out", "corpora/c"]}
# The module run as __main__ in a fresh interpreter, then: was Prefect ever imported?
PROBE = ("import runpy, sys\nmodule = sys.argv.pop(1)\ntry:\n    runpy.run_module(module, run_name='__main__', "
         "alter_sys=True)\nfinally:\n    print('prefect imported:', 'prefect' in sys.modules)\n")


def defines_flow(path: Path) -> bool:
    def is_flow(d: ast.expr) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        return isinstance(d, ast.Name) and d.id == "flow" or isinstance(d, ast.Attribute) and d.attr == "flow"

    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(is_flow(d) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for d in node.decorator_list)


def python(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(Path.home())}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_every_flow_module_is_covered_and_names_a_real_command():
    flows = {p.stem for p in (REPO / "flows").glob("*.py") if defines_flow(p)}
    assert flows == set(EXPECTED)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    for command, module in EXPECTED.values():
        assert scripts[command] == f"{module}:main"


@pytest.mark.parametrize("args", sorted(ARGS))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_flow_module_run_as_a_script_names_its_command_and_exits_2(name, args):
    p = python("-m", f"flows.{name}", *ARGS[args])
    command, module = EXPECTED[name]
    given = shlex.join(ARGS[args]) or "--help"
    assert (p.returncode, p.stdout) == (2, ""), p.stderr[-2000:]
    assert p.stderr.splitlines() == [f"python -m flows.{name}: error: this module holds the Prefect flow, not a "
                                     f"command line; run {command} {given} (or python -m {module} {given})"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_answer_comes_before_prefect_is_imported(name):
    p = python("-c", PROBE, f"flows.{name}", "--out", "x")
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["prefect imported: False"]
    assert f"run {EXPECTED[name][0]} --out x" in p.stderr
