"""Wikipedia dumps for the tests: MediaWiki export XML (schema 0.11) with articles written in the
style of real ones (infoboxes, nested templates, tables, named/self-closing references with
templates inside, localised file and category links, interlanguage links, lists, comments,
``<math>``, magic words) in English, German, Chinese, Japanese and Russian, plus redirects and
pages of other namespaces; written plain, compressed, or as a real bz2 multistream file with its
index (one ``bz2.compress`` per group of pages, the offsets those streams start at).
"""
from __future__ import annotations

import bz2
import hashlib
from pathlib import Path
from typing import NamedTuple
from xml.sax.saxutils import escape

NAMESPACES = {
    "en": {-2: "Media", -1: "Special", 1: "Talk", 2: "User", 3: "User talk", 4: "Wikipedia", 6: "File",
           10: "Template", 14: "Category", 100: "Portal"},
    "de": {-2: "Medium", -1: "Spezial", 1: "Diskussion", 2: "Benutzer", 4: "Wikipedia", 6: "Datei",
           10: "Vorlage", 14: "Kategorie"},
    # zhwiki names these namespaces in English in its siteinfo; 文件/分类 are aliases.
    "zh": {-2: "Media", -1: "Special", 1: "Talk", 2: "User", 4: "Wikipedia", 6: "File", 10: "Template",
           14: "Category"},
    "ja": {-2: "メディア", -1: "特別", 1: "ノート", 2: "利用者", 4: "Wikipedia", 6: "ファイル",
           10: "Template", 14: "Category"},
    "ru": {-2: "Медиа", -1: "Служебная", 1: "Обсуждение", 2: "Участник", 4: "Википедия", 6: "Файл",
           10: "Шаблон", 14: "Категория"},
}


class Page(NamedTuple):
    id: int
    title: str
    xml: str


def header(lang: str = "en") -> str:
    spaces = "\n".join(
        f'      <namespace key="{k}" case="first-letter">{escape(v)}</namespace>' if k else
        '      <namespace key="0" case="first-letter" />'
        for k, v in sorted({0: "", **NAMESPACES[lang]}.items()))
    return (f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" '
            f'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
            f'xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.11/ '
            f'http://www.mediawiki.org/xml/export-0.11.xsd" version="0.11" xml:lang="{lang}">\n'
            f"  <siteinfo>\n    <sitename>Wikipedia</sitename>\n    <dbname>{lang}wiki</dbname>\n"
            f"    <base>https://{lang}.wikipedia.org/wiki/Main_Page</base>\n"
            f"    <generator>MediaWiki 1.42.0-wmf.20</generator>\n    <case>first-letter</case>\n"
            f"    <namespaces>\n{spaces}\n    </namespaces>\n  </siteinfo>\n")


FOOTER = "</mediawiki>\n"


def page(page_id: int, title: str, text: str, *, ns: int = 0, redirect: str | None = None) -> Page:
    sha1 = hashlib.sha1(text.encode()).hexdigest()[:31]
    redirect_el = f'    <redirect title="{escape(redirect, {chr(34): "&quot;"})}" />\n' if redirect else ""
    xml = (f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n{redirect_el}"
           f"    <revision>\n      <id>{page_id * 1000 + 7}</id>\n      <parentid>{page_id * 1000 + 3}</parentid>\n"
           f"      <timestamp>2024-03-01T12:00:00Z</timestamp>\n      <contributor>\n"
           f"        <username>Example editor</username>\n        <id>4242</id>\n      </contributor>\n"
           f"      <comment>copyedit &amp; refs</comment>\n      <origin>{page_id * 1000 + 7}</origin>\n"
           f"      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
           f'      <text bytes="{len(text.encode())}" sha1="{sha1}" xml:space="preserve">'
           f'{escape(text, {chr(34): "&quot;"})}</text>\n      <sha1>{sha1}</sha1>\n    </revision>\n  </page>\n')
    return Page(page_id, title, xml)


def dump(lang: str, pages: list[Page]) -> bytes:
    return (header(lang) + "".join(p.xml for p in pages) + FOOTER).encode()


def write_multistream(folder: Path, stem: str, lang: str, pages: list[Page], per_stream: int) -> tuple[Path, list[int]]:
    """``{stem}-pages-articles-multistream.xml.bz2`` and its index; the offsets of the page streams."""
    streams = [bz2.compress(header(lang).encode(), 9)]
    groups = [pages[i:i + per_stream] for i in range(0, len(pages), per_stream)]
    streams += [bz2.compress("".join(p.xml for p in group).encode(), 9) for group in groups]
    streams.append(bz2.compress(FOOTER.encode(), 9))
    offsets = [sum(map(len, streams[:i])) for i in range(1, len(streams) - 1)]
    path = folder / f"{stem}-pages-articles-multistream.xml.bz2"
    path.write_bytes(b"".join(streams))
    lines = "".join(f"{off}:{p.id}:{p.title}\n" for off, group in zip(offsets, groups) for p in group)
    (folder / f"{stem}-pages-articles-multistream-index.txt.bz2").write_bytes(bz2.compress(lines.encode()))
    return path, offsets


