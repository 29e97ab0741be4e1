"""Keyword ranking that does not score every match (bm25.py), checked against the engine's exact
BM25 (FTS5's bm25() on SQLite, the PostgreSQL engine's own over its positions).

The store here is small, so the index is given small budgets: the same code paths run as on a
million entries (candidates from the rarest words, pairs, counted term frequencies, filters
answered inside their entries), and every answer can be compared with exact=True. Every test runs
on both engines but the two about FTS5 itself (its tokenizer's stored terms, its sampled counts).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_rows import is_postgres, stored_values
from engine_targets import ENGINES, fresh_schema

from harness_mem.bm25 import KeywordIndex, index_form
from harness_mem.engines import sqlite_keywords
from harness_mem.models import Hit
from harness_mem.store import MemoryStore

# A few hundred words whose frequencies fall off like a language's, with inflections the stemmer folds.
STEMS = ["paint", "walk", "cook", "garden", "travel", "read", "swim", "climb", "photograph", "bake",
         "hike", "sing", "plant", "build", "write", "teach", "learn", "visit", "camp", "draw"]
WORDS = [s + suffix for s in STEMS for suffix in ("", "s", "ed", "ing")] + [
    f"{a}{b}" for a in ("ka", "lo", "mi", "ru", "te", "zo", "ve", "pa") for b in ("rn", "st", "lt", "mp", "nd")
] + ["family", "friends", "support", "group", "summer", "beach", "pottery", "museum", "concert", "school"]
# and a long tail, as every language has: most words of a turn are rare
WORDS += [f"{a}{v}{b}" for a in "bdfgklmnprstvz" for v in ("a", "o", "u", "ei") for b in ("x", "q", "th", "sk", "ng", "rv")]



def bm25(hit: Hit) -> float:
    """A keyword hit's BM25 (its score is the calibrated one: harness_mem/scores.py)."""
    assert hit.components is not None
    return float(hit.components["keyword"]["score"] or 0.0)

def _text(rng: random.Random) -> str:
    """A turn of 4-16 words drawn by a power law, no word (nor two forms of one stem) twice, as in
    most chat turns; the turn before it, which the index holds too, can still repeat one."""
    n = rng.randint(4, 16)
    chosen: dict[str, str] = {}
    while len(chosen) < n:
        rank = int(rng.paretovariate(0.9)) - 1 if rng.random() < 0.7 else rng.randrange(len(WORDS))
        word = WORDS[min(rank, len(WORDS) - 1)]
        chosen.setdefault(index_form(word), word)
    return " ".join(chosen.values())


def _fill(target: Path | str) -> None:
    rng = random.Random(5)
    items = []
    for i in range(3000):
        items.append({"content": _text(rng), "role": ("Ann", "Ben", "user")[i % 3], "session": f"s{i // 40}",
                      "created_at": f"2024-01-{1 + i // 200:02d}T{10 + i % 200 // 60}:{i % 200 % 60:02d}:00"})
    with MemoryStore(target, embedder=None) as store:
        store.add_many(items)


@pytest.fixture(scope="module", params=ENGINES)
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | str]:
    """The 3000 turns, once per engine for the module: a SQLite file, or a PostgreSQL schema."""
    target: Path | str = tmp_path_factory.mktemp("bm25") / "m.db"
    if request.param == "postgresql":
        target = fresh_schema(request.getfixturevalue("postgres_server"))
    _fill(target)
    yield target


def _small(store: MemoryStore) -> KeywordIndex:
    index = KeywordIndex(scored_rows=60, candidate_rows=150, narrow=400)
    store._recall.keywords = index
    return index


QUERIES = [
    "when did Ann paint with friends", "Ben walking the beach in summer", "pottery and museum visits",
    "who cooked for the family", "support group camping trip", "teaching school and learning to draw",
    "karn lost mimp", "singing at the concert with friends and family", "photographed the garden",
    "what did Ben bake", "hiking climbing swimming", "writes reads travels",
]


