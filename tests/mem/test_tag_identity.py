"""Tags holding PII are identity values, stored as keyed pseudonyms like sessions (issue #24, item 3).

Tags are looked up by value (``--tag``, ``forget --tag``, ``any_tags``), but they were scrubbed like
content, into bare labels: ``ann@example.com`` and ``bob@example.com`` were both stored as
``<EMAIL>``, so ``forget --tag ann@example.com`` forgot nothing and ``--tag '<EMAIL>'`` matched
both. Each runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from engine_rows import stored_text
from pii import assert_absent

from harness_mem.cli import cli
from harness_mem.experience import Episode, ExperienceStore
from harness_mem.jsonl import import_jsonl
from harness_mem.rows import identity_tags
from harness_mem.store import MemoryStore

ANN, BOB = "ann@example.com", "bob@example.com"


@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    engine_store.add("ann's note", id="ann-1", tags=[ANN, "billing"])
    engine_store.add("bob's note", id="bob-1", tags=[BOB, "billing"])
    engine_store.add("ann again", id="ann-2", tags=[f"  {ANN} "])  # stripped, as every tag is
    engine_store.add("nobody's", id="none", tags=["billing"])
    return engine_store


def _ids(entries: object) -> list[str]:
    return sorted(e.id for e in entries)  # type: ignore[attr-defined]


def test_listing_by_a_tag_holding_an_email_finds_exactly_its_entries(store: MemoryStore) -> None:
    assert _ids(store.list(tags=[ANN])) == ["ann-1", "ann-2"]
    assert _ids(store.list(tags=BOB)) == ["bob-1"]
    assert _ids(store.list(tags=[ANN, "billing"])) == ["ann-1"]
    assert _ids(store.list(any_tags=[BOB, "nothing"])) == ["bob-1"]
    assert store.count(tags=[ANN]) == 2


def test_a_bare_label_matches_no_entry(store: MemoryStore) -> None:
    assert _ids(store.list(tags=["<EMAIL>"])) == []
    assert _ids(store.list(any_tags=["<EMAIL>"])) == []


def test_two_addresses_are_two_tags_and_a_stored_tag_finds_itself(store: MemoryStore) -> None:
    assert store.get("ann-1").tags == (ANN, "billing")  # given back as written
    with store.stored_forms():
        ann, bob = store.get("ann-1").tags[0], store.get("bob-1").tags[0]
        assert ann.startswith("<EMAIL:") and bob.startswith("<EMAIL:") and ann != bob
        assert store.get("ann-2").tags == (ann,)
    assert _ids(store.list(tags=[ann])) == ["ann-1", "ann-2"]  # a tag as listed, passed back in


def test_recall_filters_by_a_tag_holding_an_email(store: MemoryStore) -> None:
    assert sorted(h.entry.id for h in store.recall("ann", tags=[ANN])) == ["ann-1", "ann-2"]
    assert [h.entry.id for h in store.recall("note", any_tags=[BOB])] == ["bob-1"]


def test_forgetting_by_a_tag_holding_an_email_forgets_exactly_its_entries(store: MemoryStore) -> None:
    assert store.forget(tags=[ANN]) == 2
    assert _ids(store.list()) == ["bob-1", "none"]
    assert store.forget(tags=["<EMAIL>"]) == 0


def test_the_cli_forgets_and_lists_by_a_tag_holding_an_email(store: MemoryStore, engine_target: str) -> None:
    target = engine_target  # where ``store`` is open
    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", target, "--embedder", "none", "list", "--json", "--tag", BOB],
                           catch_exceptions=False)
    assert listed.exit_code == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["bob-1"]
    forgot = runner.invoke(cli, ["--db", target, "--embedder", "none", "forget", "--tag", ANN], catch_exceptions=False)
    assert forgot.exit_code == 0, forgot.stderr
    assert forgot.stderr.startswith("Forgot 2 entries")
    assert _ids(store.list()) == ["bob-1", "none"]


def test_imported_tags_follow_the_same_rule(engine_store: MemoryStore) -> None:
    lines = [json.dumps({"id": "i1", "text": "a", "tags": [ANN]}), json.dumps({"id": "i2", "text": "b", "tags": [BOB]})]
    assert import_jsonl(engine_store, lines).errors == []
    assert _ids(engine_store.list(tags=[ANN])) == ["i1"]
    assert engine_store.get("i1").redactions == {"EMAIL": 1}


def test_no_raw_tag_value_is_stored(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add("a note", tags=[ANN, f"customer {BOB}"])
        assert _ids(store.list(tags=[f"customer {BOB}"])) == _ids(store.list())
    assert_absent([ANN, BOB], stored_text(engine_target))


def test_tags_and_sessions_share_one_lookup_rule(store: MemoryStore) -> None:
    # The same pseudonym for the same value, whichever identity field holds it.
    entry = store.add("x", session=ANN, tags=[ANN])
    assert entry.tags == (entry.session,) == (ANN,)
    assert identity_tags([ANN, ANN, " "], store.redactor) == (store.scope.key(ANN),)
    assert store.scope.tags(ANN) == (store.scope.key(ANN),)


def test_without_redaction_tags_are_stored_and_found_as_given(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None, redactor=None) as raw:
        raw.add("x", id="r", tags=[ANN])
        assert raw.get("r").tags == (ANN,)
        assert _ids(raw.list(tags=[ANN])) == ["r"]
        assert raw.forget(tags=[ANN]) == 1


def test_an_episode_keeps_its_tags_as_its_entry_does(engine_store: MemoryStore) -> None:
    experience = ExperienceStore(engine_store)
    stored = experience.save(Episode(situation="mail the report", outcome="sent", tags=[f"customer {ANN}"]))
    own = experience.get(stored.id).episode.tags
    assert own == [engine_store.scope.key(f"customer {ANN}")] and own[0] != "customer <EMAIL>"
    with engine_store.stored_forms():
        assert set(own) <= set(engine_store.get(stored.entry_id).tags)  # the row and the entry agree
    assert [e.id for e in engine_store.list(tags=[f"customer {ANN}"])] == [stored.entry_id]
