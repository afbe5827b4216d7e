"""Hand-made documents for the filter block tests, and running one block or datatrove's twin."""
from __future__ import annotations

from benchmarks.corpus.filters import datatrove_filters, datatrove_verdict, exact_config
from pipelines.config import FilterConfig
from pipelines.filters import Doc, build_blocks, normalize_text, run_blocks

SENTENCES = [
    "The committee met on Tuesday to discuss the budget for the coming year.",
    "After a long winter, the river finally thawed and the boats returned to the harbour.",
    "She had never seen a city so crowded, with markets spilling into every narrow street.",
    "Researchers measured the temperature of the lake every morning for three months.",
    "Most of the old houses in the village were built from local stone and timber.",
    "He explained that the engine failed because nobody had replaced the worn belt.",
    "In 1887 the railway reached the valley, and with it came merchants from the coast.",
    "The library keeps a small collection of maps drawn by sailors in the last century.",
    "Children walked to school along a path that followed the edge of the forest.",
    "It is difficult to say whether the new policy will change anything at all.",
    "Our neighbours grow tomatoes, beans and a surprising variety of herbs.",
    "When the storm arrived, the power went out and the whole street fell silent.",
    "The museum reopened in spring with an exhibition about early photography.",
    "Few people remember that the bridge was designed by a young engineer from Lyon.",
    "A good teacher listens carefully before offering an answer to a question.",
    "The report argues that cheaper housing would attract families back to the centre.",
    "During the festival, musicians played in the square until well after midnight.",
    "Farmers worried that the dry summer would ruin much of the harvest.",
    "The letter, written in faded ink, described a journey across the mountains.",
    "Scientists still debate how the first stars formed in the early universe.",
    "Visitors are asked to leave their bags at the entrance of the gallery.",
    "The council voted to protect the meadow from further development.",
]


def prose(paragraphs: int = 3, per: int = 4, start: int = 0) -> str:
    """Clean English: ``paragraphs`` paragraphs of ``per`` distinct sentences each."""
    out = []
    for p in range(paragraphs):
        out.append(" ".join(SENTENCES[(start + p * per + i) % len(SENTENCES)] for i in range(per)))
    return "\n\n".join(out)


def block(name: str, cfg: FilterConfig | None = None, **section):
    """One block built from the defaults (or ``cfg``) with ``section`` fields overridden."""
    import dataclasses

    cfg = cfg or FilterConfig()
    if section:
        cfg = dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **section)})
    (b,) = build_blocks(dataclasses.replace(cfg, blocks=[name]))
    return b


def verdict(b, text: str):
    """Our verdict on ``text`` (normalised) with block ``b`` alone."""
    return run_blocks(Doc(normalize_text(text, FilterConfig())), [b])


def reason(b, text: str) -> str | None:
    v = verdict(b, text)
    return None if v is None else v.reason


_DT = {}


def datatrove_keeps(name: str, text: str) -> bool:
    """datatrove's twin of block ``name`` (default thresholds, exact rules) keeps ``text``."""
    if not _DT:
        filters = datatrove_filters(exact_config())
        _DT.update(zip(["gopher_quality", "gopher_repetition", "c4", "fineweb"], filters))
    return datatrove_verdict([_DT[name]], normalize_text(text, FilterConfig()))[0] is None


def exact_block(name: str):
    return block(name, exact_config([name]))