def test_the_ranking_finds_what_exact_bm25_finds_and_scores_it_the_same(corpus: Path | str) -> None:
    """Every hit carries its exact BM25 score, and the top 10 are exact BM25's top 10 but for an
    entry at the margin whose words repeat more than the candidates' (its rank by the words it
    holds is far down)."""
    found = 0
    with MemoryStore(corpus, embedder=None) as store:
        _small(store)
        for query in QUERIES:
            every = {h.entry.id: bm25(h) for h in store.recall(query, k=3000, mode="keyword", exact=True, explain=True)}
            exact = [h.entry.id for h in store.recall(query, k=10, mode="keyword", exact=True)]
            fast = store.recall(query, k=10, mode="keyword", explain=True)
            assert len(fast) == len(exact)
            for hit in fast:
                assert bm25(hit) == pytest.approx(every[hit.entry.id], rel=1e-9, abs=1e-5), query
            found += len({h.entry.id for h in fast} & set(exact))
    assert found >= 0.96 * 10 * len(QUERIES)  # 116 of the 120 here: the rest sit at the margin


def test_the_fast_path_really_runs_and_counts_repeated_words(corpus: Path | str, tmp_path: Path,
                                                             request: pytest.FixtureRequest) -> None:
    """Without its budgets the small store would be ranked by FTS5 alone, and the tests above would
    prove nothing: the plan must leave common words out of what FTS5 scores. A repeated word counts
    as often as it occurs, as in bm25()."""
    copy: Path | str = tmp_path / "copy.db"
    if is_postgres(corpus):  # the same turns in a schema of their own
        copy = fresh_schema(request.getfixturevalue("postgres_server"))
        _fill(copy)
    else:
        assert isinstance(copy, Path) and isinstance(corpus, Path)
        copy.write_bytes(corpus.read_bytes())
    with MemoryStore(copy, embedder=None) as store:
        index = _small(store)
        repeated = store.add("museum museum museum paint walking").id
        once = store.add("museum paint walking").id
        rows, _ = store.storage.keywords.stats()
        assert rows == 3002
        df = {w: index.document_frequency(store.storage.keywords, f'"{w}"', rows) for w in ("museum", "paint", "walking")}
        assert sum(df.values()) > index.scored_rows
        hits = {h.entry.id: bm25(h) for h in store.recall("museum paint walking", k=50, mode="keyword", explain=True)}
        exact = {h.entry.id: bm25(h) for h in store.recall("museum paint walking", k=50, mode="keyword", exact=True,
                                                           explain=True)}
    assert hits[repeated] > hits[once]
    assert hits[repeated] == pytest.approx(exact[repeated], rel=1e-9)


@pytest.mark.parametrize("filters", [
    {"session": "s7"}, {"session_prefix": "s1"}, {"role": "Ann"}, {"since": "2024-01-05", "until": "2024-01-09"},
])
def test_a_filtered_ranking_matches_exact_bm25_inside_the_filter(corpus: Path | str, filters: dict[str, str]) -> None:
    found = total = 0
    with MemoryStore(corpus, embedder=None) as store:
        _small(store)
        for query in QUERIES:
            every = {h.entry.id: bm25(h) for h in store.recall(query, k=3000, mode="keyword", exact=True, explain=True,
                                                               **filters)}
            exact = [h.entry.id for h in store.recall(query, k=10, mode="keyword", exact=True, **filters)]
            fast = store.recall(query, k=10, mode="keyword", explain=True, **filters)
            assert len(fast) == len(exact)
            for hit in fast:
                assert bm25(hit) == pytest.approx(every[hit.entry.id], rel=1e-9, abs=1e-5), query
            found += len({h.entry.id for h in fast} & set(exact))
            total += len(exact)
    assert found >= 0.97 * total


def test_only_live_entries_of_the_callers_namespace_come_back(engine_target: str) -> None:
    path = engine_target
    rng = random.Random(9)
    with MemoryStore(path, embedder=None, namespace="other") as other:
        other.add_many([{"content": "paint walking friends " + _text(rng)} for _ in range(300)])
    with MemoryStore(path, embedder=None) as store:
        _small(store)
        store.add_many([{"content": _text(rng)} for _ in range(300)])
        gone = store.add("paint walking friends family").id
        store.forget(gone)
        old = store.add("paint walking friends beach").id
        new = store.supersede(old, "painting while walking with friends at the beach")
        hits = store.recall("paint walking friends", k=30, mode="keyword")
        ids = {h.entry.id for h in hits}
        namespaces = {h.entry.namespace for h in hits}
    assert namespaces == {"default"}
    assert gone not in ids and old not in ids and new.id in ids


