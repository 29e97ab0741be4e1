"""Recall over every lane: what was said and what consolidation derived from it, ranked together,
each derived hit with the turns it came from (``derived="both"``, ``sources=True``), as an agent's
recall runs it (``harness_mem.tools``) and ``harness-mem recall --all-lanes`` shows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness_mem.cli import cli
from harness_mem.errors import InvalidInputError
from harness_mem.experience.consolidate import consolidate
from harness_mem.jsonl import import_jsonl
from harness_mem.sessions import MAX_SOURCES
from harness_mem.store import MemoryStore
from harness_mem.tools import run_operation

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_conversation.jsonl"


@pytest.fixture
def consolidated(engine_target: str) -> Iterator[MemoryStore]:
    """The sample conversation's turns, consolidated (summaries and facts citing them), keyword-only."""
    with MemoryStore(engine_target, embedder=None) as store:
        import_jsonl(store, SAMPLE.read_bytes().splitlines())
        consolidate(store)
        yield store


def test_a_plain_recall_stays_on_what_was_said(consolidated: MemoryStore) -> None:
    hits = consolidated.recall("password hashing argon2id", k=10)
    assert hits and {hit.entry.kind for hit in hits} <= {"turn", "note", "episode"}
    assert all(hit.sources is None for hit in hits)


def test_every_lane_ranks_derived_entries_with_the_turns_and_shows_their_sources(consolidated: MemoryStore) -> None:
    hits = consolidated.recall("password hashing argon2id", k=10, derived="both", sources=True)
    kinds = [hit.entry.kind for hit in hits]
    assert "turn" in kinds and {"fact", "summary"} & set(kinds)
    derived = [hit for hit in hits if hit.entry.source == "consolidation"]
    for hit in derived:
        cited = hit.entry.metadata["source_turns"]
        assert hit.sources is not None and 0 < len(hit.sources) <= MAX_SOURCES
        assert {turn.id for turn in hit.sources} <= set(cited)
        assert [t.created_at for t in hit.sources] == sorted(t.created_at for t in hit.sources)  # in order
    listed = [hit.entry.id for hit in hits] + [turn.id for hit in derived for turn in hit.sources or ()]
    assert len(listed) == len(set(listed))  # a turn is listed once: as a hit, or as a source below
    # Without sources nothing is folded: the same lanes, the turns still hits of their own.
    plain = consolidated.recall("password hashing argon2id", k=10, derived="both")
    assert {hit.entry.kind for hit in plain} >= {"turn"} and all(hit.sources is None for hit in plain)


def test_sources_prefer_the_turns_that_match(consolidated: MemoryStore) -> None:
    summary = next(e for e in consolidated.list(kind="summary") if "argon2id" in e.content)
    # Asked of the summaries alone, no turn is listed above it: its sources are the turns that match.
    hits = consolidated.recall("argon2id", k=20, kind="summary", sources=True)
    shown = next(hit for hit in hits if hit.entry.id == summary.id)
    assert shown.sources is not None and any("argon2id" in turn.content for turn in shown.sources)


def test_pages_and_bad_lanes(consolidated: MemoryStore) -> None:
    every = [hit.entry.id for hit in consolidated.recall("the user", k=8, derived="both", sources=True)]
    first = consolidated.recall("the user", k=4, derived="both", sources=True)
    second = consolidated.recall("the user", k=4, offset=4, derived="both", sources=True)
    assert [hit.entry.id for hit in first] == every[:4] and len(second) == 4
    with pytest.raises(InvalidInputError, match="derived must be"):
        consolidated.recall("the user", derived="all")  # type: ignore[arg-type]


def test_the_tool_spec_recalls_every_lane(consolidated: MemoryStore) -> None:
    result = run_operation(consolidated, "recall", {"query": "password hashing argon2id"})
    hits = result.model_dump(mode="json")["hits"]
    assert {hit["kind"] for hit in hits} >= {"turn"} and any(hit["sources"] for hit in hits)
    turns = run_operation(consolidated, "recall", {"query": "password hashing", "kind": "turn"})
    assert {hit["kind"] for hit in turns.model_dump(mode="json")["hits"]} == {"turn"}


def test_the_cli_shows_every_lane_on_request(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MemoryStore(db, embedder=None) as store:
        import_jsonl(store, SAMPLE.read_bytes().splitlines())
        consolidate(store)

    def run(*args: str) -> list[dict[str, object]]:
        result = CliRunner().invoke(cli, ["--db", str(db), "recall", *args, "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines()]

    assert all(hit["sources"] is None and hit["kind"] == "turn" for hit in run("password hashing argon2id"))
    every = run("password hashing argon2id", "--all-lanes")
    assert any(hit["sources"] for hit in every)
    both = CliRunner().invoke(cli, ["--db", str(db), "recall", "x", "--all-lanes", "--derived"])
    assert both.exit_code == 2 and "choose one" in both.stderr
