"""``manifest.json``, the corpus's commit point (format 4, described in ``pipelines.schema``; the
quarantine's part lists it names are in ``pipelines.schema.rejected``).

The manifest checks itself: ``encode`` adds ``"sha256"``, the sha256 of its canonical JSON
without that field, and ``parse`` (so ``load`` too) recomputes it and refuses a manifest whose
bytes changed after it was written, in one line naming ``manifest.json`` and the corpus
(``common.sealed`` explains the design). Everything else in the corpus is checked
against the manifest (shards, tokenizer, rejected lists), so a flipped digit in it (a shard's
example count, ``seq_len``) would otherwise go unseen. A manifest written before the field
existed has none and is read unchecked, as before. The field is not a dataclass field: it is a
property of the file, not of the corpus (``to_dict`` leaves it out)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from common import storage
from pipelines.schema.layout import FORMAT_VERSION, MANIFEST_NAME, READABLE_VERSIONS, TOKENIZER_DIR
from pipelines.schema.rejected import (RejectedIndex, RejectedInfo, RejectedList, read_rejected,
                                       write_rejected_lists)
from common.sealed import DamagedJSON, seal, unseal


@dataclass
class TokenizerInfo:
    kind: str  # "wordpiece" | "unigram" | "pretrained"
    vocab_size: int
    sha256: str  # of tokenizer.json
    lowercase: bool
    special_tokens: dict[str, int]  # "[PAD]" -> 0, ...
    path: str = TOKENIZER_DIR  # folder of the tokenizer files, relative to the corpus


@dataclass
class ShardInfo:
    path: str  # relative to the corpus
    split: str
    num_examples: int
    num_tokens: int
    bytes: int
    sha256: str


@dataclass
class SplitInfo:
    num_examples: int = 0
    num_tokens: int = 0
    num_documents: int = 0  # documents that produced at least one example of this split
    fill: float = 0.0  # non-pad share of positions: num_tokens / (num_examples * seq_len)


@dataclass
class GenerationInfo:
    """One generation: what one build or append added."""
    name: str  # its shards' folder, shards/<name>/ (the shard stage's key)
    build_key: str = ""  # the build or append that wrote it
    documents: int = 0  # documents kept (after deduplication against the earlier generations)
    # per split: num_examples, num_tokens, num_documents (as the manifest's splits)
    splits: dict[str, dict[str, int]] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)  # names (the first 20), files, fingerprint
    index: str = ""  # its dedup index's folder, relative to the corpus ("" when none was written)


@dataclass
class Manifest:
    seq_len: int
    tokenizer: TokenizerInfo
    splits: dict[str, SplitInfo]
    shards: list[ShardInfo]
    stats: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    # The quarantined parts, in memory only: kept apart from manifest.json (format 4: one list per
    # stage, ``rejected_lists``); ``load`` fills it, ``parse`` leaves it empty, ``save`` writes it.
    rejected: list[RejectedInfo] = field(default_factory=list)
    generation: str = ""
    build_key: str = ""  # identity of everything that decided this corpus (a rerun compares it)
    # Filter stage, per detected language: {"en": {"kept": n, "dropped": m}, ...} (the documents
    # the language block looked at; empty when it is not in filter.blocks).
    languages: dict[str, dict[str, int]] = field(default_factory=dict)
    # What the build found worth a look, e.g. a split whose examples are mostly padding.
    warnings: list[str] = field(default_factory=list)
    # Filter stage, when decontamination ran: the n-gram length, the protected files (uri, task,
    # sha256, bytes, texts, ngrams) and the documents each task's n-grams removed.
    decontamination: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    rejected_index: RejectedIndex | None = None  # format 3, with rejected parts: their list's file
    rejected_lists: list[RejectedList] = field(default_factory=list)  # format 4: a list per stage
    # Oldest first (``pipelines.schema.generations``); empty in a manifest written before appends.
    generations: list[GenerationInfo] = field(default_factory=list)

    def shards_for(self, split: str) -> list[ShardInfo]:
        return [s for s in self.shards if s.split == split]

    def referenced_folders(self) -> set[str]:
        """The key-named folders this manifest reads from (relative to the corpus)."""
        out = {self.tokenizer.path.rstrip("/")}
        out.update(s.path.rsplit("/", 1)[0] for s in self.shards)
        out.update(r.path.rsplit("/", 1)[0] for r in self.rejected)
        out.update(r.folder for r in self.rejected_lists)
        out.update(g.index for g in self.generations if g.index)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every field but the rejected parts (what the build flow returns): their lists, by
        reference, are there."""
        d = asdict(replace(self, rejected=[]))  # not a copy of every part, to drop it
        del d["rejected"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        version = d.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"manifest format_version {version!r}; this code reads {READABLE_VERSIONS} "
                             "(rebuild the corpus with build-corpus)")
        index = d.get("rejected_index")
        lists = [RejectedList(**r) for r in d.get("rejected_lists", [])]
        return cls(
            seq_len=int(d["seq_len"]),
            tokenizer=TokenizerInfo(**d["tokenizer"]),
            splits={k: SplitInfo(**v) for k, v in d["splits"].items()},
            shards=[ShardInfo(**s) for s in d["shards"]],
            stats=d.get("stats", {}),
            config=d.get("config", {}),
            rejected=[RejectedInfo(**r) for r in d.get("rejected", [])],
            generation=d.get("generation", ""),
            build_key=d.get("build_key", ""),
            languages=d.get("languages", {}),
            warnings=list(d.get("warnings", [])),
            decontamination=d.get("decontamination", {}),
            format_version=version,
            rejected_index=RejectedIndex(**index) if index else None,
            rejected_lists=lists,
            generations=[GenerationInfo(**g) for g in d.get("generations", [])],
        )

    def encode(self) -> bytes:
        """The manifest.json bytes: the current format, the rejected parts by reference only, and
        the seal (``"sha256"`` over the rest: module docstring). A function of the content alone,
        so a rerun of the same build writes the same bytes."""
        d = self.to_dict()
        d["format_version"] = FORMAT_VERSION
        return seal(d)

    def save(self, corpus: str) -> str:
        """Commit: the rejected parts held in memory (if any) as one list per quarantine folder,
        then one atomic write of ``manifest.json``. (The build passes its lists, already written,
        in ``rejected_lists``, and no parts.)"""
        if self.rejected:
            self.rejected_lists, self.rejected_index = write_rejected_lists(corpus, self.rejected), None
        self.format_version = FORMAT_VERSION
        uri = storage.join(str(corpus), MANIFEST_NAME)
        storage.write_bytes(uri, self.encode())
        return uri

    @classmethod
    def load(cls, corpus: str) -> Manifest:
        """The manifest with its rejected parts (read from their lists, each checked)."""
        manifest = cls.parse(read_manifest_bytes(corpus), storage.join(str(corpus), MANIFEST_NAME))
        manifest.rejected = read_rejected(corpus, manifest)
        return manifest

    @classmethod
    def parse(cls, data: bytes, where: str) -> Manifest:
        import json

        corpus = where[:-len(MANIFEST_NAME)].rstrip("/") if where.endswith(MANIFEST_NAME) else where
        fix = (f"the manifest of the corpus at {corpus} cannot be trusted: restore it, or delete it and run "
               "the build-corpus command that made it again (and any appends after it)")
        try:
            return cls.from_dict(unseal(data, where, what=MANIFEST_NAME, fix=fix))
        except DamagedJSON:
            raise  # already one line naming the file and the corpus
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: malformed manifest ({exc!r}); {fix}") from exc
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc


def read_manifest_bytes(corpus: str) -> bytes:
    uri = storage.join(str(corpus), MANIFEST_NAME)
    try:
        return storage.read_bytes(uri)
    except storage.StorageError as exc:
        raise FileNotFoundError(f"{uri}: no manifest; is {corpus} a corpus built by build-corpus? "
                                f"({exc})") from exc
