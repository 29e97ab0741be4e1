"""Passages: a long entry's later windows are embedded and matched best-of (harness_mem/passages.py).

The plumbing runs on both engines with :class:`StartReader`, a hashed embedder that, like MiniLM,
reads only the start of a text; the spans are checked on the real model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
from engine_rows import is_postgres, sql
from fake_embedder import READ, HashedEmbedder, StartReader
from tokenizers import Tokenizer

from harness_mem import MemoryStore
from harness_mem.copying import copy_store
from harness_mem.passages import (
    MAX_SENTENCES,
    PASSAGE_MARGIN,
    Passage,
    Scored,
    best_of,
    best_scored,
    embed_entries,
    read_back,
    scored,
    sentence_spans,
)
from harness_mem.providers.embeddings import MAX_PASSAGES, PASSAGE_OVERLAP, PASSAGE_TOKENS, MiniLMEmbedder


class StartOnly(HashedEmbedder):
    """The same reader without passages: what recall saw before them."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return super().embed([text[:READ] for text in texts])


FILLER = ("The pipeline builds the image, runs the suite and deploys to staging before production. " * 6).strip()
NEEDLE = "Maria adopted a greyhound called Biscuit."
LONG = f"{FILLER} {NEEDLE} {FILLER}"
SHORT = ["We moved to Porto in May.", "The kettle broke on Monday.", "Rui plays the violin on Sundays.",
         "Ana prefers tea to coffee."]
QUESTION = "greyhound Biscuit adopted by Maria"


def fill(store: MemoryStore) -> None:
    store.add(LONG, id="long", role="assistant")
    for n, text in enumerate(SHORT):
        store.add(text, id=f"s{n}", role="user")


def passage_rows(store: MemoryStore) -> list[tuple[int, int, int]]:
    table = "entry_passages" if is_postgres(store) else "entries_passages"
    present = (sql(store, "SELECT to_regclass('entry_passages') IS NOT NULL")[0][0] if is_postgres(store)
               else sql(store, "SELECT count(*) FROM sqlite_master WHERE name = 'entries_passages'")[0][0])
    return [tuple(r) for r in sql(store, f"SELECT pk, start, stop FROM {table} ORDER BY pk, start")] if present else []


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_fact_past_what_the_model_reads_is_found_in_its_passage(engine_target: str, mode: str) -> None:
    with MemoryStore(engine_target, embedder=StartReader()) as store:
        fill(store)
        hits = store.recall(QUESTION, k=3, mode=mode)
        assert hits[0].entry.id == "long"
        assert NEEDLE in hits[0].snippet  # the window that matched, not the entry's start
        assert hits[0].snippet.startswith("…") and hits[0].snippet.endswith("…")


