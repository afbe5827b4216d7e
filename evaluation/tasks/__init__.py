"""The task registry: every module in this folder declares one GLUE-like task.

Adding a task is adding a file here (``docs/add-a-task.md``)::

    # evaluation/tasks/<name>.py
    from evaluation.task_spec import ACCURACY, Layout, TaskSpec

    TASK = TaskSpec(name="...", kind="classification", labels=("0", "1"), ..., metrics=(ACCURACY,),
                    primary="accuracy")

The modules are found by listing this package's folder (``pkgutil.iter_modules``) when it is
first imported, so nothing else names them: ``--tasks``, the readers, scoring, the GLUE average,
the paper's reference numbers and the submission files all look tasks up here. Modules whose
name starts with ``_`` are helpers, not tasks. A module without a ``TASK``, a spec that does not
check (``TaskSpec.__post_init__``) or two modules declaring the same name are a ``TaskFileError``
naming the file. ``TASKS`` is ordered by name, whatever order the file system lists.

Names are matched forgiving case and hyphens (``sst2`` → ``SST-2``); two tasks whose names differ
only in that are refused, since ``--tasks`` could not tell them apart.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from ..task_spec import GlueDataError, TaskSpec


class TaskFileError(ImportError):
    """A file in ``evaluation/tasks/`` that does not declare one valid task; names the file."""


def _key(name: str) -> str:
    return name.replace("-", "").lower()


def discover(package: str, folders) -> dict[str, TaskSpec]:
    """Every task declared by a module of ``package`` in ``folders``, by name (module docstring).

    ``TASKS`` is this package's own: ``discover(__name__, __path__)``, once, at first import."""
    found: dict[str, tuple[TaskSpec, str]] = {}  # key -> (spec, file)
    for info in pkgutil.iter_modules(folders):
        if info.name.startswith("_"):
            continue
        where = str(Path(info.module_finder.path) / f"{info.name}.py")
        try:
            module = importlib.import_module(f"{package}.{info.name}")
        except (ValueError, TypeError) as exc:  # TaskSpec's own checks, a wrong field
            raise TaskFileError(f"{where}: {exc}") from exc
        spec = getattr(module, "TASK", None)
        if not isinstance(spec, TaskSpec):
            raise TaskFileError(f"{where}: declares no TASK = TaskSpec(...); every module in "
                                f"evaluation/tasks/ is one task (helpers start with '_')")
        if _key(spec.name) in found:
            raise TaskFileError(f"{where}: task {spec.name!r} is already declared in "
                                f"{found[_key(spec.name)][1]}")
        found[_key(spec.name)] = (spec, where)
    return {spec.name: spec for spec, _ in sorted(found.values(), key=lambda f: _key(f[0].name))}


TASKS: dict[str, TaskSpec] = discover(__name__, __path__)


def get_task(name: str) -> TaskSpec:
    """Look a task up by name, forgiving case and hyphens (``sst2`` → ``SST-2``)."""
    for task in TASKS.values():
        if _key(task.name) == _key(name):
            return task
    raise GlueDataError(f"unknown GLUE task {name!r}; known tasks: {', '.join(TASKS)}")


def parse_task_list(spec: str) -> list[TaskSpec]:
    """``"CoLA,SST-2"`` → specs, in the given order, without duplicates."""
    seen: dict[str, TaskSpec] = {}
    for part in spec.split(","):
        if part.strip():
            task = get_task(part.strip())
            seen.setdefault(task.name, task)
    return list(seen.values())
