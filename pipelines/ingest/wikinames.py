"""Names that MediaWiki gives a meaning, for reading Wikipedia dumps (``mediawiki``, ``wikitext``).

* ``CANONICAL_NAMESPACES``: the English canonical namespace names every wiki accepts beside its
  localised ones (a German article may write ``[[File:…]]`` as well as ``[[Datei:…]]``); the
  localised names come from the dump's own ``<siteinfo><namespaces>``.
* ``NAMESPACE_ALIASES``: aliases that are not in ``<siteinfo>`` but common in article text:
  ``Image`` (every wiki) and a few localised ones (``Bild``, ``Изображение``, ``画像``, and the
  Chinese ``文件``/``分类``, whose wiki names those namespaces ``File``/``Category`` in its siteinfo).
* ``LANGUAGE_CODES``: the interlanguage prefixes of the Wikipedias (``[[fr:Paris]]`` at the end of
  an article is a link to the French article, shown in the sidebar, not text). A prefix outside
  this list (``[[Re:Zero]]``, ``[[wikt:word]]``) is an ordinary (inline) link.
* ``END_SECTIONS``: titles of end matter (references, external links, "see also", bibliographies)
  in the languages the tests cover and a few more; such a section is dropped with its subsections
  when it is a level-1 or level-2 section (end matter is always top level, and a "Literatur"
  subsection under "Kultur" is content).
"""
from __future__ import annotations

FILE_NS, CATEGORY_NS, MEDIA_NS = 6, 14, -2

CANONICAL_NAMESPACES = {
    -2: "Media", -1: "Special", 0: "", 1: "Talk", 2: "User", 3: "User talk", 4: "Project", 5: "Project talk",
    6: "File", 7: "File talk", 8: "MediaWiki", 9: "MediaWiki talk", 10: "Template", 11: "Template talk",
    12: "Help", 13: "Help talk", 14: "Category", 15: "Category talk",
}

NAMESPACE_ALIASES = {
    FILE_NS: ("Image", "Bild", "Изображение", "画像", "图像", "圖像", "文件", "檔案", "档案", "Imagen", "Immagine"),
    7: ("Image talk",),
    CATEGORY_NS: ("分类", "分類", "カテゴリ"),
}

# The language editions of Wikipedia (their subdomains), as interlanguage prefixes.
LANGUAGE_CODES = frozenset("""
aa ab ace ady af ak als alt am ami an ang anp ar arc ary arz as ast atj av avk awa ay az azb ba ban bar
bat-smg bbc bcl bdr be be-tarask be-x-old bew bg bh bi bjn blk bm bn bo bpy br bs btm bug bxr ca cbk-zam
cdo ce ceb ch cho chr chy ckb co cr crh cs csb cu cv cy da dag de dga din diq dsb dtp dty dv dz ee el
eml en eo es et eu ext fa fat ff fi fiu-vro fj fo fon fr frp frr fur fy ga gag gan gcr gd gl glk gn gom
gor got gpe gu guc gur guw gv ha hak haw he hi hif ho hr hsb ht hu hy hyw hz ia iba id ie ig igl ii ik
ilo inh io is it iu ja jam jbo jv ka kaa kab kbd kbp kcg kg kge ki kj kk kl km kn knc ko koi kr krc ks
ksh ku kus kv kw ky la lad lb lbe lez lfn lg li lij lld lmo ln lo lrc lt ltg lv lzh mad mai map-bms mdf
mg mh mhr mi min mk ml mn mni mnw mo mos mr mrj ms mt mus mwl my myv mzn na nah nan nap nds nds-nl ne
new ng nia nl nn no nov nqo nr nrm nso nup nv ny oc olo om or os pa pag pam pap pcd pcm pdc pfl pi pih
pl pms pnb pnt ps pt pwn qu rm rmy rn ro roa-rup roa-tara rsk ru rue rup rw sa sah sat sc scn sco sd se
sg sgs sh shi shn shy si simple sk skr sl sm smn sn so sq sr srn ss st stq su sv sw syl szl szy ta tay
tcy tdd te tet tg th ti tig tk tl tly tn to tpi tr trv ts tt tum tw ty tyv udm ug uk ur uz ve vec vep
vi vls vo vro wa war wo wuu xal xh xmf yi yo yue za zea zgh zh zh-classical zh-min-nan zh-yue zu
""".split())

# Compared after ``section_key`` (case-folded, spaces collapsed, a trailing colon dropped).
END_SECTIONS = frozenset("""
references|external links|external link|see also|further reading|notes|footnotes|bibliography|sources|
citations|notes and references|references and notes|works cited|general references|explanatory notes|
einzelnachweise|weblinks|siehe auch|literatur|anmerkungen|quellen|belege|fußnoten|
références|notes et références|liens externes|voir aussi|bibliographie|articles connexes|
referencias|enlaces externos|véase también|bibliografía|notas|
note|collegamenti esterni|voci correlate|bibliografia|referências|ligações externas|ver também|
примечания|ссылки|литература|см. также|источники|сноски|
脚注|出典|参考文献|関連項目|外部リンク|注釈|
參考文獻|参考资料|參考資料|外部链接|外部連結|相关条目|相關條目|参见|參見|注释|註釋|延伸阅读|延伸閱讀
""".replace("\n", "").split("|"))


def section_key(title: str) -> str:
    """A heading's title as ``END_SECTIONS`` holds it."""
    return " ".join(title.split()).rstrip(":：").strip().casefold()


def name_key(name: str) -> str:
    """A namespace name or link prefix as MediaWiki compares them: underscores are spaces, runs of
    spaces are one, case does not matter."""
    return " ".join(name.replace("_", " ").split()).casefold()
