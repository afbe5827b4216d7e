"""Near copies of mixed-script documents stay near whatever their share of spaceless characters.

Shingles are cut per run of one script kind (``pipelines.dedup.minhash``): word n-grams over the
spaced runs, character n-grams over the spaceless ones. A document whose near copy differs only by
a little more English therefore shares almost all its shingles with it, also where that text takes
the share of Han/kana characters across 50% (where the shingling used to switch wholesale from
character 3-grams to word 5-grams, and the two estimated a Jaccard of 0). True Jaccard: plain
Python sets of the reference shingles (``test_minhash.ref_shingles``); estimate: the share of equal
signature values; near-dedup's own partition functions decide whether the pair is linked.
"""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from pipelines.config import DedupConfig
from pipelines.dedup import bucket_edges, signature_rows
from pipelines.dedup.candidates import shared_buckets, with_sketches
from pipelines.dedup.minhash import band_hashes, minhash_signatures
from pipelines.language.scripts import SPACELESS, spaceless_share
from synthetic import prose
from tests.pipelines._languages import documents
from tests.pipelines.dedup.test_minhash import ref_shingles

CFG = DedupConfig()

# Written for this test: Japanese prose about installing a package, as a manual would put it.
JAPANESE = (
    "パッケージ管理システムは、ソフトウェアの導入と削除を簡単にするための仕組みです。多くの配布版では、"
    "依存関係を自動的に解決し、必要なライブラリも一緒に取得します。新しいパッケージを導入する前に、"
    "まず利用できるパッケージの一覧を更新してください。\n\n"
    "更新が終わったら、目的のパッケージを検索して正しい名前を確認します。見つからない場合は、"
    "取得元の設定が正しいかどうかを確かめてください。設定ファイルは管理者の権限でしか編集できないので、"
    "注意が必要です。\n\n"
    "導入したパッケージの設定は、通常は専用の場所に置かれます。設定を変えた後は、サービスを再起動しないと"
    "反映されないことがあります。記録を読むと、起動に失敗した理由が分かる場合もあります。"
)

# A shell session, one line at a time: the English part of the documents.
CODE = [
    "$ sudo apt-get update", "$ apt-cache search nginx web server", "$ sudo apt-get install nginx-light",
    "$ systemctl status nginx.service", "$ journalctl --unit nginx --since today --no-pager",
    "$ sudo nano /etc/nginx/sites-available/default", "$ sudo nginx -t && sudo systemctl reload nginx",
    "$ curl --head http://localhost:8080/index.html", "$ dpkg --listfiles nginx-common | head",
    "$ apt-cache policy nginx-light libnginx-mod-http-echo", "$ sudo apt-get purge --auto-remove apache2",
    "$ ls -l /var/log/nginx/ && tail -n 20 /var/log/nginx/error.log",
    "# the default site answers on port 80 unless you change the listen directive",
    "$ sudo ufw allow 'Nginx Full' comment 'public web traffic'", "$ sudo certbot --nginx -d example.org",
    "$ grep -rn server_name /etc/nginx/sites-enabled/", "$ sudo systemctl enable --now nginx",
    "$ ss --tcp --listening --numeric --processes | grep nginx", "$ sudo apt-mark hold nginx-light",
    "$ zcat /usr/share/doc/nginx-common/changelog.Debian.gz | less",
    "# restart rather than reload after replacing the binary or its modules",
    "$ sudo systemctl restart nginx && echo restarted", "$ apt-get changelog nginx-light | head -n 40",
    "$ sudo tee /etc/apt/apt.conf.d/99no-recommends <<< 'APT::Install-Recommends \"false\";'",
    "$ debconf-show nginx-common", "$ sudo dpkg-reconfigure --priority low nginx-common",
]


def _sets(a: str, b: str) -> float:
    """True Jaccard of two texts' shingle sets (the reference, plain Python)."""
    x, y = (set(ref_shingles(t, CFG.ngram, CFG.spaceless_ngram)) for t in (a, b))
    return len(x & y) / len(x | y)


def _estimate(sig: np.ndarray, i: int, j: int) -> float:
    return float((sig[i] == sig[j]).mean())


def _rows(texts: list[str]) -> dict:
    n = len(texts)
    return {"id": np.array([f"t:{i}" for i in range(n)], dtype=object), "uid": np.arange(1, n + 1, dtype=np.int64),
            "text": np.array(texts, dtype=object), "reason": np.array([""] * n, dtype=object),
            "_file": np.zeros(n, dtype=np.int64)}


