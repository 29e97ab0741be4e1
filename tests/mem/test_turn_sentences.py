"""A person's turn is also matched by its sentences (harness_mem/passages.py, issue #35).

A user states a fact in passing inside a request about something else; the whole turn's vector
measures the request. The turn's sentences are stored as passages (flagged ``sentence``, matched at
SENTENCE_MARGIN), on both engines; an assistant's replies get none, and a file written before keeps
recalling as it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from engine_rows import is_postgres, sql, sqlite_file
from fake_embedder import HashedEmbedder, StartReader

from harness_mem import MemoryStore
from harness_mem.passages import (
    PASSAGE_MARGIN,
    SENTENCE_MARGIN,
    SENTENCE_WORDS,
    TURN_SENTENCES,
    Passage,
    best_of,
    embed_entries,
    scored,
    sentence_spans,
)

# Asked about the dog, the request about courses hides the one sentence that answers it.
MENTION = ("Can you recommend some online courses on data analysis? I want something with practical projects"
           " and a certificate at the end. By the way, my sister just adopted a rescue greyhound called Biscuit."
           " I have about five hours a week to study, mostly in the evenings.")
TOPICAL = ["What is the best way to train a puppy to walk on a leash? I need tips for walking dogs.",
           "Is it expensive to insure a dog? I want to budget for pet costs this year.",
           "I went to a concert last night and the band played for three hours.",
           "My car needs new tyres before the winter, where should I buy them?"]
QUESTION = "what kind of dog did my sister adopt?"
# Longer than StartReader reads: windows, and sentences beside them.
LONG = ("The pipeline builds the image, runs the suite and deploys to staging before production. " * 3
        + "Maria adopted a greyhound called Biscuit. " + "The suite runs again after the deploy. " * 3).strip()


def table(store: MemoryStore) -> str:
    return "entry_passages" if is_postgres(store) else "entries_passages"


def sentence_rows(store: MemoryStore) -> list[tuple[str, int, int, bool]]:
    """Every passage as (entry id, start, stop, is a sentence), the same on either engine."""
    return [(entry_id, int(start), int(stop), bool(sentence)) for entry_id, start, stop, sentence in sql(
        store, f"SELECT e.id, p.start, p.stop, p.sentence FROM {table(store)} p JOIN entries e ON e.pk = p.pk"
        " ORDER BY e.id, p.start")]


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_users_passing_mention_is_found_by_meaning_above_topical_turns(
        engine_target: str, embedder: Any, mode: str) -> None:
    with MemoryStore(engine_target, embedder=embedder) as store:
        store.add(MENTION, id="mention", role="user", session="a")
        store.add_many([{"content": text, "id": f"topical{n}", "role": "user", "session": "b"}
                        for n, text in enumerate(TOPICAL)])
        hits = store.recall(QUESTION, k=5, mode=mode)
        assert hits[0].entry.id == "mention"
        assert "greyhound" in hits[0].snippet and "courses" not in hits[0].snippet  # the sentence that matched


def test_the_same_mention_in_an_assistants_reply_is_read_whole(engine_target: str, embedder: Any) -> None:
    # The control: an agent's reply gets no sentence passages, so its whole vector is all it has.
    with MemoryStore(engine_target, embedder=embedder) as store:
        store.add(MENTION, id="mention", role="assistant", session="a")
        store.add_many([{"content": text, "id": f"topical{n}", "role": "user", "session": "b"}
                        for n, text in enumerate(TOPICAL)])
        assert store.recall(QUESTION, k=5, mode="semantic")[0].entry.id != "mention"


def test_only_a_persons_turn_of_several_sentences_gets_them(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:  # no windows: sentences alone
        store.add(MENTION, id="user", role="user")
        store.add(MENTION, id="named", role="Caroline")  # a conversation's speakers are people too
        store.add(MENTION, id="reply", role="assistant")
        store.add(MENTION, id="tool", role="tool")
        store.add(MENTION, id="note", kind="note")
        store.add("One sentence only, said by the user.", id="single", role="user")
        rows = sentence_rows(store)
    assert {entry_id for entry_id, *_ in rows} == {"user", "named"}  # no assistant, tool, note or one-sentence turn
    for speaker in ("user", "named"):
        assert [(a, b, sentence) for entry_id, a, b, sentence in rows if entry_id == speaker] == [
            (a, b, True) for a, b in sentence_spans(MENTION)]


def test_a_long_turn_keeps_its_windows_beside_its_sentences(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=StartReader()) as store:
        store.add(LONG, id="long", role="user")
        rows = sentence_rows(store)
    prefix = len("user: ")
    windows = [(a - prefix, b - prefix) for a, b in StartReader().passages(f"user: {LONG}")]
    assert [(a, b) for _, a, b, sentence in rows if not sentence] == windows
    sentences = [(a, b) for _, a, b, sentence in rows if sentence]
    assert sentences and set(sentences) <= set(sentence_spans(LONG))
    # one passage a start: a sentence that starts where a window does is left to the window
    assert not {a for a, _ in sentences} & {a for a, _ in windows}
    assert len({a for _, a, _, _ in rows}) == len(rows)


def test_a_turns_first_sentences_of_some_words_are_its_passages(engine_target: str) -> None:
    said = ["Hi there!", "Thanks a lot.", "My sister adopted a greyhound called Biscuit last May.",
            "We walk him along the river every single morning.", "He loves the cold weather of the north.",
            "The vet says he is the healthiest dog she has seen."]
    text = " ".join(said)
    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:
        store.add(text, id="turn", role="user")
        stored = [text[a:b] for _, a, b, _ in sentence_rows(store)]
    # "Hi there!" and "Thanks a lot." have too few words; the fifth sentence on is past the cap
    assert stored == [s for s in said[:TURN_SENTENCES] if len(s.split()) >= SENTENCE_WORDS] == said[2:4]


def test_both_engines_store_the_passages_embed_entries_gives(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=StartReader()) as store:
        store.add(MENTION, id="user", role="user")
        store.add(LONG, id="long", role="user")
        store.add(LONG, id="reply", role="assistant")
        rows = sentence_rows(store)
    embedded = embed_entries(StartReader(), [(LONG, "user", "turn"), (LONG, "assistant", "turn"), (MENTION, "user", "turn")])
    assert rows == [(entry_id, p.start, p.stop, p.sentence) for entry_id, e in zip(("long", "reply", "user"), embedded,
                                                                                     strict=True) for p in e.passages]


def test_best_of_holds_a_sentence_to_its_wider_margin() -> None:
    query = np.eye(4, dtype=np.float32)[0]
    near = np.array([0.9, np.sqrt(1 - 0.81), 0, 0], dtype=np.float32)
    between = 0.9 - (PASSAGE_MARGIN + SENTENCE_MARGIN) / 2  # a window beats it, a sentence does not
    best = best_of({1: between, 2: between, 3: 0.1},
                   scored(query, {1: [Passage(10, 20, near)], 2: [Passage(10, 20, near, sentence=True)],
                                  3: [Passage(0, 5, near, sentence=True)]}))
    assert best[1][0] == pytest.approx(0.9 - PASSAGE_MARGIN)
    assert best[2] == (between, None)
    assert best[3][0] == pytest.approx(0.9 - SENTENCE_MARGIN)


def as_written_before(target: str) -> None:
    """Put the passages' table back as files and schemas were before turns' sentences: no column."""
    if is_postgres(target):
        with psycopg.connect(target) as pg:
            pg.execute("ALTER TABLE entry_passages DROP COLUMN sentence")
            pg.execute("DELETE FROM _migrations WHERE name LIKE '%_passage_sentences'")
        return
    with sqlite_file(Path(target)) as conn:
        conn.execute("CREATE TABLE old_passages (pk INTEGER NOT NULL, start INTEGER NOT NULL, stop INTEGER NOT NULL,"
                     " embedding BLOB NOT NULL, PRIMARY KEY (pk, start)) WITHOUT ROWID")
        conn.execute("INSERT INTO old_passages SELECT pk, start, stop, embedding FROM entries_passages")
        conn.execute("DROP TABLE entries_passages")
        conn.execute("ALTER TABLE old_passages RENAME TO entries_passages")


def test_a_store_written_before_turn_sentences_recalls_as_it_did(engine_target: str) -> None:
    question = "greyhound Biscuit adopted by Maria"
    with MemoryStore(engine_target, embedder=StartReader()) as store:
        store.add(LONG, id="long", role="assistant")  # windows only: what a store held before
        store.add("Maria walked a dog called Rex.", id="rex", role="user")
        before = [(h.entry.id, h.score) for h in store.recall(question, k=3, mode="semantic")]
        windows = sentence_rows(store)
    as_written_before(engine_target)
    if not is_postgres(engine_target):  # a reader leaves the file as it is, and reads it as before
        with MemoryStore(engine_target, embedder=StartReader(), read_only=True) as reader:
            assert [(h.entry.id, h.score) for h in reader.recall(question, k=3, mode="semantic")] == before
    with MemoryStore(engine_target, embedder=StartReader()) as store:
        assert [(h.entry.id, h.score) for h in store.recall(question, k=3, mode="semantic")] == before
        store.add(MENTION, id="mention", role="user")  # the table gets its column (if not yet) with it
        assert [row for row in sentence_rows(store) if row[0] != "mention"] == windows
        assert {entry_id for entry_id, *_, sentence in sentence_rows(store) if sentence} == {"mention"}


def test_a_turns_sentences_come_back_through_reindex_and_copy(engine_target: str, tmp_path: Any) -> None:
    from harness_mem.copying import copy_store

    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:
        store.add(MENTION, id="mention", role="user")
        before = sentence_rows(store)
        assert before and all(sentence for *_, sentence in before)
        store.reindex(keyword_only=True)
    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:
        store.reindex()  # a keyword-only file gets vectors again: every turn embedded with its sentences
        assert sentence_rows(store) == before
    target = f"{tmp_path}/copy.db"
    copy_store(engine_target, target)
    with MemoryStore(target, embedder=HashedEmbedder()) as copied:
        assert sentence_rows(copied) == before
