"""Forgetting reaches everything derived from a turn: segments, facts and the agent run's episode.

Every derived entry cites the turns it was made from in ``metadata.source_turns``, and forgetting
follows that one field, whatever selected the turn (an id, a tag, a kind, a time, a session). Proved
through the CLI: after forget, purge and gc the marker word is in no byte of the SQLite file or its
WAL and recall finds nothing; on PostgreSQL no row holds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from harness_mem.cli import cli
from harness_mem.db import connect
from harness_mem.experience import ExperienceStore, Skill, consolidate
from harness_mem.store import MemoryStore

MARKER = "qzpaymentsmod"  # no detector knows it: only forgetting can remove it
RUN = [
    {"id": "t1", "text": f"Please fix the failing test in module {MARKER}", "role": "user", "session": "run1",
     "tags": ["ticket-7"], "timestamp": "2026-01-01T10:00:00Z"},
    {"id": "t2", "text": "[bash] pytest -q: 3 passed", "role": "tool", "session": "run1",
     "timestamp": "2026-01-01T10:01:00Z"},
    {"id": "t3", "text": "Fixed. Result: success", "role": "assistant", "session": "run1",
     "timestamp": "2026-01-01T10:02:00Z"},
]
# Each way of selecting the first turn: its id, its tag, its kind, its time, its session.
SELECTORS = {
    "id": ["t1"],
    "tag": ["--tag", "ticket-7"],
    "kind": ["--kind", "turn"],
    "time": ["--since", "2026-01-01T09:59:00Z", "--until", "2026-01-01T10:00:30Z"],
    "session": ["--session", "run1"],
}


def run(target: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", target, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def consolidated_run(target: str, tmp_path: Path) -> None:
    lines = tmp_path / "run.jsonl"
    lines.write_text("".join(json.dumps(line) + "\n" for line in RUN), encoding="utf-8")
    run(target, "import", str(lines))
    run(target, "consolidate")
    assert MARKER in run(target, "recall", MARKER)  # the episode and the segment quote it
    assert MARKER in run(target, "episodes", "list")


def forget_purge_gc(target: str, selector: list[str]) -> None:
    run(target, "forget", *selector)
    assert MARKER not in run(target, "recall", MARKER)
    assert MARKER not in run(target, "episodes", "list")
    run(target, "purge")
    run(target, "gc")


@pytest.mark.parametrize("selector", SELECTORS.values(), ids=SELECTORS.keys())
def test_forgetting_a_turn_leaves_no_copy_of_its_words_in_the_sqlite_file(
    selector: list[str], db_path: Path, tmp_path: Path,
) -> None:
    target = str(db_path)
    consolidated_run(target, tmp_path)
    forget_purge_gc(target, selector)
    assert MARKER not in run(target, "recall", MARKER)
    files = list(db_path.parent.glob(db_path.name + "*"))
    assert db_path in files
    for path in files:
        assert MARKER.encode() not in path.read_bytes(), path.name


def marked_rows(dsn: str) -> dict[str, int]:
    """How many rows of each table holding text still hold the marker (the store's own schema)."""
    with psycopg.connect(dsn) as conn:
        return {
            "entries": conn.execute("SELECT count(*) FROM entries WHERE content LIKE %s OR metadata LIKE %s",
                                    (f"%{MARKER}%", f"%{MARKER}%")).fetchone()[0],
            "episodes": conn.execute("SELECT count(*) FROM episodes WHERE situation LIKE %s OR outcome LIKE %s",
                                     (f"%{MARKER}%", f"%{MARKER}%")).fetchone()[0],
        }


@pytest.mark.parametrize("engine", ["postgresql"])
@pytest.mark.parametrize("selector", SELECTORS.values(), ids=SELECTORS.keys())
def test_forgetting_a_turn_leaves_no_row_holding_its_words_on_postgresql(
    selector: list[str], engine_target: str, tmp_path: Path,
) -> None:
    consolidated_run(engine_target, tmp_path)
    assert marked_rows(engine_target)["episodes"] == 1
    forget_purge_gc(engine_target, selector)
    assert marked_rows(engine_target) == {"entries": 0, "episodes": 0}
    assert MARKER not in run(engine_target, "recall", MARKER)


def test_a_turn_forgotten_before_consolidation_is_never_quoted(engine_target: str, tmp_path: Path) -> None:
    lines = tmp_path / "run.jsonl"
    lines.write_text("".join(json.dumps(line) + "\n" for line in RUN), encoding="utf-8")
    run(engine_target, "import", str(lines))
    run(engine_target, "forget", "t1")              # still in the file until the purge
    run(engine_target, "consolidate")
    assert MARKER not in run(engine_target, "episodes", "list")
    with MemoryStore(engine_target, embedder=None) as store:
        derived = list(store.list(kind=["summary", "fact", "episode"]))
        assert not any(MARKER in entry.content for entry in derived), derived


def add_run(store: MemoryStore) -> None:
    store.add_many([{**line, "content": line["text"], "created_at": line["timestamp"]} for line in RUN])


def test_an_episode_built_from_several_turns_goes_when_one_of_them_is_forgotten(engine_store: MemoryStore) -> None:
    store = engine_store
    add_run(store)
    consolidate(store)
    (episode,) = store.list(kind="episode")
    assert episode.metadata["source_turns"] == ["t1", "t2", "t3"]
    assert list(store.list(kind="summary")) == []  # a task handed over and a result: nothing a summary keeps
    assert store.forget("t2") == 2                 # the tool turn and the episode quoting it
    assert list(store.list(kind="episode")) == []
    assert {e.id for e in store.list(kind="turn")} == {"t1", "t3"}   # the other turns stay


def test_an_updated_episode_still_cites_the_turns_of_its_first_version(engine_store: MemoryStore) -> None:
    store = engine_store
    add_run(store)
    consolidate(store)
    store.add("[bash] pytest -q: 4 passed", id="t4", role="tool", session="run1", created_at="2026-01-01T10:03:00Z")
    (result,) = consolidate(store).sessions
    assert result.action == "updated"
    (episode,) = store.list(kind="episode")
    assert episode.metadata["source_turns"] == ["t1", "t2", "t3", "t4"]
    store.forget("t1")
    assert list(store.list(kind="episode")) == []
    assert store.recall(MARKER, 10) == []


@pytest.mark.parametrize("purged", [False, True], ids=["tombstone", "purged"])
def test_an_episode_forgotten_with_a_turn_is_built_again_from_the_turns_that_remain(
    engine_store: MemoryStore, purged: bool,
) -> None:
    store = engine_store
    add_run(store)
    consolidate(store)
    store.forget("t2")                             # the tool turn: the episode lists its tool
    if purged:
        store.purge()
    (result,) = consolidate(store).sessions
    assert result.episode_id == "session:run1" and result.action in ("created", "updated")
    rebuilt = ExperienceStore(store).get("session:run1")
    assert rebuilt.episode.situation == RUN[0]["text"] and rebuilt.episode.tools == []
    (entry,) = store.list(kind="episode")
    assert entry.metadata["source_turns"] == ["t1", "t3"]
    assert consolidate(store).sessions == []       # built once: the next run has nothing to do


def test_an_episode_forgotten_itself_is_not_built_again(engine_store: MemoryStore) -> None:
    store = engine_store
    add_run(store)
    consolidate(store)
    assert store.forget("session:run1") == 1       # its turns stay
    assert consolidate(store).sessions == []
    assert list(store.list(kind="episode")) == []


def test_a_skill_distilled_from_a_forgotten_episode_goes_with_its_history(engine_store: MemoryStore) -> None:
    store = engine_store
    add_run(store)
    consolidate(store)
    experience = ExperienceStore(store)
    # As the distiller writes it: the episode's situation under "When this applies".
    quoting = Skill("fix-failing-tests", "Fixes a failing test suite. Use when tests fail after a change.",
                    f"# Fix failing tests\n\n## When this applies\n\nPlease fix the failing test in module {MARKER}"
                    "\n\n## Steps\n\n1. Run the tests.\n2. Fix the code.\n")
    experience.save_skill(quoting, origin="distilled", episode_id="session:run1")
    unrelated = Skill("deploy-runbook", "Deploys a website to production. Use when a release must go out.",
                      "# Deploy\n\n1. Build.\n2. Deploy.\n3. Check the health page.\n")
    experience.save_skill(unrelated)
    store.forget(tags=["ticket-7"])
    assert [record.name for record in experience.list_skills()] == ["deploy-runbook"]
    assert experience.find_skill("fix-failing-tests") is None


def test_a_forgotten_skill_leaves_no_copy_in_the_sqlite_file(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        add_run(store)
        consolidate(store)
        skill = Skill("fix-failing-tests", "Fixes a failing test suite. Use when tests fail after a change.",
                      f"# Fix failing tests\n\n## When this applies\n\nfix the test in module {MARKER}\n")
        ExperienceStore(store).save_skill(skill, origin="distilled", episode_id="session:run1")
        store.forget("t1")
        store.purge()
        store.gc()
    for path in db_path.parent.glob(db_path.name + "*"):
        assert MARKER.encode() not in path.read_bytes(), path.name


def test_episodes_consolidated_before_they_cited_their_turns_are_forgotten_with_them(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        add_run(store)
        consolidate(store)
    as_released_before(engine_target)
    with MemoryStore(engine_target, embedder=None) as store:  # opening it migrates it
        (episode,) = store.list(kind="episode")
        assert episode.metadata["source_turns"] == ["t1", "t2", "t3"]
        assert store.forget("t1") == 2             # the turn and the episode
        assert store.recall(MARKER, 10) == []


def as_released_before(target: str) -> None:
    """The store as the previous release left it: its episode says only how far it went
    (``consolidated_from``), and the migration that makes it cite its turns has not run."""
    if target.startswith("postgresql"):
        with psycopg.connect(target) as pg:
            pg.execute("UPDATE entries SET metadata = (metadata::jsonb - 'source_turns')::text WHERE kind = 'episode'")
            pg.execute("DELETE FROM _migrations WHERE name LIKE '%episode_provenance'")
        return
    conn = connect(Path(target))
    with conn:
        conn.execute("UPDATE entries SET metadata = json_remove(metadata, '$.source_turns') WHERE kind = 'episode'")
        conn.execute("DELETE FROM _migrations WHERE name LIKE '%episode_provenance'")
    conn.close()


def test_a_correction_of_a_derived_entry_is_forgotten_with_the_turns_it_restates(engine_target: str) -> None:
    # The user corrects what consolidation wrote; the corrected words still say what the turn said,
    # so forgetting the turn takes the correction too, and no byte of it stays after purge and gc.
    with MemoryStore(engine_target, embedder=None) as store:
        store.add_many([{**RUN[0], "content": RUN[0]["text"]}])
        store.add_many([{"content": f"The user asked for a fix in {MARKER}.", "kind": "summary", "session": "run1",
                         "source": "consolidation", "metadata": {"source_turns": ["t1"]}, "id": "run1:summary"}])
    run(engine_target, "supersede", "run1:summary", f"The user asked for a fix of the failing test in {MARKER}.")
    with MemoryStore(engine_target, embedder=None) as store:
        corrected = store.recall(MARKER, 5, kind="summary")[0].entry
        assert "failing test" in corrected.content and corrected.metadata["source_turns"] == ["t1"]
    forget_purge_gc(engine_target, ["t1"])
    assert MARKER not in run(engine_target, "recall", MARKER, "--kind", "summary")
    if engine_target.startswith("postgresql"):
        assert marked_rows(engine_target)["entries"] == 0
    else:
        assert not [p for p in Path(engine_target).parent.glob(Path(engine_target).name + "*")
                    if MARKER.encode() in p.read_bytes()]
