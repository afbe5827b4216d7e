"""What a running stage has done so far: one line at its start, one every ``EVERY`` seconds while
it runs, and the runner's line with its counts at its end.

A stage is one or a few Ray Data executions, whose own progress bars are off (they garble a log
and a Prefect UI); without this a long stage (the tokenizer's training, packing a large corpus)
printed nothing for minutes. The measure is what the stage has written so far (data parts,
scratch such as shuffle and marks files and the tokenizer's sample, shards; its quarantine
parts), as its tasks reported it to the driver (``pipelines.engine.written``: no request to the
store; a listing of the stage's folders each beat cost ~600 LIST requests and ~0.7 GB of
listing entries at 10 TB), set against what it reads (the input stages' kept documents and bytes,
or the sources' files): a stage's writes grow steadily with its reads.

The heartbeat runs in a daemon thread of the driver and only reads; a beat that fails is skipped
(it is never worth failing a build for). Short stages end before their first beat, so a small
build logs two lines per stage.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pipelines.engine import written

log = logging.getLogger("pipelines.orchestration.progress")
EVERY = 30.0  # seconds between two progress lines of a running stage


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def input_summary(run: Any) -> str:
    """What the stage reads, for its start line: documents and bytes of its input stages, or the
    sources' files for ingest."""
    if not run.stage.inputs:
        sizes = [run.sources.size(p) for p in run.sources.files]
        known = [s for s in sizes if s is not None]
        return f"{len(sizes)} files, {mb(sum(known))}"
    parts = []
    for name in run.stage.inputs:
        s = run.inputs[name].stats
        if "documents_out" in s:
            parts.append(f"{name}: {s['documents_out']} documents, {mb(s.get('bytes_out', 0))}")
        elif "examples" in s:
            parts.append(f"{name}: {s['examples']} examples, {s.get('tokens', 0)} tokens")
        elif "vocab_size" in s:
            parts.append(f"{name}: vocabulary {s['vocab_size']}")
    return "; ".join(parts)


def beat_line(name: str, seconds: float, files: int, nbytes: int, rejected: int) -> str:
    rate = nbytes / 1e6 / max(seconds, 1e-9)
    quarantine = f", {rejected} quarantine parts" if rejected else ""
    return (f"{name}: running {seconds:.0f} s; written so far: {files} files, {mb(nbytes)} "
            f"({rate:.2f} MB/s){quarantine}")


class Progress:
    """``with Progress(run):`` around a stage attempt: the start line, then a line every ``every``
    seconds until the block ends."""

    def __init__(self, run: Any, *, every: float = EVERY, attempt: int = 1):
        self.run, self.every, self.attempt = run, every, attempt
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.start = 0.0
        self.base = written.total()

    def beat(self) -> str:
        """One progress line (the heartbeat's; callable directly)."""
        now = written.total() - self.base
        return beat_line(self.run.stage.name, time.perf_counter() - self.start, now.files, now.bytes,
                         now.quarantined)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                log.info("%s", self.beat())
            except Exception as exc:  # never worth failing a build for: skip this beat
                log.debug("progress of %s: %s", self.run.stage.name, exc)

    def __enter__(self) -> Progress:
        self.start, self.base = time.perf_counter(), written.total()
        again = f" (attempt {self.attempt})" if self.attempt > 1 else ""
        try:
            reads = input_summary(self.run)
        except Exception:  # a size the listing did not give
            reads = "?"
        log.info("%s: start%s; reads %s", self.run.stage.name, again, reads)
        if self.every > 0:
            self._thread = threading.Thread(target=self._loop, name=f"progress-{self.run.stage.name}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
