"""The ``kv-search`` suite: multi-hop look-ups over a generated local corpus (DeepSearch in miniature).

Each task has its own corpus, generated from ``task.meta["corpus_seed"]`` (so the task record stays
small and the same task always sees the same documents). A document is an *entry* about one entity
(``amber-falcon``): its code (``QX-4821``) and its partner (another entity), in two sentences
buried at a random place in ``filler_words`` words of filler prose (300–600 by default, about
400–800 tokens). A question with ``h`` hops (the difficulty, 1–4) follows the partner link
``h - 1`` times: "What is the code of the partner of the partner of amber-falcon?" takes ``h``
searches and ``h`` opened documents, which overflows a small context budget unless the agent
manages its context. Distractor entities share words with the chain's (``amber-otter``), so a
search must be read. The verifier is exact match on the code. The entity asked about decides a
task's split, so a held-out question never reads like a training one.

Tools: ``search(query)`` lists the best-matching documents (id, title and the opening words of
each); ``open(doc_id)`` returns a whole document.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from forge_cli.errors import ForgeError
from forge_cli.specs import Tool
from forge_cli.tasks.answers import ExactMatch
from forge_cli.tasks.splits import Draft, draw
from forge_cli.tasks.types import Split, Task, TaskSuite

NAME = "kv-search"

ADJECTIVES = ("amber", "silver", "crimson", "golden", "quiet", "rapid", "hollow", "bright", "frozen", "gentle",
              "iron", "lunar", "misty", "noble", "olive", "proud", "rusty", "scarlet", "solar", "tidal",
              "velvet", "wild", "azure", "brisk", "coral", "dusky", "ember", "fern", "granite", "hazel")
ANIMALS = ("falcon", "otter", "badger", "heron", "lynx", "marten", "osprey", "panther", "raven", "salmon",
           "tiger", "viper", "walrus", "yak", "beetle", "condor", "dingo", "ferret", "gecko", "ibis",
           "jackal", "koala", "lemur", "moose", "newt", "ocelot", "puffin", "quail", "stork", "toucan")
FILLER = ("the", "a", "of", "and", "to", "in", "was", "for", "on", "with", "as", "by", "at", "from", "that",
          "record", "archive", "clerk", "ledger", "season", "harbour", "market", "river", "valley", "road",
          "council", "village", "winter", "summer", "report", "notes", "journey", "letter", "morning", "evening",
          "people", "trade", "grain", "stone", "bridge", "tower", "garden", "window", "lantern", "mill",
          "meeting", "visitor", "custom", "festival", "weather", "field", "orchard", "well", "gate", "wall",
          "kept", "noted", "described", "mentioned", "recorded", "copied", "carried", "opened", "closed",
          "old", "new", "long", "short", "early", "late", "small", "large", "common", "several", "many",
          "quietly", "often", "rarely", "later", "before", "after", "during", "between", "under", "over")
SEARCH_HITS = 5
SNIPPET_WORDS = 40

SEARCH = {"type": "object", "properties": {"query": {"type": "string", "description": "words to look for"}},
          "required": ["query"]}
OPEN = {"type": "object", "properties": {"doc_id": {"type": "string", "description": "e.g. doc-007"}},
        "required": ["doc_id"]}


@dataclass(frozen=True)
class Document:
    """One entry of a corpus."""

    id: str
    entity: str
    code: str
    partner: str
    text: str

    @property
    def title(self) -> str:
        return f"Entry: {self.entity}"


@dataclass(frozen=True)
class Corpus:
    """A task's documents and the chain its question follows (``chain[0]`` is the one asked about)."""

    documents: tuple[Document, ...]
    chain: tuple[str, ...]

    def by_entity(self, entity: str) -> Document:
        return next(d for d in self.documents if d.entity == entity)

    def open(self, doc_id: str) -> Document | None:
        return next((d for d in self.documents if d.id == doc_id.strip()), None)

    def search(self, query: str) -> list[Document]:
        """Documents ranked by how many of the query's words their title holds (exact title first)."""
        words = set(re.findall(r"[a-z0-9]+", query.casefold()))
        phrase = "-".join(re.findall(r"[a-z0-9]+", query.casefold()))
        scored = []
        for index, doc in enumerate(self.documents):
            title_words = set(doc.entity.split("-"))
            score = 10 * len(words & title_words) + (100 if phrase and phrase in doc.entity else 0)
            score += sum(1 for w in words if len(w) > 3 and w in doc.text.casefold())
            if score:
                scored.append((-score, index, doc))
        return [doc for _, _, doc in sorted(scored)[:SEARCH_HITS]]


def _filler(rng: random.Random, words: int) -> list[str]:
    sentences: list[str] = []
    count = 0
    while count < words:
        length = rng.randint(8, 16)
        sentence = [rng.choice(FILLER) for _ in range(length)]
        sentence[0] = sentence[0].capitalize()
        sentences.append(" ".join(sentence) + ".")
        count += length
    return sentences


