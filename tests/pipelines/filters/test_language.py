"""Language block: py3langid on short hand-written sentences (accuracy reported and floored),
datatrove's keep rule (a wanted language above min_score), and no download at run time."""
from __future__ import annotations

import socket

import pytest

from pipelines.filters import language
from tests.pipelines.filters._docs import block, prose, reason, verdict

SENTENCES = {
    "en": [
        "The train to London leaves at nine in the morning.",
        "My sister bought a new bicycle last week.",
        "Could you please close the window?",
        "We walked along the beach until sunset.",
        "The children are playing football in the park.",
        "I have never read such a strange book.",
        "It rained all day, so we stayed at home.",
        "The doctor said I should drink more water.",
        "Our neighbours are moving to a smaller house.",
        "Please send me the report before Friday.",
    ],
    "fr": [
        "Le train pour Paris part à neuf heures du matin.",
        "Ma sœur a acheté un nouveau vélo la semaine dernière.",
        "Pourriez-vous fermer la fenêtre, s'il vous plaît ?",
        "Nous avons marché le long de la plage jusqu'au coucher du soleil.",
        "Les enfants jouent au football dans le parc.",
        "Je n'ai jamais lu un livre aussi étrange.",
        "Il a plu toute la journée, alors nous sommes restés à la maison.",
        "Le médecin m'a dit de boire plus d'eau.",
        "Nos voisins déménagent dans une maison plus petite.",
        "Envoyez-moi le rapport avant vendredi, s'il vous plaît.",
    ],
    "de": [
        "Der Zug nach Berlin fährt um neun Uhr morgens ab.",
        "Meine Schwester hat letzte Woche ein neues Fahrrad gekauft.",
        "Könnten Sie bitte das Fenster schließen?",
        "Wir sind bis zum Sonnenuntergang am Strand entlang gelaufen.",
        "Die Kinder spielen im Park Fußball.",
        "Ich habe noch nie ein so seltsames Buch gelesen.",
        "Es hat den ganzen Tag geregnet, also sind wir zu Hause geblieben.",
        "Der Arzt sagte, ich solle mehr Wasser trinken.",
        "Unsere Nachbarn ziehen in ein kleineres Haus.",
        "Bitte schicken Sie mir den Bericht vor Freitag.",
    ],
    "es": [
        "El tren a Madrid sale a las nueve de la mañana.",
        "Mi hermana compró una bicicleta nueva la semana pasada.",
        "¿Podría cerrar la ventana, por favor?",
        "Caminamos por la playa hasta la puesta del sol.",
        "Los niños están jugando al fútbol en el parque.",
        "Nunca he leído un libro tan extraño.",
        "Llovió todo el día, así que nos quedamos en casa.",
        "El médico me dijo que debería beber más agua.",
        "Nuestros vecinos se mudan a una casa más pequeña.",
        "Por favor, envíame el informe antes del viernes.",
    ],
    "it": [
        "Il treno per Roma parte alle nove del mattino.",
        "Mia sorella ha comprato una bicicletta nuova la settimana scorsa.",
        "Potrebbe chiudere la finestra, per favore?",
        "Abbiamo camminato lungo la spiaggia fino al tramonto.",
        "I bambini stanno giocando a calcio nel parco.",
        "Non ho mai letto un libro così strano.",
        "Ha piovuto tutto il giorno, quindi siamo rimasti a casa.",
        "Il medico mi ha detto di bere più acqua.",
        "I nostri vicini si trasferiscono in una casa più piccola.",
        "Per favore, mandami la relazione prima di venerdì.",
    ],
    "pt": [
        "O comboio para Lisboa parte às nove da manhã.",
        "A minha irmã comprou uma bicicleta nova na semana passada.",
        "Podia fechar a janela, por favor?",
        "Caminhámos ao longo da praia até ao pôr do sol.",
        "As crianças estão a jogar futebol no parque.",
        "Nunca li um livro tão estranho.",
        "Choveu o dia todo, por isso ficámos em casa.",
        "O médico disse que eu devia beber mais água.",
        "Os nossos vizinhos vão mudar-se para uma casa mais pequena.",
        "Por favor, envie-me o relatório antes de sexta-feira.",
    ],
    "nl": [
        "De trein naar Amsterdam vertrekt om negen uur 's ochtends.",
        "Mijn zus heeft vorige week een nieuwe fiets gekocht.",
        "Kunt u alstublieft het raam dichtdoen?",
        "We liepen langs het strand tot zonsondergang.",
        "De kinderen spelen voetbal in het park.",
        "Ik heb nog nooit zo'n vreemd boek gelezen.",
        "Het regende de hele dag, dus we bleven thuis.",
        "De dokter zei dat ik meer water moest drinken.",
        "Onze buren verhuizen naar een kleiner huis.",
        "Stuur me alsjeblieft het verslag voor vrijdag.",
    ],
}


def test_accuracy_on_short_sentences(capsys):
    results = {lang: sum(language.classify(s)[0][0] == lang for s in ss) / len(ss) for lang, ss in SENTENCES.items()}
    overall = sum(results.values()) / len(results)
    with capsys.disabled():
        print(f"\npy3langid accuracy on {sum(map(len, SENTENCES.values()))} short sentences: {overall:.3f} "
              f"per language {results}")
    assert overall >= 0.9
    assert min(results.values()) >= 0.7


def test_keeps_english_and_records_the_language():
    from pipelines.filters import Doc, run_blocks

    doc = Doc(prose(2))
    assert run_blocks(doc, [block("language")]) is None
    assert doc.language == "en" and doc.language_score > 0.65


def test_drops_other_languages_with_the_reason():
    french = " ".join(SENTENCES["fr"])
    v = verdict(block("language"), french)
    assert v.reason == "filter:language:languages" and v.detail.startswith("fr=")
    assert reason(block("language", languages=["en", "fr"]), french) is None
    assert reason(block("language", languages=None), french) is None  # any language, confident


def test_min_score():
    mixed = SENTENCES["en"][0] + " " + SENTENCES["de"][0]
    ranked = language.classify(mixed)
    top, score = ranked[0]
    v = verdict(block("language", languages=[top], min_score=min(score + 0.01, 1.0)), mixed)
    assert v.reason == "filter:language:min_score"
    assert reason(block("language", languages=[top], min_score=score - 0.01), mixed) is None
    assert reason(block("language", languages=[top], min_score=None), mixed) is None


def test_unknown_language_code_is_an_error():
    with pytest.raises(ValueError, match="does not know"):
        block("language", languages=["english"])


def test_sample_is_cut_at_a_space():
    text = "word " * 1000
    assert len(language.sample(text, 2000)) <= 2000 and language.sample(text, 2000).endswith("word")
    assert language.sample(text, None) == text


def test_model_loads_without_network(monkeypatch):
    def refuse(*a, **k):
        raise OSError("network disabled in this test")

    language.identifier.cache_clear()
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert language.classify("The weather is lovely today and we are going out.")[0][0] == "en"


def test_compiled_scores_equal_py3langid():
    from synthetic import web_junk

    texts = [s for ss in SENTENCES.values() for s in ss] + ["", "12345", "ABC DEF GHI"]
    texts += [t for t, _ in web_junk.junk_documents(3, seed=5)]
    reference = language.identifier()
    for text in texts:
        ours, theirs = language._compiled().rank(text), reference.rank(text)
        assert ours[0][0] == theirs[0][0], text
        assert dict(ours) == pytest.approx(dict(theirs), abs=1e-5)