# ---------------------------------------------------------------------------------------------
# Articles
# ---------------------------------------------------------------------------------------------
EN = """{{Short description|German archipelago in the North Sea}}
{{Use dmy dates|date=March 2024}}
{{Infobox settlement
| name = Heligoland
| native_name = {{lang|de|Helgoland}}
| image_skyline = Helgoland aerial.jpg
| population_total = 1,307<ref name="pop">{{cite web |url=https://www.statistik-nord.de/ |title=Bevölkerung |publisher=Statistikamt Nord |date=2023}}</ref>
| coordinates = {{coord|54|11|N|7|53|E|display=inline,title}}
}}
'''Heligoland''' ({{IPA-de|ˈhɛlɡolant|lang}}; {{lang-de|Helgoland}}) is a small [[archipelago]] in the [[North Sea]]. The islands were possessions of [[Denmark]], then of the [[United Kingdom]] from 1807 to 1890.<ref>{{cite book |last=Smith |first=John |title=Islands of the North Sea |year=2001 |page=12}}</ref> Since 1890 they have been part of [[Germany]].<ref name="pop" />

== Geography ==
[[File:Helgoland 2009.jpg|thumb|left|upright=1.2|The main island, with the [[Lange Anna]] in the foreground]]
The archipelago consists of two islands: the populated triangular ''main island'' (''Hauptinsel'') and, to its east, ''[[Düne (island)|Düne]]''.<!-- area figures need a source --> Heligoland lies about {{convert|46|km|mi}} off the
German coastline.

=== Climate ===
{| class="wikitable"
|+ Climate data
|-
! Month !! Jan !! Feb
|-
| Mean °C || 2.6 || 2.2
|}
The climate is [[Oceanic climate|oceanic]], with mild winters.<ref>{{cite web|url=http://example.org/climate|title=Klima}}</ref> Its &quot;sea&nbsp;air&quot; is famous.

=== Flora ===
<!-- to be written -->

== Economy ==
Tourism is the most important industry. Notable features include:
* the duty-free status of the islands
* the '''Lange Anna''' sea stack<ref name="anna">{{cite news |title=Lange Anna |work=[[Die Zeit]]}}</ref>
* the bird observatory, founded in 1910

The population was 1,307 in 2023.<ref name="pop" /> See [http://www.helgoland.de the official website] for details [http://example.org/x].
__NOTOC__
== See also ==
* [[List of islands of Germany]]

== References ==
{{Reflist}}

== External links ==
* {{Official website|https://www.helgoland.de}}
{{Commons category|Helgoland}}

{{Authority control}}
[[Category:Islands of Schleswig-Holstein]]
[[Category:North Frisian Islands| ]]
[[de:Helgoland]]
[[fr:Heligoland]]
"""

EN_TEXT = """Heligoland

Heligoland is a small archipelago in the North Sea. The islands were possessions of Denmark, then of the United Kingdom from 1807 to 1890. Since 1890 they have been part of Germany.

Geography

The archipelago consists of two islands: the populated triangular main island (Hauptinsel) and, to its east, Düne. Heligoland lies about off the German coastline.

Climate

The climate is oceanic, with mild winters. Its "sea air" is famous.

Economy

Tourism is the most important industry. Notable features include:

the duty-free status of the islands

the Lange Anna sea stack

the bird observatory, founded in 1910

The population was 1,307 in 2023. See the official website for details."""

