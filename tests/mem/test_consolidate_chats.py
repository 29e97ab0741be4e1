"""Consolidation of conversations (any roles): topic segments and facts in the store, on both engines.

What a user sees: derived entries cite their turns, have their own recall lane, are not turns of the
session, are written once, and are forgotten (and purged, byte for byte) with the turns they came from.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from harness_mem.experience import consolidate
from harness_mem.store import MemoryStore

SECRET_WORD = "zanzibarquokka"  # no detector knows it: only forgetting can remove it


def chat(store: MemoryStore, session: str = "conv:1", *, day: str = "2023-05-08") -> list[str]:
    lines = [
        ("Caroline", "Hey Mel! How have you been?"),
        ("Melanie", "Good! I'm swamped with the kids and work. What's new with you?"),
        ("Caroline", f"I went to a LGBTQ support group at the {SECRET_WORD} centre yesterday and it was so powerful."),
        ("Melanie", "Wow, that sounds amazing. Did you meet anyone?"),
        ("Caroline", "I met a counselor there and I plan to study counseling next year."),
        ("Melanie", "That's great! I love painting with my kids, we painted a sunset last weekend."),
        ("Caroline", "I really enjoy hiking in the mountains with my friends."),
        ("Melanie", "Bye for now, take care!"),
    ]
    ids = [f"{session}:{i}" for i in range(1, len(lines) + 1)]
    store.add_many([
        {"id": id_, "content": text, "role": role, "session": session, "created_at": f"{day}T13:{i:02d}:00Z"}
        for i, (id_, (role, text)) in enumerate(zip(ids, lines, strict=True))
    ])
    return ids


def test_a_named_two_person_chat_becomes_segments_and_facts(engine_store: MemoryStore) -> None:
    store = engine_store
    turns = chat(store)
    report = consolidate(store)
    (result,) = report.sessions
    assert result.action == "derived" and result.episode is None          # a chat is not an agent run
    assert report.segments >= 1 and report.facts >= 3 and report.skipped == 0
    derived = list(store.list(kind=["summary", "fact"]))
    assert {e.source for e in derived} == {"consolidation"} and all("consolidated" in e.tags for e in derived)
    for entry in derived:
        cited = entry.metadata["source_turns"]
        assert cited and set(cited) <= set(turns) and entry.session == "conv:1"
    segment = next(e for e in derived if e.kind == "summary")
    assert segment.content.startswith("Caroline and Melanie on 8 May 2023: ")
    facts = [e.content for e in derived if e.kind == "fact"]
    assert "Caroline really enjoys hiking in the mountains with their friends." in facts
    assert f"Caroline went to a LGBTQ support group at the {SECRET_WORD} centre on 7 May 2023 and it was so powerful." in facts


def test_derived_entries_have_their_own_lane_and_are_not_turns_of_the_session(engine_store: MemoryStore) -> None:
    store = engine_store
    turns = chat(store)
    before = [e.id for e in store.session_turns("conv:1")]
    consolidate(store)
    assert [e.id for e in store.session_turns("conv:1")] == before == turns   # the transcript, unchanged
    (span,) = store.sessions()
    assert span.turns == len(turns)
    plain = store.recall("hiking in the mountains", 20)
    assert plain and all(h.entry.kind == "turn" for h in plain)              # a plain recall: what was said
    facts = store.recall("hiking in the mountains", 3, kind="fact")
    assert facts[0].entry.content.startswith("Caroline really enjoys hiking")
    only = store.recall("hiking", 20, derived=True)
    assert only and {h.entry.source for h in only} == {"consolidation"}
    assert store.recall("hiking", 20, derived=False) == store.recall("hiking", 20)


def _keyword_hits(store: MemoryStore, query: str) -> list[tuple[str, float, object]]:
    return [(h.entry.id, h.score, h.components["keyword"]["score"] if h.components else None)
            for h in store.recall(query, 10, mode="keyword", explain=True)]


def test_consolidating_leaves_a_plain_recall_exactly_as_it_was(engine_store: MemoryStore) -> None:
    # The derived entries' words are counted in a keyword lane of their own: were they in the same
    # statistics as the turns (rows, average length, each word's count), every turn's BM25 would move.
    store = engine_store
    chat(store)
    chat(store, "conv:2", day="2023-06-12")
    queries = ["support group counseling", "painting a sunset with the kids", "hiking mountains friends"]
    before = {q: _keyword_hits(store, q) for q in queries}
    assert all(before.values())
    consolidate(store)
    assert store.recall("support group counseling", 10, derived=True)        # the derived lane is there
    assert {q: _keyword_hits(store, q) for q in queries} == before
    store.reindex()  # the keyword index rebuilt: each entry back in its own lane
    assert {q: [hit[0] for hit in _keyword_hits(store, q)] for q in queries} == {
        q: [hit[0] for hit in hits] for q, hits in before.items()}
    derived = store.recall("hiking mountains friends", 5, mode="keyword", derived=True)
    assert derived and {h.entry.source for h in derived} == {"consolidation"}
    mixed = store.recall("hiking mountains friends", 10, mode="keyword", kind=["turn", "fact", "summary"])
    assert {h.entry.kind for h in mixed} >= {"turn", "fact"}                  # both lanes, one list


def test_a_file_consolidated_before_the_lanes_had_their_own_index_is_moved_on_open(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        chat(store)
        consolidate(store)
        expected = [h.entry.id for h in store.recall("hiking mountains friends", 10, mode="keyword")]
        # The file as an earlier version left it: every keyword row in entries_fts, no 0013.
        conn = store.db.conn
        derived = [pk for (pk,) in conn.execute("SELECT pk FROM entries WHERE source = 'consolidation'")]
        texts = store.storage.index_texts(derived)
        conn.execute("DROP TABLE derived_fts")
        conn.executemany("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", texts.items())
        conn.execute("DELETE FROM _migrations WHERE number = 13")
        conn.commit()
    with MemoryStore(db_path, embedder=None) as store:
        conn = store.db.conn
        assert conn.execute("SELECT count(*) FROM derived_fts").fetchone()[0] == len(derived) > 0
        assert conn.execute("SELECT count(*) FROM entries_fts").fetchone()[0] == 8  # the turns alone
        assert store.storage.setting("keywords.derived_to_move") is None
        assert [h.entry.id for h in store.recall("hiking mountains friends", 10, mode="keyword")] == expected
        assert store.recall("hiking mountains friends", 3, mode="keyword", kind="fact")[0].entry.kind == "fact"


def test_running_again_writes_nothing_and_new_turns_are_derived_once(engine_store: MemoryStore) -> None:
    store = engine_store
    chat(store)
    consolidate(store)
    exported = list(store.export())
    again = consolidate(store)
    assert again.sessions == [] and list(store.export()) == exported
    store.add("I adopted a puppy named Biscuit last Friday.", role="Caroline", session="conv:1",
              created_at="2023-05-08T14:00:00Z")
    (result,) = consolidate(store).sessions
    assert len(result.facts) == 1 and store.get(result.facts[0]).content == (
        "Caroline adopted a puppy named Biscuit on Friday, 5 May 2023."
    )
    assert store.get(result.facts[0]).metadata["source_turns"] == [next(iter(store.recall("Biscuit", 1))).entry.id]


def test_a_fact_said_again_in_another_session_is_stored_once(engine_store: MemoryStore) -> None:
    store = engine_store
    chat(store, "conv:1")
    first = consolidate(store)
    chat(store, "conv:2", day="2023-06-01")
    second = consolidate(store)
    assert second.facts_repeated >= 1              # "Caroline really enjoys hiking…" again
    assert store.count(kind="fact") == first.facts + second.facts


def test_a_dry_run_reports_and_writes_nothing(engine_store: MemoryStore) -> None:
    store = engine_store
    chat(store)
    exported = list(store.export())
    dry = consolidate(store, dry_run=True)
    assert dry.segments >= 1 and dry.facts >= 3
    assert list(store.export()) == exported
    real = consolidate(store)
    assert (real.segments, real.facts) == (dry.segments, dry.facts)


def test_forgetting_a_turn_forgets_what_was_derived_from_it(engine_store: MemoryStore) -> None:
    store = engine_store
    turns = chat(store)
    consolidate(store)
    citing = [e.id for e in store.list(kind=["summary", "fact"]) if turns[2] in e.metadata["source_turns"]]
    assert len(citing) >= 2                                   # its segment and its fact
    assert store.forget(turns[2]) == 1 + len(citing)
    assert not any(SECRET_WORD in e.content for e in store.list(kind=["summary", "fact"]))
    assert store.recall(SECRET_WORD, 10, kind=["summary", "fact", "turn"]) == []
    kept = [e for e in store.list(kind="fact") if turns[6] in e.metadata["source_turns"]]
    assert kept                                               # the other turns' facts stay


def test_a_purge_after_forgetting_leaves_no_derived_copy_in_the_file(sqlite_store: MemoryStore, db_path: Path) -> None:
    store = sqlite_store
    turns = chat(store)
    consolidate(store)
    assert sum(SECRET_WORD in e.content for e in store.list(kind=["summary", "fact"])) >= 1
    store.forget(turns[2])
    store.purge()
    store.close()
    for path in db_path.parent.glob(db_path.name + "*"):
        assert SECRET_WORD.encode() not in path.read_bytes(), path.name


def say(store: MemoryStore, session: str, when: str, *lines: tuple[str, str]) -> None:
    store.add_many([{"content": text, "role": role, "session": session, "created_at": when} for role, text in lines])


def test_a_fact_that_changes_supersedes_the_old_one_and_as_of_answers_with_what_was_true(
    engine_store: MemoryStore,
) -> None:
    store = engine_store
    say(store, "s:1", "2023-03-01T10:00:00Z", ("Ada", "I live in Lisbon with my two cats."),
        ("Ada", "I really love hiking in the mountains."))
    consolidate(store)
    say(store, "s:2", "2023-09-01T10:00:00Z", ("Ada", "I moved to Porto last month for a new job."),
        ("Ada", "I don't like hiking anymore since my knee injury."))
    report = consolidate(store)
    assert report.facts_updated == 2
    (home,) = [h.entry for h in store.recall("where does Ada live", 5, kind="fact") if "Porto" in h.entry.content
               or "Lisbon" in h.entry.content][:1]
    assert home.content == "Ada moved to Porto in August 2023 for a new job."
    old = store.history(home.id)
    assert [e.content for e in old] == ["Ada lives in Lisbon with their two cats.", home.content]
    assert old[0].superseded_by == home.id                       # kept, not overwritten
    then = [h.entry.content for h in store.recall("where does Ada live", 5, kind="fact", as_of="2023-06-01")]
    assert "Ada lives in Lisbon with their two cats." in then and home.content not in then
    now = [h.entry.content for h in store.recall("where does Ada live", 5, kind="fact")]
    assert home.content in now and "Ada lives in Lisbon with their two cats." not in now
    hiking_then = store.recall("hiking", 5, kind="fact", as_of="2023-04-01")
    assert [h.entry.content for h in hiking_then] == ["Ada really loves hiking in the mountains."]
    assert [h.entry.content for h in store.recall("hiking", 5, kind="fact")] == [
        "Ada doesn't like hiking anymore since their knee injury."
    ]
    assert store.recall("Lisbon", 5, kind="fact", as_of="2023-01-01") == []   # nothing was said yet


def test_a_fact_said_again_about_the_same_thing_is_a_repeat_not_an_update(engine_store: MemoryStore) -> None:
    store = engine_store
    say(store, "s:1", "2023-03-01T10:00:00Z", ("Ada", "I live in Lisbon near the river."))
    consolidate(store)
    say(store, "s:2", "2023-04-01T10:00:00Z", ("Ada", "I live in Lisbon, it's lovely in spring."))
    report = consolidate(store)
    assert (report.facts, report.facts_updated, report.facts_repeated) == (0, 0, 1)
    assert store.count(kind="fact") == 1


def test_semantic_recall_keeps_the_lanes_apart(engine_hashed_store: MemoryStore) -> None:
    store = engine_hashed_store
    turns = chat(store)
    for i in range(30):  # enough other entries that the index's first shortlist holds derived ones
        store.add(f"note {i} about hiking and painting and support groups", kind="note")
    consolidate(store)
    for mode in ("semantic", "hybrid", "keyword"):
        plain = store.recall("hiking in the mountains with friends", 10, mode=mode)
        assert len(plain) == 10 and all(h.entry.source != "consolidation" for h in plain), mode
        derived = store.recall("hiking in the mountains with friends", 5, mode=mode, derived=True)
        assert derived and all(h.entry.source == "consolidation" for h in derived), mode
        assert set(derived[0].entry.metadata["source_turns"]) <= set(turns)


def test_a_consolidation_killed_midway_resumes_without_duplicates(tmp_path: Path) -> None:
    db, twin = tmp_path / "memory.db", tmp_path / "twin.db"
    sessions = 200  # the kill comes after the first: the rest is the resumed run's
    with MemoryStore(db, embedder=None) as store:
        for i in range(sessions):
            chat(store, f"conv:{i}")
    shutil.copy(db, twin)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "harness_mem", "--db", str(db), "consolidate"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    for line in proc.stderr:  # the first progress line: it is under way
        if line.startswith("consolidated "):
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stderr.close()
    with MemoryStore(db, embedder=None) as store:
        done = len({e.session for e in store.list(kind="summary")})
    assert 0 < done < sessions, done  # killed halfway through
    resumed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    with MemoryStore(twin, embedder=None) as store:
        consolidate(store)
        clean = sorted((e.id, e.content, e.metadata["source_turns"]) for e in store.list(kind=["summary", "fact"]))
    with MemoryStore(db, embedder=None) as store:
        after = sorted((e.id, e.content, e.metadata["source_turns"]) for e in store.list(kind=["summary", "fact"]))
        facts = [e.content for e in store.list(kind="fact")]
        assert consolidate(store).sessions == []
    assert after == clean                          # as if it had never been killed
    assert len(facts) == len(set(facts)) == 5      # every session says the same five things: stored once
