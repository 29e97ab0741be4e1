"""Filters that leave things out — sessions, kinds, tags — on both engines, by keyword and by vector."""

from __future__ import annotations

import json

import pytest

from harness_mem.errors import InvalidInputError
from harness_mem.store import MemoryStore


def fill(store: MemoryStore) -> None:
    store.add_many([
        {"id": "mine-1", "content": "the deploy window is Tuesday", "role": "user", "session": "mine"},
        {"id": "mine-2", "content": "deploy after the tests pass", "role": "assistant", "session": "mine"},
        {"id": "old-1", "content": "we deploy on Tuesdays to staging", "role": "user", "session": "old"},
        {"id": "note", "content": "deploys are frozen in December", "kind": "note", "tags": ["ops"]},
        {"id": "secret-note", "content": "deploy keys rotate monthly", "kind": "note",
         "tags": ["ops", "ann@example.com"]},
        {"id": "fact", "content": "the deploy target is staging-eu", "kind": "fact"},
    ])


@pytest.mark.parametrize("mode", ["keyword", "hybrid", "semantic"])
def test_recall_leaves_out_sessions_kinds_and_tags(engine_hashed_store: MemoryStore, mode: str) -> None:
    store = engine_hashed_store
    fill(store)

    def ids(**filters: object) -> set[str]:
        return {h.entry.id for h in store.recall("deploy", 20, mode=mode, **filters)}  # type: ignore[arg-type]

    everything = ids()
    assert everything == {"mine-1", "mine-2", "old-1", "note", "secret-note", "fact"}
    assert ids(exclude_sessions=["mine"]) == everything - {"mine-1", "mine-2"}          # entries without one stay
    assert ids(exclude_sessions="mine") == ids(exclude_sessions=["mine"])               # one value, not its letters
    assert ids(exclude_kinds=["note", "fact"]) == {"mine-1", "mine-2", "old-1"}
    assert ids(exclude_tags=["ops"]) == everything - {"note", "secret-note"}
    assert ids(exclude_tags=["ann@example.com"]) == everything - {"secret-note"}        # an identity tag, keyed
    assert ids(exclude_sessions=["mine", "old"], exclude_kinds="note") == {"fact"}


def test_list_and_count_take_the_same_exclusions(engine_store: MemoryStore) -> None:
    store = engine_store
    fill(store)
    assert store.count(exclude_kinds=["turn"]) == 3
    assert [e.id for e in store.list(exclude_sessions=["mine", "old"], exclude_tags=["ops"])] == ["fact"]
    with pytest.raises(InvalidInputError, match="kind"):
        store.count(exclude_kinds=["no such kind!"])


def test_the_command_line_takes_the_exclusions(db_path: object) -> None:
    from click.testing import CliRunner

    from harness_mem.cli import cli

    with MemoryStore(db_path, embedder=None) as store:  # type: ignore[arg-type]
        fill(store)
    run = CliRunner().invoke
    listed = run(cli, ["--db", str(db_path), "list", "--exclude-kind", "turn", "--exclude-tag", "ops", "--json"])
    assert listed.exit_code == 0 and [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["fact"]
    recalled = run(cli, ["--db", str(db_path), "recall", "deploy", "--exclude-session", "mine", "--json"])
    found = {json.loads(line)["id"] for line in recalled.stdout.splitlines()}
    assert recalled.exit_code == 0 and "old-1" in found and not {"mine-1", "mine-2"} & found


def test_recall_and_list_page_with_an_offset(engine_hashed_store: MemoryStore) -> None:
    store = engine_hashed_store
    fill(store)
    for mode in ("keyword", "hybrid"):
        whole = [h.entry.id for h in store.recall("deploy", 6, mode=mode)]  # type: ignore[arg-type]
        pages = [h.entry.id for offset in (0, 2, 4) for h in store.recall("deploy", 2, mode=mode, offset=offset)]  # type: ignore[arg-type]
        assert pages == whole, mode
    assert store.recall("deploy", 5, offset=6) == []
    listed = [e.id for e in store.list()]
    assert [e.id for e in store.list(limit=2, offset=2)] == listed[2:4]
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidInputError, match="offset must be a whole number"):
            store.recall("deploy", offset=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="offset must be a whole number"):
            list(store.list(offset=bad))  # type: ignore[arg-type]