DE = """{{Begriffsklärungshinweis}}
{{Infobox Gemeinde in Deutschland
|Wappen = Wappen Helgoland.svg
|Einwohner = 1307
|Stand = 2023-12-31
}}
'''Helgoland''' ([[Helgoländer Friesisch|helgoländisch]]: ''deät Lun'' „das Land“) ist eine [[Insel]] in der [[Deutsche Bucht|Deutschen Bucht]]. Sie gehört zum [[Kreis Pinneberg]] in [[Schleswig-Holstein]].<ref name="destatis">{{Internetquelle |url=https://www.destatis.de/ |titel=Gemeindeverzeichnis |abruf=2024-01-05}}</ref>

[[Datei:Helgoland Luftbild.jpg|mini|Luftbild der Hauptinsel mit [[Lange Anna]]]]
== Geographie ==
Die Hauptinsel ist etwa 1&nbsp;km² groß.<ref>Mitteilung der Gemeinde, 2019.</ref> Der höchste Punkt liegt {{Höhe|61|DE-NN}} über dem Meeresspiegel.

=== Düne ===
Die ''Düne'' liegt östlich der Hauptinsel.
# Nordstrand
# Südstrand

== Geschichte ==
<!-- Abschnitt ausbauen -->
Bis 1890 war Helgoland [[Vereinigtes Königreich|britisch]]; im [[Helgoland-Sansibar-Vertrag]] kam es an das [[Deutsches Kaiserreich|Deutsche Reich]].<ref name="destatis" />

== Literatur ==
* Eckhard Wallmann: ''Eine Kolonie wird deutsch.'' Bredstedt 2012, ISBN 978-3-88007-000-0.

== Weblinks ==
{{Commonscat}}
* [https://www.helgoland.de/ Offizielle Website]

== Einzelnachweise ==
<references />

{{Navigationsleiste Inseln in der Nordsee}}
{{Normdaten|TYP=g|GND=4024578-9}}
[[Kategorie:Insel (Europa)]]
[[Kategorie:Helgoland| ]]
[[Bild:Helgoland Karte.png|links|Karte]]
[[en:Heligoland]]
[[nds:Helgoland]]
"""

DE_TEXT = """Helgoland

Helgoland (helgoländisch: deät Lun „das Land“) ist eine Insel in der Deutschen Bucht. Sie gehört zum Kreis Pinneberg in Schleswig-Holstein.

Geographie

Die Hauptinsel ist etwa 1 km² groß. Der höchste Punkt liegt über dem Meeresspiegel.

Düne

Die Düne liegt östlich der Hauptinsel.

Nordstrand

Südstrand

Geschichte

Bis 1890 war Helgoland britisch; im Helgoland-Sansibar-Vertrag kam es an das Deutsche Reich."""

ZH = """{{NoteTA
|G1 = Geography
|1 = zh-cn:信息; zh-tw:資訊;
}}
{{Infobox island
| name = 黑尔戈兰岛
| image name = Helgoland.jpg
| area_km2 = 1.7
}}
'''黑尔戈兰岛'''（{{lang-de|Helgoland}}）是位于[[北海 (大西洋)|北海]]的一个[[群岛]]，属于[[德国]][[石勒苏益格-荷尔斯泰因州]]。<ref>{{cite web|url=https://example.org|title=Helgoland|language=de}}</ref>

[[文件:Helgoland aerial.jpg|thumb|250px|黑尔戈兰岛鸟瞰]]
== 历史 ==
1807年至1890年间，该岛为-{zh-hans:英国;zh-hant:英國;}-领土。<ref name="treaty" />根据[[赫尔戈兰-桑给巴尔条约]]，岛屿归属-{德国}-。

== 地理 ==
岛屿面积约为1.7平方公里，由主岛和'''沙丘岛'''组成。
* 主岛
* 沙丘岛

== 参见 ==
* [[北弗里西亚群岛]]

== 参考文献 ==
{{reflist}}

[[Category:德国岛屿]]
[[分类:北海岛屿]]
[[en:Heligoland]]
[[zh-yue:黑爾戈蘭]]
"""

ZH_TEXT = """黑尔戈兰岛

黑尔戈兰岛是位于北海的一个群岛，属于德国石勒苏益格-荷尔斯泰因州。

历史

1807年至1890年间，该岛为英国领土。根据赫尔戈兰-桑给巴尔条约，岛屿归属德国。

地理

岛屿面积约为1.7平方公里，由主岛和沙丘岛组成。

主岛

沙丘岛"""

JA = """{{Otheruses|北海の島|その他|ヘルゴラント (曖昧さ回避)}}
{{基礎情報 島
|島名 = ヘルゴラント島
|画像 = [[ファイル:Helgoland.jpg|250px]]
|面積 = 1.7
}}
'''ヘルゴラント島'''（ヘルゴラントとう、{{lang-de|Helgoland}}）は、[[北海]]に浮かぶ[[ドイツ]]の[[島]]である<ref name="stat">{{Cite web|和書|url=https://example.jp/|title=統計|accessdate=2024-01-01}}</ref>。

== 概要 ==
[[ファイル:Helgoland Düne.jpg|サムネイル|左|デューネ島]]
主島と'''デューネ島'''の二島から構成される<ref>{{Cite book|和書|author=山田太郎|title=北海の島々|year=2001}}</ref>。名称は[[北フリジア語|フリジア語]]の<span lang="frr">Lun</span>（「土地」）に由来する<ref name="stat" />。

== 歴史 ==
* [[1807年]] - [[イギリス]]が占領。
* [[1890年]] - [[ヘルゴランド=ザンジバル条約]]により[[ドイツ帝国|ドイツ]]領となる。

== 関連項目 ==
* [[北フリースラント諸島]]

== 脚注 ==
{{Reflist}}

{{DEFAULTSORT:へるこらんととう}}
[[Category:ドイツの島]]
[[カテゴリ:北海の島]]
[[en:Heligoland]]
"""

