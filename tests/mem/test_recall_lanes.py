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
    hits = consolidated.recall("where do deploys go out", k=10, derived="both", sources=True)
    kinds = [hit.entry.kind for hit in hits]
    assert "turn" in kinds and {"fact", "summary"} & set(kinds)
    derived = [hit for hit in hits if hit.entry.source == "consolidation"]
    assert any(hit.sources for hit in derived)
    for n, hit in enumerate(hits):
        if hit.entry.source != "consolidation":
            continue
        cited = hit.entry.metadata["source_turns"]
        shown = [turn.id for turn in hit.sources or ()]
        assert len(shown) <= MAX_SOURCES and set(shown) <= set(cited)
        assert [t.created_at for t in hit.sources or ()] == sorted(t.created_at for t in hit.sources or ())  # in order
        above = {h.entry.id for h in hits[:n]} | {t.id for h in hits[:n] for t in h.sources or ()}
        assert shown or set(cited[:MAX_SOURCES]) <= above | set(cited[MAX_SOURCES:])  # none: all listed above
    listed = [hit.entry.id for hit in hits] + [turn.id for hit in derived for turn in hit.sources or ()]
    assert len(listed) == len(set(listed))  # a turn is listed once: as a hit, or as a source below
    # Without sources nothing is folded: the same lanes, the turns still hits of their own.
    plain = consolidated.recall("where do deploys go out", k=10, derived="both")
    assert {hit.entry.kind for hit in plain} >= {"turn"} and all(hit.sources is None for hit in plain)


def test_sources_prefer_the_turns_that_match(consolidated: MemoryStore) -> None:
    summary = next(e for e in consolidated.list(kind="summary") if "Deploys go out" in e.content)
    # Asked of the summaries alone, no turn is listed above it: its sources are the turns that match.
    hits = consolidated.recall("deploys", k=20, kind="summary", sources=True)
    shown = next(hit for hit in hits if hit.entry.id == summary.id)
    assert shown.sources is not None and any("deploys" in turn.content.lower() for turn in shown.sources)


def test_pages_and_bad_lanes(consolidated: MemoryStore) -> None:
    every = [hit.entry.id for hit in consolidated.recall("the user", k=8, derived="both", sources=True)]
    first = consolidated.recall("the user", k=4, derived="both", sources=True)
    second = consolidated.recall("the user", k=4, offset=4, derived="both", sources=True)
    assert [hit.entry.id for hit in first] == every[:4] and len(second) == 4
    with pytest.raises(InvalidInputError, match="derived must be"):
        consolidated.recall("the user", derived="all")  # type: ignore[arg-type]


def test_the_tool_spec_recalls_every_lane(consolidated: MemoryStore) -> None:
    result = run_operation(consolidated, "recall", {"query": "where do deploys go out"})
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

    assert all(hit["sources"] is None and hit["kind"] in ("turn", "note", "episode") for hit in run("where do deploys go out"))
    every = run("where do deploys go out", "--all-lanes")
    assert any(hit["sources"] for hit in every)
    both = CliRunner().invoke(cli, ["--db", str(db), "recall", "x", "--all-lanes", "--derived"])
    assert both.exit_code == 2 and "choose one" in both.stderr
