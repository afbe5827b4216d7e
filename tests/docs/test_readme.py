"""The README is for users and stays short; every link in it and in docs/ leads somewhere real;
the commands and flags it tells users to type exist in the code.

Links: every relative ``[text](target)`` in README.md and docs/*.md must name a file inside the
project (the README is read on its own, so nothing may point outside it, e.g. ../shared), and an
``#anchor`` into a Markdown file must match one of its headings (GitHub's rule for heading ids).
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
MAX_README_LINES = 400


def heading_ids(text: str) -> set[str]:
    """The ids GitHub gives a page's headings: lower case, punctuation but - and _ dropped, each
    space a hyphen, a repeated id suffixed -1, -2, ..."""
    ids: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8")))


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(REPO)}: {target}"
        if not dest.is_relative_to(REPO):
            bad.append(f"{where} (outside the project)")
        elif not dest.exists():
            bad.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in heading_ids(dest.read_text(encoding="utf-8")):
            bad.append(f"{where} (no heading #{anchor} in {dest.relative_to(REPO)})")
    return bad


def test_heading_ids_follow_githubs_rule():
    ids = heading_ids("# A b\n## Other languages (`--language`)\n## A b\n```\n# not a heading\n```\n"
                      "### build-corpus: your text → a corpus\n")
    assert ids == {"a-b", "other-languages---language", "a-b-1", "build-corpus-your-text--a-corpus"}


def test_a_broken_link_is_caught(tmp_path):
    page = REPO / "docs" / "_probe_never_committed.md"
    assert not page.exists()
    text = "[a](missing.md) [b](../../outside.md) [c](benchmarks.md#no-such-heading) [d](https://x.org/y)"
    page.write_text(text, encoding="utf-8")
    try:
        bad = broken_links(page)
    finally:
        page.unlink()
    assert len(bad) == 3 and "no such file" in bad[0] and "outside" in bad[1] and "no heading" in bad[2]


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): it says what to type and what comes "
        "out; design notes and measurements go to docs/ (one page per job)")


def test_every_relative_link_resolves():
    bad = [b for page in PAGES for b in broken_links(page)]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_readme_uses_the_current_commands():
    text = README.read_text(encoding="utf-8")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    # a command starts a line (in a code block) or a backticked span; folder names such as
    # electra-base/ in `--init-from electra-base` are arguments, not commands
    named = set(re.findall(r"(?:^\s*|`)(electra-[a-z][a-z-]*[a-z])(?![\w./-])", text, re.M))
    assert named, "the README should name its commands"
    missing = sorted(named - set(scripts))
    assert not missing, f"the README names commands pyproject.toml does not install: {missing}"
    for module in set(re.findall(r"python -m ((?:cli|flows|electra|evaluation|pipelines)(?:\.\w+)+)", text)):
        assert (REPO / (module.replace(".", "/") + ".py")).is_file(), f"README: python -m {module}: no such module"
    stale = [p.name for p in PAGES if "python -m flows." in p.read_text(encoding="utf-8")]
    assert not stale, f"the flows.* command lines are gone (cli/ has them): {stale}"


# Flags of programs that are not ours (DeepSpeed's launcher, Prefect's and Hugging Face's CLIs).
FOREIGN_FLAGS = {"num_gpus", "hostfile", "module", "param", "watch", "limit", "local-dir"}


def test_every_flag_in_the_readme_is_in_the_code():
    """A flag is real when the code spells it (``"--seq-len"``) or has the field it is generated
    from (``seq_len``): the CLIs build their flags from the jobs' dataclasses."""
    text = README.read_text(encoding="utf-8")
    flags = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9_-]*[a-z0-9])", text)) - FOREIGN_FLAGS
    source = "\n".join(p.read_text(encoding="utf-8") for pkg in ("cli", "common", "pipelines", "electra",
                                                                  "evaluation", "flows")
                       for p in (REPO / pkg).rglob("*.py"))
    missing = sorted(f for f in flags
                     if f"--{f}" not in source
                     and not re.search(rf"\b{f.replace('-', '_')}\b", source)
                     and not (f.startswith("no-") and re.search(rf"\b{f[3:].replace('-', '_')}\b", source)))
    assert not missing, f"the README names flags the code does not have: {missing}"


PROJECT_DIRS = ("cli", "flows", "pipelines", "electra", "evaluation", "common", "synthetic", "benchmarks",
                "infra", "tests", "docs")


def project_paths(text: str) -> set[str]:
    """Backticked project paths: `pipelines/filters/code.py`, `electra/configs/`, ... (a span that is
    one path, starting with a top-level folder; globs, placeholders and `file.py:function` cut)."""
    found = set()
    for span in re.findall(r"`([^`\s]+)`", text):
        path = span.split(":")[0]
        if path.split("/")[0] in PROJECT_DIRS and "/" in path and not re.search(r"[*<>{}$]|\bN\b|NNN", path):
            found.add(path)
    return found


def test_every_project_path_named_exists():
    assert "pipelines/filters/code.py" in project_paths("the `pipelines/filters/code.py` block, `RUN/eval`")
    # the add-a-* walk-throughs name the file the reader is about to create
    pages = [p for p in PAGES if not p.name.startswith("add-a-")]
    missing = sorted(f"{page.relative_to(REPO)}: {path}" for page in pages
                     for path in project_paths(page.read_text(encoding="utf-8"))
                     if not (REPO / path).exists())
    assert not missing, "README/docs name project files that do not exist:\n" + "\n".join(missing)