JA_TEXT = """ヘルゴラント島

ヘルゴラント島（ヘルゴラントとう、）は、北海に浮かぶドイツの島である。

概要

主島とデューネ島の二島から構成される。名称はフリジア語のLun（「土地」）に由来する。

歴史

1807年 - イギリスが占領。

1890年 - ヘルゴランド=ザンジバル条約によりドイツ領となる。"""

RU = """{{Остров
|Название = Гельголанд
|Изображение = Helgoland.jpg
|Площадь = 1,7
}}
'''Гельго́ланд''' ({{lang-de|Helgoland}}) — [[архипелаг]] в [[Северное море|Северном море]], принадлежит [[Германия|Германии]].<ref>{{книга|автор=Иванов И. И.|заглавие=Острова Северного моря|год=2001}}</ref>

== География ==
[[Файл:Helgoland.jpg|мини|слева|Вид на главный остров]]
Архипелаг состоит из двух островов.<ref name="geo"/> Площадь главного острова — около {{num|1|км²}}.

Площадь круга: <math>S = \\pi r^2</math>, где ''r'' — радиус.

== История ==
: ''Основная статья: [[История Гельголанда]]''
В 1890 году по [[Гельголандско-Занзибарский договор|Гельголандско-Занзибарскому договору]] остров перешёл к Германии.

== Примечания ==
{{примечания}}

== Литература ==
* ''Иванов И. И.'' Острова. — М., 2001.

== Ссылки ==
* [http://www.helgoland.de Официальный сайт]

[[Категория:Острова Германии]]
[[Category:Северное море]]
[[en:Heligoland]]
"""

RU_TEXT = """Гельголанд

Гельго́ланд — архипелаг в Северном море, принадлежит Германии.

География

Архипелаг состоит из двух островов. Площадь главного острова — около.

Площадь круга:, где r — радиус.

История

Основная статья: История Гельголанда

В 1890 году по Гельголандско-Занзибарскому договору остров перешёл к Германии."""

ARTICLES = {"en": ("Heligoland", EN, EN_TEXT), "de": ("Helgoland", DE, DE_TEXT), "zh": ("黑尔戈兰岛", ZH, ZH_TEXT),
            "ja": ("ヘルゴラント島", JA, JA_TEXT), "ru": ("Гельголанд", RU, RU_TEXT)}


def other_pages(lang: str, first_id: int) -> list[Page]:
    """What a pages-articles dump holds besides articles: a redirect, talk/user/template/category
    pages, and an article made only of templates (it converts to nothing)."""
    ns = NAMESPACES[lang]
    title = ARTICLES[lang][0]
    return [page(first_id, f"{title} (Insel)", f"#REDIRECT [[{title}]]\n\n{{{{R from alternative name}}}}",
                 redirect=title),
            page(first_id + 1, f"{ns[1]}:{title}", "== Sources ==\nWhere is the population figure from? ~~~~", ns=1),
            page(first_id + 2, f"{ns[2]}:Example editor", "I edit articles about islands.", ns=2),
            page(first_id + 3, f"{ns[10]}:Infobox island",
                 "{{Infobox\n| above = {{{name|}}}\n}}<noinclude>[[Category:Templates]]</noinclude>", ns=10),
            page(first_id + 4, f"{ns[14]}:Islands", "Islands of the world.\n[[Category:Geography]]", ns=14),
            page(first_id + 5, "Stub", "{{Infobox island|name=Stub}}\n{{Coord|1|2}}\n[[Category:Islands]]\n")]


def english_pages(n: int, *, first_id: int = 1000) -> list[Page]:
    """``n`` English pages: every fourth a redirect, every seventh a talk page, else an article
    (the Heligoland article, retitled and with a numbered sentence, so each differs)."""
    out = []
    for i in range(n):
        pid = first_id + 3 * i
        if i % 4 == 3:
            target = f"Island {i - 1}"
            out.append(page(pid, f"{target} (redirect)", f"#REDIRECT [[{target}]]", redirect=target))
        elif i % 7 == 5:
            out.append(page(pid, f"Talk:Island {i}", f"Discussion number {i}.", ns=1))
        else:
            out.append(page(pid, f"Island {i}", EN.replace("'''Heligoland'''", f"'''Island {i}''' (number {i})")))
    return out


def english_text(i: int) -> str:
    """What ``english_pages``' article ``i`` converts to."""
    return EN_TEXT.replace("Heligoland\n\nHeligoland is", f"Island {i}\n\nIsland {i} (number {i}) is")
