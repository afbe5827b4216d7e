"""``manifest.json``, the corpus's commit point, and the rejected-part list beside it (format 3;
the format is described in ``pipelines.schema``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from common import storage
from pipelines.schema.layout import FORMAT_VERSION, MANIFEST_NAME, READABLE_VERSIONS, TOKENIZER_DIR


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
class RejectedInfo:
    stage: str
    path: str  # relative to the corpus
    records: int
    bytes: int


@dataclass
class RejectedIndex:
    """Where the manifest's rejected-part list is (format 3): a file beside the manifest."""
    path: str  # relative to the corpus: rejected-<sha256[:16]>.json
    sha256: str
    bytes: int
    parts: int
    records: int


def rejected_list_bytes(rejected: list[RejectedInfo]) -> bytes:
    """The rejected-part list file's content: one JSON object, one part per line, in the given order."""
    import json

    rows = ",\n".join(json.dumps(asdict(r), sort_keys=True) for r in rejected)
    return f'{{"format_version": {FORMAT_VERSION}, "rejected": [\n{rows}\n]}}\n'.encode()


def rejected_index_of(rejected: list[RejectedInfo]) -> tuple[RejectedIndex, bytes]:
    import hashlib

    data = rejected_list_bytes(rejected)
    sha = hashlib.sha256(data).hexdigest()
    return RejectedIndex(f"rejected-{sha[:16]}.json", sha, len(data), len(rejected),
                         sum(r.records for r in rejected)), data


@dataclass
class Manifest:
    seq_len: int
    tokenizer: TokenizerInfo
    splits: dict[str, SplitInfo]
    shards: list[ShardInfo]
    stats: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    # The quarantined parts. Kept apart from manifest.json (format 3: ``rejected_index``);
    # ``load`` fills it, ``parse`` leaves it empty (module docstring).
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

    def shards_for(self, split: str) -> list[ShardInfo]:
        return [s for s in self.shards if s.split == split]

    def referenced_folders(self) -> set[str]:
        """The key-named folders this manifest reads from (relative to the corpus)."""
        out = {self.tokenizer.path.rstrip("/")}
        out.update(s.path.rsplit("/", 1)[0] for s in self.shards)
        out.update(r.path.rsplit("/", 1)[0] for r in self.rejected)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every field, the rejected parts included (what the build flow returns), with the
        ``rejected_index`` they get when saved; ``encode`` leaves the parts out."""
        d = asdict(self)
        index = rejected_index_of(self.rejected)[0] if self.rejected else self.rejected_index
        d["rejected_index"] = None if index is None else asdict(index)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        version = d.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"manifest format_version {version!r}; this code reads {READABLE_VERSIONS} "
                             "(rebuild the corpus with build-corpus)")
        index = d.get("rejected_index")
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
        )

    def encode(self) -> bytes:
        """The manifest.json bytes: the current format, the rejected parts by reference only."""
        import json

        d = self.to_dict()
        del d["rejected"]
        d["format_version"] = FORMAT_VERSION
        return (json.dumps(d, indent=2, sort_keys=True) + "\n").encode()

    def save(self, corpus: str) -> str:
        """Commit: the rejected-part list's file, then one atomic write of ``manifest.json``."""
        if self.rejected:
            self.rejected_index, data = rejected_index_of(self.rejected)
            storage.write_bytes(storage.join(str(corpus), self.rejected_index.path), data)
        self.format_version = FORMAT_VERSION
        uri = storage.join(str(corpus), MANIFEST_NAME)
        storage.write_bytes(uri, self.encode())
        return uri

    @classmethod
    def load(cls, corpus: str) -> Manifest:
        """The manifest with its rejected-part list (read from its file and checked)."""
        manifest = cls.parse(read_manifest_bytes(corpus), storage.join(str(corpus), MANIFEST_NAME))
        manifest.rejected = read_rejected(corpus, manifest)
        return manifest

    @classmethod
    def parse(cls, data: bytes, where: str) -> Manifest:
        import json

        try:
            return cls.from_dict(json.loads(data))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{where}: malformed manifest ({exc!r})") from exc
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc


def read_rejected(corpus: str, manifest: Manifest) -> list[RejectedInfo]:
    """The manifest's rejected parts: inline (format 2) or from the file its ``rejected_index``
    names, whose sha256 must match (a missing or altered file is an error naming it)."""
    import hashlib
    import json

    index = manifest.rejected_index
    if manifest.rejected or index is None:
        return list(manifest.rejected)
    uri = storage.join(str(corpus), index.path)
    try:
        data = storage.read_bytes(uri)
    except storage.StorageError as exc:
        raise ValueError(f"{uri}: the rejected-part list the manifest names is unreadable ({exc})") from exc
    if hashlib.sha256(data).hexdigest() != index.sha256:
        raise ValueError(f"{uri}: sha256 differs from the manifest's rejected_index (altered after the build)")
    return [RejectedInfo(**r) for r in json.loads(data)["rejected"]]


def read_manifest_bytes(corpus: str) -> bytes:
    uri = storage.join(str(corpus), MANIFEST_NAME)
    try:
        return storage.read_bytes(uri)
    except storage.StorageError as exc:
        raise FileNotFoundError(f"{uri}: no manifest; is {corpus} a corpus built by build-corpus? "
                                f"({exc})") from exc