def test_a_long_entry_ranked_past_k_by_its_start_is_lifted_by_its_passage(
    engine_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vector search hands recall more of the entries it compared than the k it returns
    (``Storage.nearest``'s ``extra``): a long entry whose first window ranks below k is still
    matched by its later windows."""
    from harness_mem import passages

    with MemoryStore(engine_target, embedder=StartReader()) as store:
        fill(store)
        store.add_many([{"text": f"Maria walked a dog called Rex, walk {n}.", "role": "user"} for n in range(12)])
        hits = store.recall(QUESTION, k=3, mode="semantic")
        assert hits[0].entry.id == "long"
        assert NEEDLE in hits[0].snippet
        monkeypatch.setattr(passages, "PASSAGE_CANDIDATES", 0)  # only the top 3 by first window
        assert "long" not in [hit.entry.id for hit in store.recall(QUESTION, k=3, mode="semantic")]


def test_without_passages_the_same_fact_is_invisible_to_meaning(tmp_path: object) -> None:
    # The control for the test above: the same store, read only from its start.
    with MemoryStore(f"{tmp_path}/m.db", embedder=StartOnly()) as store:
        fill(store)
        assert "long" not in [h.entry.id for h in store.recall(QUESTION, k=3, mode="semantic")][:1]


def test_passages_are_stored_in_content_characters_and_go_with_their_entry(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=StartReader()) as store:
        fill(store)
        rows = passage_rows(store)
        pk = sql(store, "SELECT pk FROM entries WHERE id = 'long'")[0][0]
        assert {r[0] for r in rows} == {pk}  # short entries have none
        prefix = len("assistant: ")
        spans = StartReader().passages(f"assistant: {LONG}")
        assert [(r[1], r[2]) for r in rows] == [(a - prefix, b - prefix) for a, b in spans]
        assert any(NEEDLE in LONG[start:stop] for _, start, stop in rows)
        store.forget("long")
        assert passage_rows(store) == []
        store.add(LONG, id="again", role="assistant")
        assert store.delete("again")
        assert passage_rows(store) == []


def test_reindex_and_copy_carry_passages(engine_target: str, tmp_path: object) -> None:
    with MemoryStore(engine_target, embedder=StartReader()) as store:
        fill(store)
        before = [r[1:] for r in passage_rows(store)]
        store.reindex()
        assert [r[1:] for r in passage_rows(store)] == before
    target = f"{tmp_path}/copy.db"
    copy_store(engine_target, target)
    with MemoryStore(target, embedder=StartReader()) as copied:
        assert [r[1:] for r in passage_rows(copied)] == before
        assert copied.recall(QUESTION, k=1, mode="semantic")[0].entry.id == "long"


def test_a_store_written_before_passages_gets_them_from_its_next_long_entry(tmp_path: object) -> None:
    path = f"{tmp_path}/old.db"
    with MemoryStore(path, embedder=StartReader()) as store:
        store.add("short", id="a")
        store.db.execute("DROP TABLE IF EXISTS entries_passages")
    with MemoryStore(path, embedder=StartReader(), read_only=True) as reader:
        assert reader.recall("short", k=1, mode="semantic")[0].entry.id == "a"  # no table: no passages, no error
    with MemoryStore(path, embedder=StartReader()) as store:
        fill(store)
        assert store.recall(QUESTION, k=1, mode="semantic")[0].entry.id == "long"


def test_best_of_needs_a_later_window_to_beat_the_first_by_the_margin() -> None:
    query = np.eye(4, dtype=np.float32)[0]
    near = np.array([0.9, np.sqrt(1 - 0.81), 0, 0], dtype=np.float32)
    passages = {1: [Passage(10, 20, near)], 2: [Passage(5, 9, near)]}
    best = best_of({1: 0.5, 2: 0.9 - PASSAGE_MARGIN / 2, 3: 0.3}, scored(query, passages))
    assert best[1] == (pytest.approx(0.9 - PASSAGE_MARGIN), Scored(10, 20, False, pytest.approx(0.9)))
    assert best[2] == (pytest.approx(0.9 - PASSAGE_MARGIN / 2), None)  # the first window still wins
    assert best[3] == (0.3, None)


def test_best_scored_picks_what_best_of_picks_from_every_scored_passage() -> None:
    # The SQLite engine weighs stored passages so, without building each (stored_passage_cosines).
    rng = np.random.default_rng(7)
    query = rng.normal(size=8).astype(np.float32)
    query /= np.linalg.norm(query)
    vectors = rng.integers(-127, 128, size=(9, 8)).astype(np.int8)
    vectors[4] = vectors[3]  # equals: the first of them is kept
    rows = [(1, 0, 5, False), (1, 5, 9, True), (1, 9, 12, False), (2, 0, 4, True), (2, 4, 8, True),
            (3, 0, 3, False), (5, 0, 2, True), (5, 2, 4, False), (5, 4, 6, True)]
    passages: dict[int, list[Passage]] = {}
    for (pk, *_), passage in zip(rows, read_back([row[1:] for row in rows], vectors), strict=True):
        passages.setdefault(pk, []).append(passage)
    first = {pk: -1.0 for pk in (1, 2, 3, 4, 5)}  # any window beats it: best_of says which
    picked = best_scored(query, rows, vectors)
    assert best_of(first, picked) == best_of(first, scored(query, passages))
    assert picked[2][0].start == 0 and all(len(found) == 1 for found in picked.values())
    assert best_scored(query, [], np.empty((0, 8), dtype=np.int8)) == {}


def test_embed_entries_embeds_every_window_in_one_call() -> None:
    reader = StartReader()
    embedded = embed_entries(reader, [(LONG, "assistant", "turn"), ("short", None, "note"), (SUMMARY, None, "summary")])
    assert reader.calls == [3 + len(embedded[0].passages) + len(embedded[2].passages)]
    assert embedded[1].passages == ()
    assert all(LONG[p.start:p.stop] for p in embedded[0].passages)
    assert [SUMMARY[p.start:p.stop] for p in embedded[2].passages] == SUMMARY_SENTENCES  # a summary: its sentences


SUMMARY_SENTENCES = ["On 8 May 2023, Ana and Rui talked about the move, the kettle and a dog.", "They moved to Porto in May.",
                     "The kettle broke on Monday!", "Maria adopted a greyhound called Biscuit…", "Rui plays the violin"]
SUMMARY = "  ".join(SUMMARY_SENTENCES[:3]) + "\n" + " ".join(SUMMARY_SENTENCES[3:])


def test_sentence_spans_are_a_texts_sentences_trimmed_and_capped() -> None:
    assert [SUMMARY[a:b] for a, b in sentence_spans(SUMMARY)] == SUMMARY_SENTENCES
    assert sentence_spans("One sentence only.") == []  # its vector already is that sentence
    assert sentence_spans("") == []
    many = " ".join(f"Sentence {n}." for n in range(40))
    assert len(sentence_spans(many)) == MAX_SENTENCES


def test_a_summary_is_matched_by_the_sentence_that_holds_what_is_asked(engine_target: str) -> None:
    # The summary's vector averages five things; its sentence about the dog meets the question.
    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:
        store.add(SUMMARY, id="summary", kind="summary")
        store.add(SUMMARY, id="note", kind="note")  # the same words, read whole
        store.add("Maria's neighbour adopted a cat called Pixel.", id="cat")
        hits = store.recall("greyhound Biscuit adopted by Maria", k=3, mode="semantic")
        assert [h.entry.id for h in hits][0] == "summary"
        assert hits[0].snippet.startswith("…") and "greyhound" in hits[0].snippet
        [note] = [h for h in hits if h.entry.id == "note"]
        assert hits[0].score > note.score
        rows = passage_rows(store)
        pk = sql(store, "SELECT pk FROM entries WHERE id = 'summary'")[0][0]
        assert [(a, b) for p, a, b in rows if p == pk] == sentence_spans(SUMMARY)
        # reindex embeds it again the same way (the kind goes with the entry to the model)
        store.reindex(keyword_only=True)
    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:
        store.reindex()
        pk = sql(store, "SELECT pk FROM entries WHERE id = 'summary'")[0][0]
        assert [(a, b) for p, a, b in passage_rows(store) if p == pk] == sentence_spans(SUMMARY)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()  # only its tokenizer is used: no model is loaded


def test_minilm_windows_cover_a_long_text_with_overlap(minilm: MiniLMEmbedder) -> None:
    words = " ".join(f"word{n}" for n in range(600))
    spans = minilm.passages(words)
    assert spans and spans[-1][1] == len(words)
    tokenizer = Tokenizer.from_file(str(minilm.model_path / "tokenizer.json"))
    tokenizer.no_truncation()
    pieces = tokenizer.encode(words, add_special_tokens=False).offsets
    first_stop = pieces[PASSAGE_TOKENS - 1][1]
    assert spans[0][0] < first_stop  # overlaps the window the model reads itself
    for (a, b), (c, _) in zip(spans, spans[1:], strict=False):
        assert a < c < b
    assert all(len(tokenizer.encode(words[a:b], add_special_tokens=False).ids) <= PASSAGE_TOKENS + 2
               for a, b in spans)
    assert PASSAGE_OVERLAP < PASSAGE_TOKENS


def test_minilm_reads_a_short_text_whole_and_caps_a_huge_one(minilm: MiniLMEmbedder) -> None:
    assert minilm.passages("a short note") == []
    assert len(minilm.passages("lorem ipsum " * 50_000)) == MAX_PASSAGES
