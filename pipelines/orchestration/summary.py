"""What a finished build says about itself: the stage statistics table and the closing lines.

Both read only the manifest (``pipelines.schema.Manifest``, or its ``to_dict()`` form), so the
Prefect flow's markdown artifact, the command line's last lines and a later look at a published
corpus say the same thing. Statistics a stage did not record show as ``-``.
"""
from __future__ import annotations

from typing import Any

from pipelines import schema

DOCUMENT_STAGES = ("ingest", "filter", "exact_dedup", "near_dedup")  # stages that count documents
TOKEN_STAGES = ("tokenizer", "pack", "shard")


def markdown(manifest: schema.Manifest) -> str:
    """The build's statistics as a markdown table, then one line per split and the warnings."""
    rows = ["| stage | docs in | docs out | dropped | seconds | docs/s | MB/s |", "|---|---|---|---|---|---|---|"]
    for name in DOCUMENT_STAGES:
        s = manifest.stats.get(name, {})
        dropped = ", ".join(f"{k}={v}" for k, v in s.get("dropped", {}).items()) or "-"
        rows.append(f"| {name} | {s.get('documents_in', '-')} | {s.get('documents_out', '-')} | {dropped} | "
                    f"{s.get('seconds', '-')} | {s.get('docs_per_sec', '-')} | {s.get('mb_per_sec', '-')} |")
    for name in TOKEN_STAGES:
        s = manifest.stats.get(name, {})
        rows.append(f"| {name} | | | | {s.get('seconds', '-')} | | {s.get('mb_per_sec', '-')} |")
    lines = ["# build-corpus", "", *rows, ""]
    for split, info in manifest.splits.items():
        lines.append(f"- **{split}**: {info.num_documents} documents, {info.num_examples} examples, "
                     f"{info.num_tokens} tokens, fill {info.fill:.1%}, {len(manifest.shards_for(split))} shards")
    coverage = coverage_line(manifest.stats)
    lines.append(f"- tokenizer: {manifest.tokenizer.kind}, vocab {manifest.tokenizer.vocab_size}, "
                 f"sha256 `{manifest.tokenizer.sha256[:12]}`" + (f"; {coverage}" if coverage else ""))
    lines += [f"- warning: {w}" for w in manifest.warnings]
    lines.append(f"- shards: {manifest.stats.get('shard', {}).get('bytes_per_token')} bytes per token")
    return "\n".join(lines)


def closing_lines(manifest: dict[str, Any], out: str) -> list[str]:
    """What the command line prints after a build (``manifest``: ``Manifest.to_dict()``): each
    split, what decontamination removed, the tokenizer's coverage, every warning, and where the
    corpus is."""
    lines = [f"{split}: {info['num_documents']} documents, {info['num_examples']} examples, "
             f"{info['num_tokens']} tokens, fill {info['fill']:.1%}" for split, info in manifest["splits"].items()]
    decon = manifest.get("decontamination") or {}
    if decon:
        removed = ", ".join(f"{task} {n}" for task, n in decon["removed"].items())
        lines.append(f"decontamination: {decon['ngrams']} {decon['ngram']}-grams of {len(decon['files'])} files; "
                     f"documents removed: {removed}")
    coverage = coverage_line(manifest.get("stats", {}))
    if coverage:
        lines.append(f"tokenizer: {coverage}")
    lines += generation_lines(manifest)
    lines += [f"warning: {w}" for w in manifest.get("warnings", [])]
    lines.append(f"corpus written to {out} ({schema.MANIFEST_NAME})")
    return lines


def generation_lines(manifest: dict[str, Any]) -> list[str]:
    """For a corpus that has grown: its generations, and what the last one dropped as duplicates
    of the earlier ones (``pipelines.dedup.prior``); nothing for a corpus of one generation."""
    generations = manifest.get("generations") or []
    if len(generations) < 2:
        return []
    stats = manifest.get("stats", {})
    earlier = {stage: (stats.get(stage, {}).get("earlier_generations") or {}).get("matches", 0)
               for stage in ("exact_dedup", "near_dedup")}
    last = generations[-1]
    train = last.get("splits", {}).get("train", {}).get("num_examples", 0)
    return [f"generation {len(generations) - 1} ({last['name']}): {last['documents']} documents, {train} train "
            f"examples added; {earlier['exact_dedup']} exact and {earlier['near_dedup']} near duplicates of the "
            f"earlier generations dropped (their records name the document they copy)",
            f"generations: {len(generations)} ({', '.join(g['name'] for g in generations)})"]


def coverage_line(stats: dict[str, Any]) -> str | None:
    """The tokenizer's coverage (``pipelines.tokenizer_coverage``): its [UNK] share on the sample
    and in each split's examples, and the sample's bytes per token; None for a manifest without."""
    summary = stats.get("summary", {})
    shares = summary.get("unk_share") or {}
    if not isinstance(shares, dict) or shares.get("sample") is None:
        return None
    splits = ", ".join(f"{split} {share:.2%}" for split, share in shares.items()
                       if split != "sample" and share is not None)
    bpt = summary.get("text_bytes_per_token")
    return (f"[UNK] {shares['sample']:.2%} of the sample's tokens" + (f" ({splits} of the examples')" if splits else "")
            + (f", {bpt:.2f} bytes of text per token" if bpt is not None else ""))