def test_the_stemmed_forms_are_the_ones_the_index_stores(tmp_path: Path) -> None:
    """Term frequencies are counted on tokens read the way the index's tokenizer stores them."""
    words = ["painting", "paints", "happiness", "happily", "relational", "agreed", "running", "caresses",
             "ponies", "josé", "Ünïcode", "us", "go", "ab", "x1y2", "generalizations", "oscillators"]
    with MemoryStore(tmp_path / "s.db", embedder=None) as store:
        store.add(" ".join(words))
        store.db.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, entries_fts, row)")
        stored = {t for (t,) in store.db.execute("SELECT term FROM temp.v")}
    assert {index_form(w) for w in words} <= stored


def test_every_word_of_the_docs_is_stemmed_by_the_compiled_porter_as_fts5_stores_it(tmp_path: Path) -> None:
    # PyStemmer (a dependency) is the stemmer snowballstemmer hands out: an import stems each new
    # word in this process (9 times as fast as the pure-Python one). Its forms are FTS5's.
    import snowballstemmer  # type: ignore[import-untyped]

    assert type(snowballstemmer.stemmer("porter")).__module__ == "Stemmer"
    root = Path(__file__).resolve().parents[2]
    text = "".join(path.read_text(encoding="utf-8") for path in [root / "README.md", *(root / "docs").glob("*.md")])
    words = sorted(set(re.findall(r"[A-Za-z]+", text)))
    assert len(words) > 1000
    with MemoryStore(tmp_path / "s.db", embedder=None) as store:
        store.add(" ".join(words))
        store.db.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, entries_fts, row)")
        stored = {t for (t,) in store.db.execute("SELECT term FROM temp.v")}
    assert [word for word in words if index_form(word) not in stored] == []


def test_a_common_terms_count_is_sampled_close_to_the_truth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_keywords, "COUNTED", 200)
    rng = random.Random(3)
    with MemoryStore(tmp_path / "d.db", embedder=None) as store:
        store.add_many([{"content": ("tea " if rng.random() < 0.3 else "") + _text(rng)} for _ in range(4000)])
        index = KeywordIndex()
        rows, _ = store.storage.keywords.stats()
        truth = store.db.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH '\"tea\"'").fetchone()[0]
        rare = store.db.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH '\"karn\"'").fetchone()[0]
        assert truth > 200 > rare
        assert index.document_frequency(store.storage.keywords, '"tea"', rows) == pytest.approx(truth, rel=0.15)
        assert index.document_frequency(store.storage.keywords, '"karn"', rows) == rare


def test_a_read_only_store_ranks_at_scale_without_writing(corpus: Path | str) -> None:
    def written() -> bytes:  # the file byte for byte, or every value of the schema
        return stored_values(corpus) if isinstance(corpus, str) else corpus.read_bytes()

    before = written()
    with MemoryStore(corpus, embedder=None, read_only=True) as store:
        _small(store)
        fast = [h.entry.id for h in store.recall(QUERIES[0], k=10, mode="keyword")]
        exact = [h.entry.id for h in store.recall(QUERIES[0], k=10, mode="keyword", exact=True)]
    assert fast == exact and fast
    assert written() == before


def test_hostile_queries_rank_without_error(corpus: Path | str) -> None:
    with MemoryStore(corpus, embedder=None) as store:
        _small(store)
        for query in ['paint" OR walking', "NEAR(paint walking)", "paint*", "-walking", "的 手冲咖啡 paint",
                      "paint " * 500, ""]:
            hits = store.recall(query, k=5, mode="keyword")
            assert len(hits) <= 5


def test_the_cli_ranks_exactly_when_asked(engine_target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`recall --exact` reaches the ranking (and plain recall does not ask for it)."""
    from click.testing import CliRunner

    from harness_mem.cli import cli

    asked: list[bool] = []
    ranking = KeywordIndex.ranking

    def watched(self: KeywordIndex, *args: object, exact: bool = False, **kwargs: object) -> object:
        asked.append(exact)
        return ranking(self, *args, exact=exact, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(KeywordIndex, "ranking", watched)
    db = engine_target
    with MemoryStore(db, embedder=None) as store:
        store.add_many([{"content": f"note {i} about the weather"} for i in range(20)])
    args = ["--db", str(db), "recall", "weather", "--mode", "keyword", "-k", "3", "--json"]
    fast = CliRunner().invoke(cli, args, catch_exceptions=False)
    exact = CliRunner().invoke(cli, [*args, "--exact"], catch_exceptions=False)
    assert fast.exit_code == exact.exit_code == 0
    assert asked == [False, True]
    assert len(exact.stdout.splitlines()) == 3