def near_edges(texts: list[str]) -> set[tuple[int, int]]:
    """Near dedup's partition functions without Ray (one partition): signatures and band rows,
    shared buckets, their members' sketches, verified bucket edges. Edges (u, v) by text index."""
    rows = signature_rows(_rows(texts), cfg=CFG, partitions=1)
    band = np.array([len(s) == 0 for s in rows.column("sketch").to_pylist()])
    members = shared_buckets(rows.filter(pa.array(band)).drop_columns(["_part"]), partitions=1)
    if members is None:
        return set()
    joined = with_sketches(pa.table({"uid": members["uid"], "bucket": members["bucket"]}),
                           rows.filter(pa.array(~band)).drop_columns(["_part"]))
    out = bucket_edges(joined, threshold=CFG.jaccard_threshold)
    keep = out["u"] >= 0  # the marker row counts refused checks
    return {(int(u) - 1, int(v) - 1) for u, v in zip(out["u"][keep], out["v"][keep])}


def straddle(text: str) -> tuple[str, str]:
    """``text`` followed by as much of the shell session as leaves it at 50.5-51% spaceless
    characters, and a copy with a little more of it, at 49-49.5%."""
    session = "\n".join(CODE)

    def cut(k: int) -> str:
        return text + "\n\n" + session[:k]

    k = max(k for k in range(len(session) + 1) if spaceless_share(cut(k)) >= 0.505)
    m = min(m for m in range(len(session) + 1) if spaceless_share(cut(m)) < 0.495)
    return cut(k), cut(m)


SOURCES = {"zh-cn": lambda: "\n\n".join(documents("zh-cn")[5:8]), "ja": lambda: JAPANESE}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_copy_across_50_percent_spaceless_is_a_near_duplicate(source):
    doc, copy = straddle(SOURCES[source]())
    other_doc, _ = straddle("\n\n".join(documents("zh-cn")[10:13]))  # same code block, other prose
    assert 0.505 <= spaceless_share(doc) < 0.51 and 0.49 <= spaceless_share(copy) < 0.495
    true = _sets(doc, copy)
    assert true > 0.85  # a little more of the code block, nothing else
    sig = minhash_signatures([doc, copy, other_doc], CFG)
    est = _estimate(sig, 0, 1)
    assert abs(est - true) < 0.1 and est >= CFG.jaccard_threshold, (est, true)
    assert (band_hashes(sig, CFG)[0] == band_hashes(sig, CFG)[1]).any()  # an LSH candidate
    assert _sets(doc, other_doc) < 0.4 and _estimate(sig, 0, 2) < 0.4
    assert near_edges([doc, copy, other_doc]) == {(1, 0)}  # linked and verified; the other kept


def _chinese(n_chars: int) -> list[str]:
    """Real Chinese sentences (the zh-cn asset, Han characters and CJK punctuation only)."""
    text = "".join(c for c in "".join(documents("zh-cn")) if SPACELESS.match(c) or c in "，。、")
    return [s + "。" for s in text[:n_chars].split("。") if s]


def mixed_document(share: float, rng: random.Random) -> str:
    """Chinese and English paragraphs taking turns, ~``share`` of the characters Han."""
    chinese = _chinese(900)
    han = sum(len(SPACELESS.findall(c)) for c in chinese)
    english, size = [], sum(map(len, chinese)) - han  # the CJK punctuation counts as not Han
    while size < han * (1 - share) / share:
        english.append(prose.sentence(rng))
        size += len(english[-1]) - english[-1].count(" ")
    paragraphs = []
    for k in range(6):
        paragraphs.append("".join(chinese[k::6]))
        paragraphs.append(" ".join(english[k::6]))
    return "\n\n".join(p for p in paragraphs if p)


def lightly_edited(text: str, rng: random.Random, every: int = 400) -> str:
    """One character in ``every`` replaced by another of its kind (Han by Han, a letter by a
    letter) and one English sentence appended."""
    chars = list(text)
    han = [c for c in chars if SPACELESS.match(c)]
    for i in rng.sample(range(len(chars)), len(chars) // every):
        if SPACELESS.match(chars[i]):
            chars[i] = rng.choice(han)
        elif chars[i].isalpha():
            chars[i] = rng.choice("abcdefghijklmnopqrstuvwxyz")
    return "".join(chars) + " " + prose.sentence(rng)


def test_near_copies_estimate_their_true_jaccard_at_every_share_of_han():
    rng = random.Random(47)
    shares, crossed = [], 0
    for target in (0.1, 0.2, 0.3, 0.4, 0.5, 0.505, 0.6, 0.7, 0.8, 0.9):
        doc = mixed_document(target, rng)
        copy = lightly_edited(doc, rng)
        shares.append(round(spaceless_share(doc), 3))
        crossed += spaceless_share(doc) >= 0.5 > spaceless_share(copy)
        true = _sets(doc, copy)
        sig = minhash_signatures([doc, copy], CFG)
        est = _estimate(sig, 0, 1)
        assert true > 0.8, (target, true)
        # 112 permutations: one standard error is <= 0.038 for J >= 0.8
        assert abs(est - true) < 0.12 and est >= CFG.jaccard_threshold, (target, est, true)
        assert near_edges([doc, copy]) == {(1, 0)}, target
    assert shares[0] < 0.15 and shares[-1] > 0.85 and crossed >= 1, shares  # the copy drops below 50%
