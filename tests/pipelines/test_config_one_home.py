"""One home per fact: the names of the corpus layout and of the input profiles are spelled once."""
from __future__ import annotations

import ast
import typing
from pathlib import Path

from pipelines import profiles, schema
from pipelines.config import CorpusConfig

REPO = Path(__file__).resolve().parents[2]
CODE = ("common", "pipelines", "electra", "evaluation", "flows", "cli")


def _constants(value: str) -> list[str]:
    """Where a string constant equal to ``value`` is in the project's code (docstrings aside)."""
    found = []
    for package in CODE:
        for path in sorted((REPO / package).rglob("*.py")) if (REPO / package).is_dir() else ():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                          and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            found += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and n.value == value and id(n) not in docstrings]
    return found


def test_tokenizer_file_names_are_spelled_only_in_the_schema():
    for name in schema.TOKENIZER_FILES:
        assert [w.split(":")[0] for w in _constants(name)] == ["pipelines/schema/layout.py"], (name, _constants(name))
    assert schema.tokenizer_json("s3://b/corpus", "tokenizer/k1") == "s3://b/corpus/tokenizer/k1/tokenizer.json"


def test_profile_names_are_the_presets_keys():
    assert typing.get_args(typing.get_type_hints(CorpusConfig)["profile"]) == tuple(profiles.PROFILES)
    assert profiles.PROFILE_NAMES == ("web", "books", "bert-format")
    assert CorpusConfig().profile == profiles.DEFAULT_PROFILE == "web"
    for name in profiles.PROFILE_NAMES:  # the CLI's choices come from the config's Literal
        assert {w.split(":")[0] for w in _constants(name)} == {"pipelines/profiles.py"}, (name, _constants(name))
