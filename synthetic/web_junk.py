"""A labelled mix of clean prose and web junk, to measure the filter blocks' precision and recall.

Clean prose comes from real books (a folder of Project Gutenberg texts the caller names): the
header and licence are cut off at the ``*** START``/``*** END`` lines, the first and last tenth
of each book (contents, prefaces, indexes) are skipped, hard-wrapped lines are joined into one
line per paragraph, and a document is a run of consecutive paragraphs of 1,000 to 4,000
characters, as a web article is. Without them, ``synthetic.prose`` stands in.

Junk is generated in the kinds a crawl is full of, each with its own randomness so no two
documents are alike: cookie and consent banners with footer boilerplate, navigation menus, spam
and keyword stuffing, prose in other languages (French, German, Spanish, Italian, Portuguese,
Dutch), source code, lists (bullets, product listings, link lists), lorem ipsum, and prose whose
paragraphs or sentences repeat (the duplicated n-gram case). Three kinds no rule over counts can
see, since every count is a prose document's: ``salad`` (real words drawn by their frequency in a
prose document, in sentences with capitals, commas and full stops: what spam generators and
garbled scrapes produce), ``shuffled`` (a prose document with the words of every sentence in
random order) and ``script`` (code that C4's brace and JavaScript rules miss: Python, YAML,
shell and SQL with comments and docstrings written as sentences). ``mix`` returns ``(text, label)``
pairs, label ``"clean"`` or the junk kind, used by a test (the goal: >= 0.95 of the junk dropped,
>= 0.95 of the prose kept) and by ``benchmarks/corpus/filters.py``. It lives in ``synthetic``
beside the other generators: deterministic data that the benchmarks and the tests share.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

from synthetic import prose as generated

JUNK_KINDS = ("cookie", "menu", "spam", "foreign", "code", "list", "lorem", "repeated", "salad", "shuffled",
              "script")

_START = re.compile(r"^\*\*\* ?START OF", re.M)
_END = re.compile(r"^\*\*\* ?END OF", re.M)


# ------------------------------------------------------------------------------ clean prose
def book_paragraphs(path: Path) -> list[str]:
    """A book's body paragraphs, each on one line."""
    text = path.read_text(encoding="utf-8-sig", errors="replace").replace("\r\n", "\n")
    start, end = _START.search(text), _END.search(text)
    body = text[start.end() if start else 0:end.start() if end else len(text)]
    body = body[body.find("\n") + 1:]
    paragraphs = [" ".join(line.strip() for line in p.split("\n")) for p in re.split(r"\n\s*\n", body)]
    paragraphs = [re.sub(r" {2,}", " ", p).strip() for p in paragraphs]
    return [p for p in paragraphs if p]


def book_documents(per_book: int, seed: int, files: list[Path]) -> list[str]:
    """``per_book`` documents of consecutive paragraphs from each book, at random places."""
    rng = random.Random(seed)
    docs = []
    for path in files:
        paragraphs = book_paragraphs(path)
        lo, hi = len(paragraphs) // 10, len(paragraphs) * 9 // 10
        if hi - lo < 20:
            continue
        for _ in range(per_book):
            i = rng.randrange(lo, hi - 10)
            target = rng.randint(1000, 4000)
            doc = []
            while i < hi and sum(map(len, doc)) < target:
                doc.append(paragraphs[i])
                i += 1
            docs.append("\n\n".join(doc))
    return docs


