"""The import graph of the project's packages, read from the source with ``ast`` (no module is
imported, so an import inside a function counts as much as one at the top of a file).

Two rules: imports go one way (``cli → flows → {pipelines, electra, evaluation} → common``;
``evaluation`` may use ``electra``; ``electra`` takes only the corpus contract from ``pipelines``:
the shard schema and the tokenizer folder's files (``pipelines.tokenizer_files``);
``synthetic`` serves demo, tests and benchmarks and uses only ``common``), and no two files import
each other, directly or through others (a cycle hidden in a function-level import still ties the
two files together: neither can be understood, moved or tested without the other).

Inside ``electra`` the rooms import one way too: the run (``electra.run``) uses everything below
it; checkpoints use the model, the data stream and the distributed plumbing; the data stream uses
the distributed plumbing; the model and the plumbing use only the config. The entry points
(``electra.train``, ``electra.random_init``) sit above the run.

``benchmarks`` may use the whole project, and nothing in the project uses it. Its groups
(``benchmarks.corpus``, ``.train``, ``.evaluate``, ``.gpu``, ``.lifecycle``) import only their
own group and ``benchmarks.shared`` (the helpers, which import nothing else of ``benchmarks``): a
helper two groups need lives in ``shared``, not in one group's benchmark.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "pipelines", "electra", "evaluation", "flows", "cli", "synthetic", "benchmarks")
# What each package may import from the project (a prefix allows the package or module and
# everything below it).
ALLOWED = {
    "common": ("common",),
    "pipelines": ("common", "pipelines"),
    "electra": ("common", "electra", "pipelines.schema", "pipelines.tokenizer_files"),
    "evaluation": ("common", "electra", "evaluation", "pipelines.schema", "pipelines.tokenizer_files"),
    "flows": ("common", "pipelines", "electra", "evaluation", "flows"),
    "cli": tuple(p for p in PACKAGES if p != "benchmarks"),
    "synthetic": ("common", "synthetic"),
    "benchmarks": PACKAGES,
}
# The rooms of ``electra`` and what each may import from the others (besides itself and
# ``electra.config``); a module directly in ``electra/`` must be one of ELECTRA_TOP.
ELECTRA_ROOMS = {
    "model": (),
    "distributed": (),
    "data": ("distributed",),
    "checkpoint": ("model", "data", "distributed"),
    "run": ("model", "data", "distributed", "checkpoint"),
}
ELECTRA_TOP = {"electra", "electra.config", "electra.train", "electra.random_init"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES if (REPO / pkg).is_dir()
            for p in sorted((REPO / pkg).rglob("*.py"))}


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """For each project module, the project modules it imports (anywhere in the file)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(t for a in node.names if (t := resolve(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package[:len(package) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    # ``from pkg import module`` imports the module; ``from module import name`` the module
                    if target := resolve(f"{base}.{alias.name}") or resolve(base):
                        targets.add(target)
        edges[name] = targets - {name}
    return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module are import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_imports_go_one_way():
    edges = import_edges(project_modules())
    wrong = sorted(f"{source} imports {target}" for source, targets in edges.items() for target in targets
                   if not any(target == a or target.startswith(a + ".") for a in ALLOWED[source.split(".")[0]]))
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def electra_room(module: str) -> str | None:
    """``electra.data.corpus`` (and the package ``electra.data``) -> ``data``; None for a module
    directly in ``electra/``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ELECTRA_ROOMS) else None


def room_violations(edges: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in edges.items():
        if not source.startswith("electra"):
            continue
        room = electra_room(source)
        if room is None:
            if source not in ELECTRA_TOP:
                wrong.append(f"{source} is in no room of electra/ ({', '.join(ELECTRA_ROOMS)})")
            continue
        if room not in ELECTRA_ROOMS:
            wrong.append(f"{source} is in an unknown room {room!r}")
            continue
        for target in targets:
            if not target.startswith("electra.") or target == "electra.config":
                continue
            other = electra_room(target)
            if other != room and other not in ELECTRA_ROOMS[room]:
                wrong.append(f"{source} imports {target} (electra.{room} may use {ELECTRA_ROOMS[room] or 'only the config'})")
    return sorted(wrong)


def test_electra_rooms_import_one_way():
    wrong = room_violations(import_edges(project_modules()))
    assert not wrong, "imports against electra's rooms:\n" + "\n".join(wrong)


def benchmark_group_violations(edges: dict[str, set[str]]) -> list[str]:
    """A benchmark imports from ``benchmarks`` only its own group and ``benchmarks.shared``; a
    module of ``benchmarks.shared`` only ``benchmarks.shared``; no module sits directly in
    ``benchmarks/`` but its ``__init__``."""
    groups = {m.split(".")[1] for m in edges if m.startswith("benchmarks.") and m.count(".") >= 2}
    wrong = []
    for source, targets in edges.items():
        parts = source.split(".")
        if parts[0] != "benchmarks" or source == "benchmarks":
            continue
        group = parts[1]
        if group not in groups:  # a module directly in benchmarks/, not a package of modules
            wrong.append(f"{source} is in no group of benchmarks/")
            continue
        allowed = {"shared", group}
        for target in targets:
            if not target.startswith("benchmarks"):
                continue
            other = target.split(".")[1] if "." in target else None
            if other not in allowed:
                wrong.append(f"{source} imports {target} (a benchmark of benchmarks.{group} may use "
                             f"{', '.join(f'benchmarks.{a}' for a in sorted(allowed))})")
    return sorted(wrong)


def test_benchmarks_import_only_their_group_and_shared():
    wrong = benchmark_group_violations(import_edges(project_modules()))
    assert not wrong, "imports across benchmark groups:\n" + "\n".join(wrong)


def test_no_import_cycles_between_files():
    cycles = strongly_connected(import_edges(project_modules()))
    assert not cycles, "files that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checks_see_a_violation_and_a_cycle():
    # the graph and the cycle finder on a known graph, so the two tests above cannot pass vacuously
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(edges) == [["a", "b", "c"]]
    edges = import_edges(project_modules())
    assert "common.storage" in edges["pipelines.engine.shuffle"]
    assert "pipelines.schema" in edges["electra.data.corpus"]
    assert "benchmarks.shared.counting_s3" in edges["benchmarks.corpus.append"]


def test_the_benchmark_group_check_sees_a_violation():
    # on a made-up graph, so the group test above cannot pass vacuously
    edges = {"benchmarks": set(), "benchmarks.shared": set(), "benchmarks.shared.machine": {"benchmarks.shared"},
             "benchmarks.corpus": set(), "benchmarks.train": set(),
             "benchmarks.corpus.scale": {"benchmarks.shared.machine", "benchmarks.corpus.scale_shuffles", "common"},
             "benchmarks.corpus.scale_shuffles": {"benchmarks.train.mixture"},
             "benchmarks.train.mixture": {"benchmarks.shared.machine"},
             "benchmarks.shared.memory": {"benchmarks.corpus.scale"},
             "benchmarks.stray": {"benchmarks.shared"}}
    assert benchmark_group_violations(edges) == [
        "benchmarks.corpus.scale_shuffles imports benchmarks.train.mixture (a benchmark of benchmarks.corpus "
        "may use benchmarks.corpus, benchmarks.shared)",
        "benchmarks.shared.memory imports benchmarks.corpus.scale (a benchmark of benchmarks.shared "
        "may use benchmarks.shared)",
        "benchmarks.stray is in no group of benchmarks/",
    ]
