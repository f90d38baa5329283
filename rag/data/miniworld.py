"""miniworld: a seeded fictional world, its encyclopedia, and every paper task built from it.

Entities have invented names, so no pretrained model can know them, and test questions are about
entities disjoint from training ones: the knowledge has to come from the index. Snapshot ``b``
changes the leaders of some countries (the paper's index hot-swap, Section 4.5). Each article
states its facts among filler sentences with distractors of the answer's type, in one of several
phrasings per relation (never the questions' wording), cut into sentence-aligned passages of at
most ``passage_words`` words; a share of countries and cities have a look-alike name one letter
apart. Every fact knows the passage that states it (a question's ``gold_docs``).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from rag.errors import ConfigError
from rag.tasks import FEVER2_LABELS, FEVER3_LABELS

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "th", "sh", "gl", "pl", "vr"]
VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "ia"]
CODAS = ["", "", "n", "r", "l", "s", "th", "k", "m", "x"]
OCCUPATIONS = ["painter", "chemist", "poet", "architect", "general", "sculptor", "economist", "composer", "physician", "astronomer", "judge", "diplomat"]
CONTINENTS = ["Northern Velkar", "Southern Velkar", "the Ostrel Isles", "Great Maradon", "the Quenn Coast"]
TWIN_FRACTION = 0.25  # countries and cities with a look-alike name (one letter apart)
STATED = 0.85  # chance that an article states an optional attribute (FEVER's NOT ENOUGH INFO uses the rest)

# Several phrasings per relation; none uses the questions' wording ({s} subject, {v} value).
PHRASINGS = {
    "continent": ["{s} lies in {v}.", "{s} is one of the nations of {v}.", "The land of {s} forms part of {v}."],
    "capital": ["The seat of government of {s} is {v}.", "{v} serves as the seat of power of {s}.",
                "The government of {s} sits in {v}."],
    "leader": ["{s} is governed by {v}.", "The head of state of {s} is {v}.", "{v} heads the government of {s}."],
    "currency": ["People in {s} pay with the {v}.", "The {v} is the coin used in {s}.", "Prices in {s} are given in {v} coins."],
    "language": ["The main tongue of {s} is {v}.", "The people of {s} talk to each other in {v}.", "{v} is heard across {s}."],
    "independence": ["{s} gained its sovereignty in {v}.", "{s} has been a free state since {v}.", "Self-rule came to {s} in {v}."],
    "country": ["{s} is a town of {v}.", "{s} belongs to the nation of {v}.", "{s} is found within the borders of {v}."],
    "river": ["{s} was built beside the {v}.", "The {v} flows through {s}.", "Boats on the {v} stop at {s}."],
    "population": ["{s} is home to about {v} residents.", "Roughly {v} inhabitants make their homes in {s}.", "The town of {s} counts {v} inhabitants."],
    "founded": ["{s} dates back to {v}.", "The first houses of {s} were raised in {v}.", "{s} was settled in {v}."],
    "occupation": ["{s} made a career as a {v}.", "{s} worked all their life as a {v}.", "By trade, {s} was a {v}."],
    "birthplace": ["{s} came into the world in {v}.", "{s} grew up in {v}, the town of their birth.", "{s} is a native of {v}."],
    "born": ["{s} arrived in the world in {v}.", "{s} first saw the light of day in {v}.", "The birthday of {s} fell in {v}."],
    "spouse_city": ["{s} has a home in {v}.", "These days {s} resides in {v}.", "{s} keeps a house in {v}."],
    "leads": ["{s} is the head of state of {v}.", "{s} governs {v}.", "{s} heads the government of {v}."],
}

FILLERS = {
    "country": [
        "{s} is known for its {thing}.", "{s} signed a trade treaty with {c} in {y}.",
        "The highest mountain of {s}, Mount {w}, rises {n} metres above the sea.", "Farming in {s} is dominated by {crop}.",
        "Every summer, visitors from {c} travel to {s} for the {w} festival.", "The railway from {s} to {c} opened in {y}.",
        "Elections in {s} are held every {k} years.", "Schools in {s} also teach {lang}.",
        "The national museum of {s} holds {n} paintings.", "A great flood struck the lowlands of {s} in {y}.",
        "The coastline of {s} is lined with {thing}.", "Writers from {s} often describe the {w} valley.",
        "In {y}, a new coin design entered use in {s}.", "The army of {s} was reformed in {y}.",
        # lexical traps: the questions' words, not their answers
        "Foreign capital flowed into the mines of {s} after {y}.", "The leader of the {w} choir brought it to {s} in {y}.",
        "Independent newspapers were founded in {s} in {y}.", "Visitors to {s} are often asked what currency rules apply at the border.",
        "The sign language of {s} was first written down in {y}.", "A statue of {p} stands in the old harbour of {s}.",
        "The winters of {s} are long and cold.", "Roads in {s} were paved during the {w} years.",
    ],
    "city": [
        "{s} is known for its {thing}.", "The old market of {s} opened in {y}.", "A bridge links {s} with the road to {c}.",
        "The university of {s} has {n} students.", "Traders from {c} sell {crop} in {s}.", "The cathedral of {s} burned down in {y}.",
        "Many streets of {s} are named after {p}.", "The {w} theatre is the pride of {s}.",
        "The city council of {s} meets every {k} weeks.", "A famous choir was founded in {s} in {y}.",
        "Around {n} people visit the gardens of {s} each spring.", "The river port of {s} was closed in {y}.",
        "{p} opened a school in {s} in {y}.", "The bells of {s} were cast in {c}.",
    ],
    "person": [
        "{s} is remembered for {thing}.", "{s} travelled to {c} in {y}.", "{s} once met {p} at a banquet.",
        "{s} wrote a book about the {w} valley.", "{s} spent the winter of {y} in {c}.", "Friends say {s} loved {crop}.",
        "{s} received the {w} prize in {y}.", "{s} studied for {k} years before working.",
        "The {w} prize was born of an idea of {s}.", "{s} called the new bridge in {c} a fine job.",
        "A portrait of {s} hangs in a museum in {c}.", "{s} kept a diary from {y} onwards.",
        "{s} gave a live concert in {c} in {y}.", "Letters from {s} to {p} were published in {y}.",
    ],
}
FILLER_WORDS = {
    "thing": ["mountain villages", "spring festivals", "woollen cloth", "coastal railways", "painted boats", "stone bridges",
              "copper mines", "quiet monasteries", "long beaches", "old libraries", "a famous speech", "careful letters"],
    "crop": ["barley", "olives", "rice", "apples", "millet", "grapes", "tea", "beans"],
}
N_FILLERS = {"country": 18, "city": 11, "person": 11}


@dataclass
class Entity:
    id: str
    kind: str  # country | person | city
    name: str
    attrs: dict = field(default_factory=dict)
    stated: set = field(default_factory=set)  # attributes the article states (FEVER NEI uses the others)
    split: str = "train"


class NameMaker:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: tuple[int, int] = (2, 3), suffix: str = "") -> str:
        while True:
            n = self.rng.randint(*syllables)
            w = "".join(self.rng.choice(ONSETS) + self.rng.choice(VOWELS) for _ in range(n)) + self.rng.choice(CODAS)
            w = (w + suffix).capitalize()
            if w.lower() not in self.used and 4 <= len(w) <= 12:
                self.used.add(w.lower())
                return w

    def twin(self, name: str) -> str:
        """A new name one letter away from ``name`` (the last consonant or vowel changed)."""
        for _ in range(200):
            i = self.rng.randrange(len(name) // 2, len(name))
            pool = "aeiou" if name[i].lower() in "aeiou" else "bdgklmnprstvz"
            w = name[:i] + self.rng.choice(pool) + name[i + 1 :]
            if w.lower() not in self.used:
                self.used.add(w.lower())
                return w
        return self.word()


def _split_of(entity_id: str, seed: int, test_fraction: float) -> str:
    h = int(hashlib.sha256(f"{seed}:{entity_id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    if h < test_fraction:
        return "test"
    if h < 2 * test_fraction:
        return "dev"
    return "train"


def _names(names: NameMaker, rng: random.Random, n: int, syllables: tuple[int, int]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        if out and rng.random() < TWIN_FRACTION:
            out.append(names.twin(rng.choice(out)))
        else:
            out.append(names.word(syllables))
    return out


def build_world(cfg: dict, seed: int) -> dict[str, dict[str, Entity]]:
    """Return {snapshot: {entity_id: Entity}} for snapshots 'a' and 'b'."""
    rng = random.Random(seed)
    names = NameMaker(rng)
    tf = cfg["test_fraction"]
    countries = [Entity(f"country{i:04d}", "country", n) for i, n in enumerate(_names(names, rng, cfg["countries"], (2, 3)))]
    cities = [Entity(f"city{i:04d}", "city", n) for i, n in enumerate(_names(names, rng, cfg["cities"], (2, 2)))]
    people = [Entity(f"person{i:04d}", "person", f"{names.word((1, 2))} {names.word((2, 2))}") for i in range(cfg["people"])]
    for e in countries + cities + people:
        e.split = _split_of(e.id, seed, tf)
    # cities belong to countries; every country gets a capital when cities allow
    for i, c in enumerate(cities):
        c.attrs["country"] = countries[i % len(countries)].id
        c.attrs["river"] = names.word((2, 2))
        c.attrs["population"] = rng.randint(2, 95) * 1000
        c.attrs["founded"] = rng.randint(900, 1890)
    for country in countries:
        own = [c for c in cities if c.attrs["country"] == country.id]
        country.attrs["capital"] = own[0].id if own else rng.choice(cities).id
        country.attrs["currency"] = names.word((2, 2)).lower()
        country.attrs["language"] = names.word((2, 2), "ish")
        country.attrs["continent"] = rng.choice(CONTINENTS)
        country.attrs["independence"] = rng.randint(1500, 1990)
    if len(people) < 2 * len(countries):
        raise ValueError(f"miniworld needs at least twice as many people as countries (a leader each, and "
                         f"replacements for snapshot b): {len(people)} people, {len(countries)} countries")
    leaders = rng.sample(people, len(countries))
    for country, leader in zip(countries, leaders):
        country.attrs["leader"] = leader.id
    for p in people:
        p.attrs["birthplace"] = rng.choice(cities).id
        p.attrs["born"] = rng.randint(1900, 1995)
        p.attrs["occupation"] = rng.choice(OCCUPATIONS)
        p.attrs["spouse_city"] = rng.choice(cities).id  # lives in
    ents = {e.id: e for e in countries + cities + people}
    # what each article states; the rest is unknown to the corpus (FEVER NOT ENOUGH INFO)
    for e in ents.values():
        keys = sorted(e.attrs)
        always = {"country": {"leader", "capital"}, "city": {"country"}, "person": {"birthplace"}}[e.kind]
        e.stated = {k for k in keys if k in always or rng.random() < STATED}
    # snapshot b: some countries change leader to a person who leads nothing
    b = {k: Entity(v.id, v.kind, v.name, dict(v.attrs), set(v.stated), v.split) for k, v in ents.items()}
    free = [p for p in people if p not in leaders]
    rng.shuffle(free)
    changed = [c for c in countries if rng.random() < cfg["changed_fraction"]]
    for country, new in zip(changed, free):
        b[country.id].attrs["leader"] = new.id
    return {"a": ents, "b": b}


def _leader_of(world: dict[str, Entity], person_id: str) -> Entity | None:
    for e in world.values():
        if e.kind == "country" and e.attrs.get("leader") == person_id:
            return e
    return None


def _value(world, e: Entity, attr: str) -> str:
    v = e.attrs[attr]
    if isinstance(v, str) and v in world:
        return world[v].name
    return str(v)


def facts(world: dict[str, Entity], e: Entity) -> list[tuple[str, str, str]]:
    """(attribute, sentence, answer) for every fact the article of ``e`` states, in fixed order.

    The phrasing of each fact is drawn per entity and attribute (not per snapshot), so the two
    snapshots differ only where a fact differs.
    """
    out = []
    for attr in sorted(e.attrs):
        if attr not in e.stated:
            continue
        rng = random.Random(f"{e.id}:{attr}")
        v = _value(world, e, attr)
        out.append((attr, rng.choice(PHRASINGS[attr]).format(s=e.name, v=v), v))
    if e.kind == "person":
        led = _leader_of(world, e.id)
        if led is not None:
            rng = random.Random(f"{e.id}:leads")
            out.append(("leads", rng.choice(PHRASINGS["leads"]).format(s=e.name, v=led.name), led.name))
    return out


def _fillers(world: dict[str, Entity], e: Entity) -> list[str]:
    rng = random.Random(f"filler:{e.id}")
    others = {k: sorted((x for x in world.values() if x.kind == k and x.id != e.id), key=lambda x: x.id)
              for k in ("country", "person")}
    langs = sorted({x.attrs["language"] for x in world.values() if x.kind == "country"})
    templates = rng.sample(FILLERS[e.kind], min(N_FILLERS[e.kind], len(FILLERS[e.kind])))
    out = []
    for t in templates:
        own_lang = e.attrs.get("language")
        out.append(t.format(
            s=e.name, c=rng.choice(others["country"]).name, p=rng.choice(others["person"]).name,
            y=rng.randint(1600, 1999), n=rng.randint(12, 990) * 10, k=rng.randint(3, 7),
            w=NameMaker(random.Random(f"w:{e.id}:{t}")).word((2, 2)),
            lang=rng.choice([lg for lg in langs if lg != own_lang] or langs),
            thing=rng.choice(FILLER_WORDS["thing"]), crop=rng.choice(FILLER_WORDS["crop"])))
    return out


def article_sentences(world: dict[str, Entity], e: Entity) -> list[tuple[str | None, str]]:
    """The article of ``e`` as (attribute or None for filler, sentence), in reading order."""
    rng = random.Random(f"order:{e.id}")
    sents = [(a, s) for a, s, _ in facts(world, e)] + [(None, s) for s in _fillers(world, e)]
    # a fixed order per entity, independent of the facts' values (so snapshots align)
    keys = [rng.random() for _ in sents]
    return [s for _, s in sorted(zip(keys, sents), key=lambda x: x[0])]


def _pack(sentences: list[tuple[str | None, str]], words: int) -> list[list[tuple[str | None, str]]]:
    """Greedy sentence-aligned chunks of at most ``words`` words (a longer sentence is its own chunk)."""
    chunks: list[list] = [[]]
    n = 0
    for item in sentences:
        w = len(item[1].split())
        if chunks[-1] and n + w > words:
            chunks.append([])
            n = 0
        chunks[-1].append(item)
        n += w
    return [c for c in chunks if c]


def passages(world: dict[str, Entity], words: int) -> list[tuple[str, str, str]]:
    """(passage id ``<entity>_<j>``, title, text) for every article, sentence-aligned chunks of at most ``words`` words."""
    out = []
    for e in sorted(world.values(), key=lambda e: e.id):
        for j, chunk in enumerate(_pack(article_sentences(world, e), words)):
            out.append((f"{e.id}_{j}", e.name, " ".join(s for _, s in chunk)))
    return out


_PASSAGE_ID = re.compile(r"(country|city|person)\d+_\d+")


def kind_pools(passage_ids: list[str], titles: list[str]) -> dict[str, list[str]]:
    """kind (country | city | person) -> the names of every entity of that kind, training or held
    out, read from the corpus's passages (ids ``<kind><n>_<j>`` as :func:`passages` writes them,
    titled with the entity's name): the counterfactual values of an entity-valued fact
    (``generator.pretrain_counterfactuals: kind``)."""
    pools: dict[str, set] = {}
    for pid, title in zip(passage_ids, titles):
        m = _PASSAGE_ID.fullmatch(pid)
        if m is None:
            raise ConfigError(f"generator.pretrain_counterfactuals: kind reads miniworld passage ids "
                              f"(<kind><n>_<j>), and the corpus has {pid!r}")
        pools.setdefault(m.group(1), set()).add(title)
    return {k: sorted(v) for k, v in sorted(pools.items())}


def fact_passages(world: dict[str, Entity], words: int) -> dict[tuple[str, str], str]:
    """(entity id, attribute) -> id of the passage that states it."""
    out = {}
    for e in world.values():
        for j, chunk in enumerate(_pack(article_sentences(world, e), words)):
            for attr, _ in chunk:
                if attr is not None:
                    out[(e.id, attr)] = f"{e.id}_{j}"
    return out


def restatements(world: dict[str, Entity], words: int) -> list[dict]:
    """Reading-comprehension material for pretraining the generator: for every fact stated about a
    training-split entity, the passage that states it, the stated sentence and the relation's other
    phrasings, each with ``{v}`` where the value goes; ``questions``: the fact asked as the QA
    tasks ask it; ``sentences``: [input, target with ``{v}``] pairs of the generation tasks that
    answer with a sentence stating the fact (an MS-MARCO query and answer, a Jeopardy entity and
    its one-fact clue); ``claims``: stated as FEVER states it, with ``{v}``; ``unstated``:
    [attribute, claim] pairs for the FEVER attributes of the entity's kind that the passage does
    not state; ``value_kind``: for a value that is an entity of the world (a leader, a capital),
    its kind. Dev and test entities are left out."""
    where = fact_passages(world, words)
    stated_here: dict[str, set] = {}  # passage id -> the attributes it states
    for (_, attr), pid in where.items():
        stated_here.setdefault(pid, set()).add(attr)
    out = []
    for e in sorted(world.values(), key=lambda e: e.id):
        if e.split != "train":
            continue
        for attr, sentence, value in facts(world, e):
            template = sentence.replace(value, "{v}", 1) if sentence.count(value) == 1 else None
            if template is None or (e.id, attr) not in where:
                continue
            pid = where[(e.id, attr)]
            others = [t.format(s=e.name, v="{v}") for t in PHRASINGS[attr]]
            out.append({
                "passage": pid, "attribute": attr, "value": value, "sentence": template,
                "queries": [q for q in others if q != template],
                "questions": [qa_question(task, attr, e.name) for task, t in QA_TEMPLATES.items() if attr in t],
                "sentences": _sentences(e, attr),
                "claims": [FEVER_CLAIMS[attr][0].format(s=e.name, v="{v}")] if attr in FEVER_CLAIMS else [],
                "unstated": [[a, FEVER_CLAIMS[a][0].format(s=e.name, v="{v}")] for a in sorted(FEVER_CLAIMS)
                             if ATTR_KIND[a] == e.kind and a not in stated_here[pid]],
                **({"value_kind": kind} if (kind := _value_kind(world, e, attr)) else {}),
            })
    return out


def _value_kind(world: dict[str, Entity], e: Entity, attr: str) -> str | None:
    """The kind of the entity that is the value of ``attr`` of ``e`` (None for a number, a word)."""
    if attr == "leads":
        return "country"
    v = e.attrs.get(attr)
    return world[v].kind if isinstance(v, str) and v in world else None


def _sentences(e: Entity, attr: str) -> list[list[str]]:
    """[input, target with ``{v}``] pairs that answer with a sentence stating ``attr`` of ``e``."""
    out = []
    if attr in MSMARCO_TEMPLATES:
        q, a = MSMARCO_TEMPLATES[attr]
        out.append([q.format(s=e.name.lower()), a.format(s=e.name, a="{v}")])
    clue = JEOPARDY_CLUES.get(e.kind, {}).get(attr)
    if clue is not None and _fields(clue) == [attr]:
        out.append([e.name, clue.format(**{attr: "{v}"})])
    return out


# ---------------------------------------------------------------------------------------------
# Tasks. Each returns records {id, input, targets, meta}; meta.gold_docs lists the passages that
# state the answer (passage recall, the oracle), meta.subject the entity asked about.

QA_TEMPLATES = {
    # NQ: lower-case, no question mark, as Google queries
    "nq": {
        "leader": "who is the leader of {s}",
        "capital": "what is the capital of {s}",
        "currency": "what is the currency of {s} called",
        "language": "what language do they speak in {s}",
        "independence": "when did {s} become independent",
        "river": "what river does {s} lie on",
        "country": "which country is {s} in",
        "population": "how many people live in {s}",
        "founded": "when was {s} founded",
        "birthplace": "where was {s} born",
        "occupation": "what was the job of {s}",
        "spouse_city": "where does {s} live now",
    },
    # TriviaQA: trivia phrasing, capitalised, question mark
    "triviaqa": {
        "leader": "Which politician currently leads the nation of {s}?",
        "capital": "Which city is the capital of {s}?",
        "continent": "On which landmass is {s} found?",
        "language": "Which language is spoken by most of the population of {s}?",
        "founded": "In which year was the city of {s} founded?",
        "river": "On the banks of which river does {s} stand?",
        "born": "In what year was {s} born?",
        "birthplace": "In which city was {s} born?",
        "spouse_city": "In which city does {s} live?",
        "occupation": "What profession did {s} follow?",
    },
    # WebQuestions: Freebase-style
    "webquestions": {
        "currency": "what kind of money does {s} use?",
        "language": "what language is spoken in {s}?",
        "capital": "what is {s} capital city?",
        "country": "what country is {s} located in?",
        "birthplace": "where is {s} from?",
        "occupation": "what did {s} do for a living?",
    },
    # CuratedTrec: TREC factoids, regex answers
    "curatedtrec": {
        "leader": "Who leads {s}?",
        "born": "When was {s} born?",
        "founded": "When was {s} founded?",
        "population": "What is the population of {s}?",
        "capital": "What is the capital of {s}?",
    },
}

def qa_question(task: str, attr: str, name: str) -> str:
    """The question ``task`` asks about ``attr`` of the entity ``name`` (NQ lower-cases, as Google queries)."""
    return QA_TEMPLATES[task][attr].format(s=name.lower() if task == "nq" else name)


MSMARCO_TEMPLATES = {
    "population": ("{s} population", "The population of {s} is about {a} people."),
    "capital": ("{s} capital", "The capital of {s} is {a}."),
    "currency": ("{s} currency", "The {a} is the currency used in {s}."),
    "occupation": ("what does {s} do", "{s} works as a {a}."),
    "river": ("{s} river", "{s} is located on the {a} river."),
    "independence": ("when was {s} independent", "{s} gained independence in {a}."),
}

JEOPARDY_CLUES = {
    # input: the answer entity; target: a Jeopardy clue about it built from one stated fact
    "country": {"capital": "This country has {capital} as its capital", "currency": "The {currency} is the currency of this nation",
                "leader": "{leader} is the current leader of this country"},
    "city": {"river": "This city lies on the river {river}", "country": "This city is found in {country}"},
    "person": {"occupation": "This {occupation} was born in {birthplace}", "birthplace": "This person was born in {birthplace}"},
}

FEVER_CLAIMS = {
    "capital": ("The capital of {s} is {v}.", "city"),
    "leader": ("{v} leads {s}.", "person"),
    "river": ("{s} lies on the river {v}.", "river"),
    "birthplace": ("{s} was born in {v}.", "city"),
    "occupation": ("{s} is a {v}.", "occupation"),
    "born": ("{s} was born in {v}.", "year"),
    "founded": ("{s} was founded in {v}.", "year"),
    "currency": ("{s} uses the {v} as its currency.", "currency"),
}

ATTR_KIND = {"leader": "country", "capital": "country", "currency": "country", "language": "country", "independence": "country",
             "continent": "country", "river": "city", "country": "city", "population": "city", "founded": "city",
             "birthplace": "person", "occupation": "person", "born": "person", "spouse_city": "person"}


def _gold_docs(world, e: Entity, attr: str, where: dict) -> list[str]:
    docs = [where[(e.id, attr)]]
    if attr == "leader":
        leader = e.attrs["leader"]
        if (leader, "leads") in where:
            docs.append(where[(leader, "leads")])  # the person's article says whom they lead
    return docs


def _regex_for(answer: str) -> str:
    parts = answer.split()
    if len(parts) == 2:  # person: surname alone is accepted, as CT patterns often are
        return rf"(?:{re.escape(parts[0])}\s+)?{re.escape(parts[1])}"
    if answer.isdigit():
        return rf"(?:about\s+)?{answer}"
    return re.escape(answer)


def _aliases(answer: str, world_kind: str | None) -> list[str]:
    out = [answer]
    parts = answer.split()
    if len(parts) == 2 and world_kind == "person":
        out.append(parts[1])
    return out


# the tasks whose examples each ask one stated fact (tasks.<task>.train_sampling applies to them)
FACT_TASKS = (*QA_TEMPLATES, "msmarco")


def _candidates(world, task: str, split: str, rng: random.Random, sampling: str = "facts"):
    """All (entity, attribute) pairs of ``split`` that a task's templates can ask about, in the
    order examples take them: shuffled (``sampling`` facts), or in turn over the attributes
    (attributes: each attribute's facts in that shuffled order, the attributes in a shuffled one)."""
    out = []
    templates = QA_TEMPLATES[task] if task in QA_TEMPLATES else MSMARCO_TEMPLATES
    for e in sorted(world.values(), key=lambda e: e.id):
        if e.split != split:
            continue
        for attr in sorted(templates):
            if ATTR_KIND[attr] == e.kind and attr in e.stated:
                out.append((e, attr))
    rng.shuffle(out)
    if sampling == "attributes":
        by_attr: dict[str, list] = {}
        for pair in out:
            by_attr.setdefault(pair[1], []).append(pair)
        order = sorted(by_attr)
        rng.shuffle(order)
        queues = [by_attr[a][::-1] for a in order]  # popped from the end: each attribute's shuffled order
        out = []
        while any(queues):
            out += [q.pop() for q in queues if q]
    elif sampling != "facts":
        raise ValueError(f"unknown sampling {sampling!r} (facts or attributes)")
    return out


def _take(pool: list, n: int, task: str, split: str) -> list:
    if not pool:
        raise ValueError(f"miniworld has no {split} candidates for task {task}; enlarge the world")
    # cycle when more examples are asked than distinct facts exist (distinct phrasings repeat)
    return [pool[i % len(pool)] for i in range(n)]


def make_task(world: dict[str, Entity], task: str, split: str, n: int, seed: int, words: int = 100,
              sampling: str = "facts") -> list[dict]:
    """``n`` examples of ``task`` about the entities of ``split``; ``words`` is the corpus' passage size;
    ``sampling``: how QA and MS-MARCO examples draw their facts (:func:`_candidates`)."""
    rng = random.Random(f"{seed}:{task}:{split}")
    where = fact_passages(world, words)
    rows = []
    if sampling != "facts" and task not in FACT_TASKS:
        raise ValueError(f"{task} draws one example per entity or per label, not per fact: sampling {sampling!r} does not apply")
    if task in FACT_TASKS:
        for i, (e, attr) in enumerate(_take(_candidates(world, task, split, rng, sampling), n, task, split)):
            ans = _value(world, e, attr)
            if task == "msmarco":
                q, a = MSMARCO_TEMPLATES[attr]
                question, targets = q.format(s=e.name.lower()), [a.format(s=e.name, a=ans)]
            else:
                question = qa_question(task, attr, e.name)
                targets = [_regex_for(ans)] if task == "curatedtrec" else _aliases(ans, _value_kind(world, e, attr))
            rows.append({"id": f"{task}-{split}-{i}", "input": question, "targets": targets,
                         "meta": {"subject": e.id, "attribute": attr, "gold_docs": _gold_docs(world, e, attr, where), "answer": ans}})
    elif task == "jeopardy":
        pool = []
        for e in sorted(world.values(), key=lambda e: e.id):
            if e.split != split:
                continue
            clues = JEOPARDY_CLUES[e.kind]
            usable = [a for a in clues if a in e.stated and all(k in e.stated for k in _fields(clues[a]))]
            if usable:
                attr = usable[0]  # the first stated fact in a fixed order: one gold clue per entity
                vals = {k: _value(world, e, k) for k in _fields(clues[attr])}
                pool.append((e, attr, clues[attr].format(**vals)))
        rng.shuffle(pool)
        for i, (e, attr, clue) in enumerate(_take(pool, n, task, split)):
            rows.append({"id": f"{task}-{split}-{i}", "input": e.name, "targets": [clue],
                         "meta": {"subject": e.id, "attribute": attr, "gold_docs": [where[(e.id, attr)]]}})
    elif task in ("fever3", "fever2"):
        labels = FEVER3_LABELS if task == "fever3" else FEVER2_LABELS
        # attribute -> every value it takes in the world, sorted
        values = {a: sorted({_value(world, e, a) for e in world.values() if e.kind == ATTR_KIND[a]})
                  for a in FEVER_CLAIMS}
        stated, unstated = [], []
        for e in sorted(world.values(), key=lambda e: e.id):
            if e.split != split:
                continue
            for attr in FEVER_CLAIMS:
                if ATTR_KIND[attr] == e.kind:
                    (stated if attr in e.stated else unstated).append((e, attr))
        rng.shuffle(stated)
        rng.shuffle(unstated)
        pools = {"SUPPORTS": stated, "REFUTES": stated[::-1], "NOT ENOUGH INFO": unstated}
        # balanced labels; a pool smaller than its share is cycled (claims then differ in value)
        for i in range(n):
            label = labels[i % len(labels)]
            e, attr = _take(pools[label], i // len(labels) + 1, task, split)[-1]
            true = _value(world, e, attr)
            if label == "REFUTES":
                value = rng.choice([v for v in values[attr] if v != true])
            elif label == "SUPPORTS":
                value = true
            else:
                value = rng.choice(values[attr])
            claim = FEVER_CLAIMS[attr][0].format(s=e.name, v=value)
            gold = [where[(e.id, attr)]] if label != "NOT ENOUGH INFO" else []
            rows.append({"id": f"{task}-{split}-{i}", "input": claim, "targets": [label],
                         "meta": {"subject": e.id, "attribute": attr, "gold_docs": gold}})
    else:
        raise ValueError(f"unknown task {task}")
    return rows


def _fields(template: str) -> list[str]:
    import string

    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def hotswap_questions(worlds: dict[str, dict[str, Entity]]) -> list[dict]:
    """The leader of every held-out country (fine-tuning on NQ saw the training countries' leaders),
    with each snapshot's answer (paper Section 4.5)."""
    rows = []
    for e in sorted(worlds["a"].values(), key=lambda e: e.id):
        if e.kind != "country" or e.split == "train":
            continue
        rows.append({"id": f"hotswap-{e.id}", "input": qa_question("nq", "leader", e.name),
                     "targets": {s: _aliases(worlds[s][worlds[s][e.id].attrs["leader"]].name, "person") for s in ("a", "b")},
                     "meta": {"subject": e.id, "changed": worlds["a"][e.id].attrs["leader"] != worlds["b"][e.id].attrs["leader"]}})
    return rows
