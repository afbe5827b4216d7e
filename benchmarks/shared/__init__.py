"""What the benchmarks share: ``REPO`` (this checkout's root) and ``load_test_helper``; the
modules here hold the rest (``counting_s3``: a counting S3 proxy in front of moto; ``machine``: the
machine lines; ``memory``: RSS and Ray object probes; ``electra_batch``: the step benchmarks'
batch and baseline loss; ``node_loss_build``: one build on a two-node cluster with a lost node).

A benchmark imports only from here and, where it extends another benchmark of its own group,
that one; never a benchmark of another group (``tests/test_import_graph.py`` checks)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_test_helper(name: str) -> ModuleType:
    """The test suite's helper module ``tests.<name>`` (``"electra._corpus"``: the tiny-corpus
    writer), which some benchmarks share with the tests.

    ``tests`` is not an installed package: under pytest it imports as usual (the repository root
    is on ``sys.path``); a benchmark run as a script loads the file from this checkout instead,
    under a private module name, without touching ``sys.path``."""
    full = f"tests.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as exc:
        if not exc.name or not full.startswith(exc.name):  # a dependency of the helper is missing
            raise
    key = f"benchmarks._tests.{name}"
    if key in sys.modules:
        return sys.modules[key]
    path = REPO / "tests" / Path(*name.split(".")).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ModuleNotFoundError(f"{path}: the test helper {full} is not in this checkout", name=full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module