@lru_cache(maxsize=128)
def build_corpus(corpus_seed: int, hops: int, documents: int, filler_min: int, filler_max: int) -> Corpus:
    """The corpus of one task, the same for the same arguments."""
    rng = random.Random(f"{NAME}/corpus/{corpus_seed}")
    names = [f"{a}-{b}" for a in ADJECTIVES for b in ANIMALS]
    entities = rng.sample(names, documents)
    chain = entities[:hops]
    # distractors that share a word with a chain member, where the name table allows it
    rest = entities[hops:]
    for i, member in enumerate(chain):
        adjective, animal = member.split("-")
        twins = [n for n in names if n not in entities and (n.startswith(adjective + "-") or n.endswith("-" + animal))]
        if twins and i < len(rest):
            rest[i] = rng.choice(twins)
            entities = chain + rest
    codes: set[str] = set()
    while len(codes) < documents:
        codes.add(f"{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}-{rng.randint(1000, 9999)}")
    code_list = sorted(codes)
    rng.shuffle(code_list)
    partners = {entities[i]: entities[i + 1] for i in range(hops - 1)}
    for entity in entities:
        if entity not in partners:
            partners[entity] = rng.choice([e for e in entities if e != entity])
    ids = rng.sample(range(1, 10 * documents), documents)
    docs = []
    for index, entity in enumerate(entities):
        filler = _filler(rng, rng.randint(filler_min, filler_max))
        facts = [f"The code of {entity} is {code_list[index]}.", f"The partner of {entity} is {partners[entity]}."]
        at = rng.randint(0, len(filler))
        body = filler[:at] + facts + filler[at:]
        docs.append(Document(id=f"doc-{ids[index]:03d}", entity=entity, code=code_list[index],
                             partner=partners[entity], text=f"Entry: {entity}\n\n" + " ".join(body)))
    rng.shuffle(docs)
    return Corpus(documents=tuple(docs), chain=tuple(chain))


def corpus_of(task: Task) -> Corpus:
    meta = task.meta
    try:
        return build_corpus(int(meta["corpus_seed"]), int(meta["hops"]), int(meta["documents"]),
                            int(meta["filler_min"]), int(meta["filler_max"]))
    except (KeyError, TypeError, ValueError):
        raise ForgeError(f"task '{task.id}' is not a kv-search task (its meta has no corpus)") from None


def question(entity: str, hops: int) -> str:
    return "What is the code of " + "the partner of " * (hops - 1) + f"{entity}?"


def tools(task: Task, workdir: Path) -> Sequence[Tool]:
    """``search(query)`` and ``open(doc_id)`` over the task's corpus."""
    corpus = corpus_of(task)

    def argument(arguments: Any, name: str) -> str:
        value = arguments.get(name) if isinstance(arguments, dict) else arguments
        if not isinstance(value, str) or not value.strip():
            raise ForgeError(f"needs {{\"{name}\": \"...\"}}, a non-empty string")
        return value

    def search(arguments: Any) -> str:
        hits = corpus.search(argument(arguments, "query"))
        if not hits:
            return "no documents match"
        return "\n\n".join(f"{d.id}: {d.title}\n" + " ".join(d.text.split()[2:2 + SNIPPET_WORDS]) + " ..."
                           for d in hits)

    def open_(arguments: Any) -> str:
        doc_id = argument(arguments, "doc_id")
        doc = corpus.open(doc_id)
        if doc is None:
            raise ForgeError(f"there is no document {doc_id!r} (search gives the ids)")
        return f"{doc.id}\n{doc.text}"

    return (Tool("search", "Search the archive; returns matching document ids with their titles.", SEARCH, search),
            Tool("open", "Open a document by its id; returns its whole text.", OPEN, open_))


def kv_search_suite(max_hops: int = 4, documents: int = 16, filler_words: tuple[int, int] = (300, 600)) -> TaskSuite:
    """The ``kv-search`` suite: hops 1..``max_hops``, ``documents`` per corpus, filler words per document."""
    low, high = filler_words
    if not 1 <= max_hops <= 8 or documents < 2 * max_hops or not 0 <= low <= high:
        raise ForgeError(f"kv-search: need 1 <= max_hops <= 8, documents >= 2*max_hops and 0 <= filler min <= max "
                         f"(got {max_hops}, {documents}, {filler_words})")

    def generate(rng: random.Random) -> Draft:
        hops = rng.randint(1, max_hops)
        corpus_seed = rng.getrandbits(48)
        meta = {"corpus_seed": corpus_seed, "hops": hops, "documents": documents, "filler_min": low,
                "filler_max": high}
        corpus = build_corpus(corpus_seed, hops, documents, low, high)
        answer = corpus.by_entity(corpus.chain[-1]).code
        prompt = (f"{question(corpus.chain[0], hops)} Use the search and open tools to look the entries up in the "
                  "archive, then reply with the code alone.")
        return Draft(key=f"{corpus_seed}/{hops}/{documents}/{low}/{high}", prompt=prompt, answer=answer,
                     difficulty=str(hops), meta=meta, split_key=corpus.chain[0])

    def make(split: Split, n: int, seed: int) -> list[Task]:
        return draw(NAME, split, n, seed, generate)

    return TaskSuite(name=NAME, description=f"Multi-hop look-ups (1-{max_hops} hops = difficulty) in a generated "
                     "archive through search/open tools with long documents; exact match.", make=make,
                     verifier=ExactMatch(), tools=tools)
