"""Filters on stored metadata values, answered in SQL on both engines: ``$eq $ne $gt $gte $lt $lte $in``,
nested keys, JSON's types kept apart, and a one-line error for a filter that is not one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness_mem import MemoryStore
from harness_mem.errors import InvalidInputError

ROWS: dict[str, dict[str, Any]] = {
    "a": {"lang": "en", "score": 3, "user": {"tier": "gold"}, "flag": True, "note": None, "code": "3"},
    "b": {"lang": "fr", "score": 7.5, "user": {"tier": "silver"}, "flag": False, "code": 3},
    "c": {"lang": "en", "score": 10, "user": {"tier": "bronze", "since": "2024-05-01"}},
    "d": {"lang": "de", "score": "high", "flag": 1},
    "e": {},
}


@pytest.fixture
def store(engine_target: str) -> Iterator[MemoryStore]:
    with MemoryStore(engine_target, embedder=None) as opened:
        opened.add_many([{"content": f"harbour note {name}", "id": name, "metadata": metadata}
                         for name, metadata in ROWS.items()])
        yield opened


def listed(store: MemoryStore, metadata: Any) -> set[str]:
    ids = {entry.id for entry in store.list(metadata=metadata)}
    assert store.count(metadata=metadata) == len(ids)
    assert {hit.entry.id for hit in store.recall("harbour note", k=10, mode="keyword", metadata=metadata)} == ids
    return ids


@pytest.mark.parametrize(("metadata", "expected"), [
    ({"lang": "en"}, {"a", "c"}),
    ({"lang": {"$eq": "en"}}, {"a", "c"}),
    ({"lang": {"$ne": "en"}}, {"b", "d", "e"}),  # a missing key is "not equal"
    ({"lang": {"$in": ["fr", "de"]}}, {"b", "d"}),
    ({"user.tier": "gold"}, {"a"}),
    ({"user": {"tier": "gold"}}, {"a"}),  # the same, written nested
    ({"user.since": {"$gte": "2024-01-01"}}, {"c"}),  # strings by code point
    ({"score": {"$gt": 3}}, {"b", "c"}),  # "high" is a string: no number compares with it
    ({"score": {"$gte": 3, "$lt": 10}}, {"a", "b"}),
    ({"score": {"$lte": 7.5}}, {"a", "b"}),
    ({"score": {"$gt": "a"}}, {"d"}),
    ({"flag": True}, {"a"}),  # true is not 1
    ({"flag": 1}, {"d"}),
    ({"flag": False}, {"b"}),
    ({"code": 3}, {"b"}),  # "3" is not 3
    ({"code": "3"}, {"a"}),
    ({"note": None}, {"a"}),  # null, not a missing key
    ({"score": 3.0}, {"a"}),  # one number type
    ({"lang": "en", "user.tier": {"$in": ["bronze", "silver"]}}, {"c"}),  # every condition
    ({"nothing.here": {"$ne": 1}}, {"a", "b", "c", "d", "e"}),
])
def test_metadata_filters(store: MemoryStore, metadata: dict[str, Any], expected: set[str]) -> None:
    assert listed(store, metadata) == expected


@pytest.mark.parametrize("metadata", [
    {"$gt": 1}, {"score": {"$gt": True}}, {"score": {"$gte": None}}, {"score": {"$near": 1}},
    {"score": [1, 2]}, {"a..b": 1}, {"score": {"$in": []}}, {"score": {"$in": "abc"}}, "lang=en",
    {"score": float("nan")}, {"score": 2**70}, {"k" * 3: {"$in": list(range(101))}},
])
def test_a_filter_that_is_not_one_is_refused_in_one_line(store: MemoryStore, metadata: Any) -> None:
    with pytest.raises(InvalidInputError) as raised:
        list(store.list(metadata=metadata))
    assert "\n" not in str(raised.value) and "metadata filter" in str(raised.value)
    with pytest.raises(InvalidInputError):
        store.recall("harbour", metadata=metadata)


def test_a_value_the_redactor_changes_is_found_by_its_raw_form(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add("ticket from a customer", id="t1", metadata={"owner": "ann@example.com", "team": "ops"})
        store.add("ticket from another", id="t2", metadata={"owner": "bob@example.org", "team": "ops"})
        assert store.get("t1").metadata["owner"] == "ann@example.com"  # read back as written
        with store.stored_forms():
            stored = store.get("t1").metadata["owner"]
        assert stored.startswith("<EMAIL:") and "ann" not in stored  # what is at rest: its pseudonym
        def ids(spec: dict[str, Any]) -> set[str]:
            return {entry.id for entry in store.list(metadata=spec)}

        assert ids({"owner": "ann@example.com"}) == ids({"owner": stored}) == {"t1"}  # one address, not every one
        assert ids({"owner": {"$in": ["bob@example.org", "eve@example.net"]}}) == {"t2"}
        assert ids({"team": "ops", "owner": {"$ne": "ann@example.com"}}) == {"t2"}
        assert {hit.entry.id for hit in store.recall("ticket", mode="keyword", metadata={"owner": "ann@example.com"})} \
            == {"t1"}


def test_the_command_line_takes_a_where_filter(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from harness_mem.cli import cli

    db = str(tmp_path / "memory.db")
    with MemoryStore(db, embedder=None) as opened:
        opened.add_many([{"content": f"incident {name}", "id": name, "metadata": metadata} for name, metadata in ROWS.items()])

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--db", db, "--embedder", "none", *args], catch_exceptions=False)

    listed = run("list", "--json", "--where", '{"score": {"$gte": 3, "$lt": 10}}')
    assert listed.exit_code == 0 and {line.split('"id":"')[1][0] for line in listed.stdout.splitlines()} == {"a", "b"}
    recalled = run("recall", "incident", "--json", "--where", '{"user.tier": "gold"}')
    assert recalled.exit_code == 0 and [line.split('"id":"')[1][0] for line in recalled.stdout.splitlines()] == ["a"]
    for bad, said in (("x", "takes a JSON object"), ('["a"]', "takes a JSON object"),
                      ('{"score": {"$gt": true}}', "$gt compares numbers or strings")):
        result = run("list", "--where", bad)
        assert result.exit_code in (1, 2) and said in result.stderr and "Traceback" not in result.output