def clean_documents(n: int, seed: int = 0, books: Path | None = None, exclude: tuple[str, ...] = ()) -> list[str]:
    """``n`` clean documents: from the books in folder ``books`` when given and present (but the
    files named in ``exclude``), else synthetic prose."""
    if books is not None and Path(books).is_dir():
        files = [f for f in sorted(Path(books).glob("*.txt")) if f.name not in exclude]
        docs = book_documents(max(1, -(-n // max(len(files), 1))), seed, files)
        return random.Random(seed).sample(docs, min(n, len(docs)))
    return generated.documents(n, seed)


# ------------------------------------------------------------------------------ junk
_COOKIE = [
    "We use cookies to improve your experience on our site.",
    "This website uses cookies to personalise content and ads and to analyse our traffic.",
    "By continuing to browse, you agree to our use of cookies.",
    "Accept all cookies", "Reject all", "Manage preferences", "Cookie settings",
    "We and our partners store and access information on your device.",
    "Read our Privacy Policy and Cookie Policy for more information.",
    "Terms of Use", "Privacy Policy", "Do Not Sell My Personal Information",
    "© {year} {brand} Inc. All rights reserved.", "Sign up for our newsletter", "Subscribe",
    "Follow us on Facebook, Twitter and Instagram", "Your privacy choices", "Contact us", "Sitemap",
]
_MENU = ["Home", "About Us", "Products", "Services", "Blog", "News", "Contact", "Careers", "Shop",
         "Support", "FAQ", "Login", "Register", "Cart (0)", "My Account", "Women", "Men", "Kids",
         "Sale", "New Arrivals", "Gift Cards", "Store Locator", "Help Center", "Returns", "Search"]
_BRANDS = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wayne", "Tyrell"]
_SPAM = ["cheap", "best", "buy", "online", "discount", "free", "shipping", "viagra", "casino", "bonus",
         "loans", "fast", "cash", "win", "now", "deal", "price", "replica", "watches", "crypto"]
_FOREIGN = {
    "fr": ["Le conseil municipal s'est réuni mardi soir pour discuter du budget de l'année prochaine.",
           "Après un long hiver, la rivière a enfin dégelé et les bateaux sont revenus au port.",
           "Elle n'avait jamais vu une ville aussi animée, avec des marchés dans chaque petite rue.",
           "Les chercheurs ont mesuré la température du lac tous les matins pendant trois mois.",
           "La plupart des vieilles maisons du village sont construites en pierre et en bois.",
           "Il a expliqué que le moteur était tombé en panne parce que personne n'avait changé la courroie.",
           "Pendant le festival, les musiciens ont joué sur la place jusqu'à minuit passé."],
    "de": ["Der Gemeinderat traf sich am Dienstagabend, um über den Haushalt des nächsten Jahres zu sprechen.",
           "Nach einem langen Winter taute der Fluss endlich auf, und die Boote kehrten in den Hafen zurück.",
           "Sie hatte noch nie eine so belebte Stadt gesehen, mit Märkten in jeder engen Gasse.",
           "Die Forscher maßen drei Monate lang jeden Morgen die Temperatur des Sees.",
           "Die meisten alten Häuser im Dorf wurden aus Stein und Holz gebaut.",
           "Er erklärte, dass der Motor ausgefallen sei, weil niemand den Riemen ersetzt habe.",
           "Während des Festes spielten die Musiker bis weit nach Mitternacht auf dem Platz."],
    "es": ["El ayuntamiento se reunió el martes por la noche para hablar del presupuesto del próximo año.",
           "Después de un largo invierno, el río por fin se deshieló y los barcos volvieron al puerto.",
           "Nunca había visto una ciudad tan llena de gente, con mercados en cada calle estrecha.",
           "Los investigadores midieron la temperatura del lago cada mañana durante tres meses.",
           "La mayoría de las casas antiguas del pueblo están hechas de piedra y madera.",
           "Explicó que el motor había fallado porque nadie había cambiado la correa gastada.",
           "Durante la fiesta, los músicos tocaron en la plaza hasta mucho después de la medianoche."],
    "it": ["Il consiglio comunale si è riunito martedì sera per discutere il bilancio del prossimo anno.",
           "Dopo un lungo inverno, il fiume finalmente si è sgelato e le barche sono tornate in porto.",
           "Non aveva mai visto una città così affollata, con mercati in ogni stradina.",
           "I ricercatori hanno misurato la temperatura del lago ogni mattina per tre mesi.",
           "La maggior parte delle vecchie case del paese è costruita in pietra e legno.",
           "Ha spiegato che il motore si era guastato perché nessuno aveva sostituito la cinghia.",
           "Durante la festa, i musicisti hanno suonato in piazza fino a ben oltre la mezzanotte."],
    "pt": ["A câmara municipal reuniu-se na terça-feira à noite para discutir o orçamento do próximo ano.",
           "Depois de um longo inverno, o rio finalmente descongelou e os barcos voltaram ao porto.",
           "Ela nunca tinha visto uma cidade tão cheia, com mercados em todas as ruas estreitas.",
           "Os investigadores mediram a temperatura do lago todas as manhãs durante três meses.",
           "A maioria das casas antigas da aldeia foi construída com pedra e madeira.",
           "Ele explicou que o motor avariou porque ninguém tinha trocado a correia gasta.",
           "Durante a festa, os músicos tocaram na praça até muito depois da meia-noite."],
    "nl": ["De gemeenteraad kwam dinsdagavond bijeen om de begroting voor volgend jaar te bespreken.",
           "Na een lange winter was de rivier eindelijk ontdooid en keerden de boten terug naar de haven.",
           "Ze had nog nooit zo'n drukke stad gezien, met markten in elke smalle straat.",
           "De onderzoekers maten drie maanden lang elke ochtend de temperatuur van het meer.",
           "De meeste oude huizen in het dorp zijn gebouwd van steen en hout.",
           "Hij legde uit dat de motor kapot was gegaan omdat niemand de versleten riem had vervangen.",
           "Tijdens het feest speelden de muzikanten op het plein tot ver na middernacht."],
}
_CODE = [
    "def {f}(items, limit=10):\n    result = []\n    for item in items:\n        if item.score > limit:\n"
    "            result.append(item.name)\n    return sorted(result)\n",
    "function {f}(data) {{\n  const out = data.filter(x => x.active);\n  return out.map(x => x.id);\n}}\n",
    "import os\nimport sys\n\nPATH = os.environ.get('{F}_PATH', '/tmp')\nprint(len(sys.argv), PATH)\n",
    "for (int i = 0; i < n; i++) {{\n    total += values[i] * weights[i];\n}}\nreturn total / n;\n",
    "SELECT id, name, price FROM products WHERE category = '{f}' ORDER BY price DESC LIMIT 20;\n",
    "<div class=\"{f}\">\n  <a href=\"/home\">Home</a>\n  <span id=\"cart\">0</span>\n</div>\n",
    "$ pip install {f}\n$ {f} --config config.yaml --verbose\nINFO: loaded 42 items\n",
]
_LOREM = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
          "labore et dolore magna aliqua ut enim ad minim veniam quis nostrud exercitation ullamco laboris "
          "nisi ut aliquip ex ea commodo consequat duis aute irure dolor in reprehenderit in voluptate").split()
_PRODUCTS = ["Wireless Mouse", "USB-C Cable 2m", "Laptop Stand", "Mechanical Keyboard", "HD Webcam",
             "Noise Cancelling Headphones", "Phone Case", "Desk Lamp", "Portable Charger", "Monitor Arm"]


def _cookie(rng: random.Random, prose: str) -> str:
    lines = rng.sample(_COOKIE, rng.randint(6, len(_COOKIE)))
    brand = rng.choice(_BRANDS)
    lines = [line.format(year=rng.randint(2005, 2025), brand=brand) for line in lines]
    return "\n".join(lines)


def _menu(rng: random.Random, prose: str) -> str:
    items = rng.sample(_MENU, rng.randint(10, len(_MENU)))
    sep = rng.choice(["\n", " | ", " · ", "\n"])
    return sep.join(items) + "\n" + rng.choice(_BRANDS) + " - " + rng.choice(["Official Site", "Online Store"])


def _spam(rng: random.Random, prose: str) -> str:
    words = [rng.choice(_SPAM[:8]) if rng.random() < 0.7 else rng.choice(_SPAM) for _ in range(rng.randint(60, 300))]
    if rng.random() < 0.5:  # stuffed into lines of "keyword keyword ..."
        return "\n".join(" ".join(words[i:i + 8]) for i in range(0, len(words), 8))
    return " ".join(words) + "."


def _foreign(rng: random.Random, prose: str) -> str:
    lang = rng.choice(sorted(_FOREIGN))
    sentences = _FOREIGN[lang]
    paragraphs = [" ".join(rng.sample(sentences, rng.randint(3, len(sentences)))) for _ in range(rng.randint(2, 4))]
    return "\n\n".join(paragraphs)


def _code(rng: random.Random, prose: str) -> str:
    name = rng.choice(["parse", "load_items", "compute", "render", "fetch_data", "update", "main"])
    parts = [rng.choice(_CODE).format(f=name, F=name.upper()) for _ in range(rng.randint(2, 5))]
    return "\n".join(parts)


def _list(rng: random.Random, prose: str) -> str:
    kind = rng.randrange(3)
    items = rng.sample(_PRODUCTS, rng.randint(6, len(_PRODUCTS)))
    if kind == 0:
        return "\n".join(f"{rng.choice(['-', '•', '*'])} {p}" for p in items)
    if kind == 1:
        return "\n".join(f"{p} ${rng.randint(5, 300)}.{rng.randint(0, 99):02d} In stock" for p in items)
    return "\n".join(f"{p} | Reviews ({rng.randint(0, 900)}) | Add to cart" for p in items)


def _lorem(rng: random.Random, prose: str) -> str:
    words = [rng.choice(_LOREM) for _ in range(rng.randint(40, 200))]
    text = "Lorem ipsum " + " ".join(words) + "."
    if rng.random() < 0.5:  # a page template: real-looking sentences around the placeholder
        text = prose.split("\n\n")[0] + "\n\n" + text
    return text


def _repeated(rng: random.Random, prose: str) -> str:
    paragraphs = prose.split("\n\n")
    kind = rng.randrange(3)
    if kind == 0:  # a paragraph pasted again and again
        p = rng.choice(paragraphs)
        return "\n\n".join(paragraphs[:2] + [p] * rng.randint(2, 4))
    if kind == 1:  # a sentence or slogan stuffed between the paragraphs
        slogan = rng.choice(["Click here to read more about our amazing offers today",
                             "Call now for a free quote from our friendly team",
                             "Best prices guaranteed on all of our products this week"])
        return "\n\n".join(f"{p[:rng.randint(200, 400)]}. {slogan}. {slogan}!" for p in paragraphs[:6])
    words = prose.split()  # a run of words repeated, as spinners produce
    start = rng.randrange(max(1, len(words) - 12))
    run = " ".join(words[start:start + 12])
    return " ".join(words[:80]) + " " + " ".join([run] * rng.randint(4, 8))


_SCRIPT = [
    'def {f}(path, limit=None):\n    """Read the records of a file and return the ones that are still valid.\n\n'
    '    The records are checked one by one, and the invalid ones are logged and skipped.\n    """\n'
    '    records = []\n    with open(path) as handle:\n        for line in handle:\n'
    '            record = parse(line)\n            if record.valid:\n                records.append(record)\n'
    '    return records[:limit]\n',
    "# Configuration of the {f} service. Change the values below and restart it.\n"
    "server:\n  host: 0.0.0.0\n  port: 8080\n  workers: 4\ndatabase:\n  url: postgres://localhost/{f}\n"
    "  pool_size: 10\nlogging:\n  level: info\n",
    "# Install the dependencies first, then build the project.\n$ sudo apt-get install -y build-essential\n"
    "$ git clone https://example.org/{f}.git\n$ cd {f}\n$ make && make install\n",
    "-- This query returns the customers who ordered in the last month.\nSELECT c.id, c.name, COUNT(o.id) AS orders\n"
    "FROM customers c\nJOIN orders o ON o.customer_id = c.id\nWHERE o.created_at > NOW() - INTERVAL '30 days'\n"
    "GROUP BY c.id, c.name\nORDER BY orders DESC;\n",
    "class {F}Handler(BaseHandler):\n    # Handles the requests for the {f} endpoint.\n\n"
    "    def get(self, request):\n        items = self.store.list(request.user)\n"
    "        return self.render(items, status=200)\n",
]


def _salad(rng: random.Random, prose: str) -> str:
    words = [w.strip(".,;:!?\"'()[]\u201c\u201d\u2018\u2019").lower() for w in prose.split()]
    words = [w for w in words if w.isalpha()] or ["the"]
    sentences = []
    for _ in range(rng.randint(8, 20)):
        s = [rng.choice(words) for _ in range(rng.randint(6, 18))]
        if len(s) > 9 and rng.random() < 0.5:
            s[rng.randrange(3, len(s) - 3)] += ","
        sentences.append(" ".join(s).capitalize() + rng.choice(".....?!"))
    return " ".join(sentences)


def _shuffled(rng: random.Random, prose: str) -> str:
    paragraphs = []
    for p in prose.split("\n\n"):
        sentences = []
        for sentence in re.split(r"(?<=[.!?])\s+", p):
            w = sentence.split()
            rng.shuffle(w)
            sentences.append(" ".join(w))
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def _script(rng: random.Random, prose: str) -> str:
    name = rng.choice(["records", "billing", "upload", "reports", "search", "inventory"])
    intro = prose.split("\n\n")[0][:rng.randint(0, 300)]
    parts = [t.format(f=name, F=name.capitalize()) for t in rng.sample(_SCRIPT, rng.randint(2, 4))]
    return "\n".join(([intro] if intro else []) + parts)


_MAKERS = {"cookie": _cookie, "menu": _menu, "spam": _spam, "foreign": _foreign, "code": _code,
           "list": _list, "lorem": _lorem, "repeated": _repeated, "salad": _salad,
           "shuffled": _shuffled, "script": _script}


def junk_documents(n_per_kind: int, seed: int = 0, prose: list[str] | None = None) -> list[tuple[str, str]]:
    """``(text, kind)`` pairs, ``n_per_kind`` of each kind in ``JUNK_KINDS``."""
    rng = random.Random(seed)
    prose = prose or generated.documents(50, seed)
    return [(_MAKERS[kind](rng, rng.choice(prose)), kind) for kind in JUNK_KINDS for _ in range(n_per_kind)]


def mix(n_clean: int = 400, n_per_kind: int = 50, seed: int = 0,
        books: Path | None = None, exclude: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Clean prose (from the books in folder ``books`` when given, but those in ``exclude``) and
    junk, labelled ``"clean"`` or the junk kind, in a fixed shuffled order."""
    clean = clean_documents(n_clean, seed, books, exclude)
    docs = [(d, "clean") for d in clean] + junk_documents(n_per_kind, seed, prose=clean[:100])
    random.Random(seed).shuffle(docs)
    return docs
