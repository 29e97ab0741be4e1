"""Upgrading a file an older harness_mem wrote: only its first migrations applied, rows in its tables.

The old file is built as the old code built it: the shipped SQL files up to a number (a shipped file
is never edited, so they are exactly what ran then), each in a transaction with its ``_migrations``
row, then entries and their keyword rows written with plain SQL, without the current store.
Opening it with :class:`MemoryStore` must keep every row, recall from the old keyword rows, and
bring the schema to the latest migration.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from fake_embedder import HashedEmbedder

from harness_mem.db import Connection, connect, write_transaction
from harness_mem.errors import EmbedderError, MissingVectorsWarning
from harness_mem.experience.store import ExperienceStore
from harness_mem.keyword import index_text
from harness_mem.migrations import known_migrations, split_statements
from harness_mem.store import MemoryStore

T0 = 1_714_557_600_000  # 2024-05-01T10:00:00Z in ms
DAY = 86_400_000
FAR = 4_102_444_800_000  # 2100-01-01: an expiry still ahead

SKILL_MD = (
    "---\nname: deploy-runbook\ndescription: Deploys a website to production and verifies it."
    " Use when a release must go out.\n---\n1. Build.\n2. Upload.\n3. Check the health endpoint.\n"
)

# (pk, id, namespace, kind, content, role, session, tags, source, metadata, created_at, expires_at, redactions)
ENTRIES: list[tuple[Any, ...]] = [
    (1, "n1", "default", "note", "we chose argon2id for password hashing", None, None, '["decision"]', "chat",
     '{"ticket": 42}', T0, None, "{}"),
    (2, "t1", "default", "turn", "when do we deploy the billing service?", "user", "s1", "[]", None, "{}",
     T0 + 60_000, None, "{}"),
    (3, "t2", "default", "turn", "on Tuesdays, in the morning window", "assistant", "s1", "[]", None, "{}",
     T0 + 120_000, None, "{}"),
    (4, "cjk", "default", "fact", "用户偏好：回答要简短，先给命令。", None, None, "[]", None, "{}", T0 + DAY, FAR, "{}"),
    (5, "mail", "default", "note", "send the report to <EMAIL>", None, None, "[]", None, "{}", T0 + 2 * DAY, None,
     '{"EMAIL": 1}'),
    (6, "raw", "default", "note", "stored with redaction off", None, None, "[]", None, "{}", T0 + 3 * DAY, None, None),
    (7, "n1", "team", "note", "the team namespace has its own n1 about kubernetes", None, None, "[]", None, "{}",
     T0, None, "{}"),
    (8, "episode-1", "default", "episode", "situation: deploy the marketing site\noutcome: it is live", None, None,
     '["episode"]', None, "{}", T0 + 4 * DAY, None, "{}"),
]
CHECKED_TABLES = {  # table -> the columns the old schema had (later migrations may add others)
    "entries": "pk, id, namespace, kind, content, role, session, tags, source, metadata, created_at, expires_at,"
               " content_hash, redactions",
    "episodes": "pk, id, namespace, entry_id, situation, tools, skills, outcome, success, tags, created_at",
    "skills": "pk, namespace, name, skill_md, description, metadata, version, created_at, updated_at",
    "skill_revisions": "pk, skill_pk, version, skill_md, origin, rationale, episode_id, created_at",
    "skill_sources": "skill_pk, episode_pk, role, created_at",
}


def build_old_file(path: Path, last: int) -> None:
    """A file as the harness_mem of schema ``last`` left it, with rows in every table it had."""
    conn = connect(path)
    try:
        conn.execute("CREATE TABLE _migrations (number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
        for migration in known_migrations():
            if migration.number > last:
                break
            with write_transaction(conn):
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO _migrations (number, name, applied_at) VALUES (?, ?, ?)",
                             (migration.number, migration.name, "2024-05-01T09:00:00+00:00"))
        with write_transaction(conn):
            write_old_rows(conn, last)
    finally:
        conn.close()


def write_old_rows(conn: Connection, last: int) -> None:
    conn.execute("INSERT INTO settings (key, value) VALUES ('redaction.secret', ?)", ("ab" * 32,))
    for row in ENTRIES:
        content = row[4]
        digest = "h1:" + hashlib.sha256(content.encode()).hexdigest()
        conn.execute(
            "INSERT INTO entries (pk, id, namespace, kind, content, role, session, tags, source, metadata,"
            " created_at, expires_at, content_hash, redactions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row[:12], digest, row[12]),
        )
        # The keyword row as the first schema documents it: "role: content", CJK runs as bigrams.
        conn.execute("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", (row[0], index_text(content, row[5])))
    if last >= 3:  # the experience tables
        conn.execute(
            "INSERT INTO episodes (pk, id, namespace, entry_id, situation, tools, skills, outcome, success, tags,"
            " created_at) VALUES (1, 'episode-1', 'default', 'episode-1', 'deploy the marketing site',"
            " '[\"read_file\", \"shell\", \"shell\"]', '[\"deploy-runbook\"]', 'it is live', 1, '[\"web\"]', ?)",
            (T0 + 4 * DAY,),
        )
        conn.execute(
            "INSERT INTO skills (pk, namespace, name, skill_md, description, metadata, version, created_at,"
            " updated_at) VALUES (1, 'default', 'deploy-runbook', ?, 'Deploys a website to production and"
            " verifies it. Use when a release must go out.', '{}', 1, ?, ?)", (SKILL_MD, T0, T0),
        )
        conn.execute(
            "INSERT INTO skill_revisions (pk, skill_pk, version, skill_md, origin, rationale, episode_id,"
            " created_at) VALUES (1, 1, 1, ?, 'distilled', 'first draft', 'episode-1', ?)", (SKILL_MD, T0),
        )
        conn.execute("INSERT INTO skill_sources (skill_pk, episode_pk, role, created_at) VALUES (1, 1, 'distilled', ?)",
                     (T0,))


def dump(path: Path, last: int) -> dict[str, list[tuple[Any, ...]]]:
    conn = connect(path)
    try:
        return {table: conn.execute(f"SELECT {columns} FROM {table} ORDER BY 1, 2").fetchall()
                for table, columns in CHECKED_TABLES.items() if table == "entries" or last >= 3}
    finally:
        conn.close()


@pytest.fixture(params=[1, 3, 5], ids=lambda n: f"schema-{n:04d}")
def old_file(request: pytest.FixtureRequest, db_path: Path) -> tuple[Path, int]:
    build_old_file(db_path, request.param)
    return db_path, request.param


def test_every_row_survives_and_the_schema_is_brought_up_to_date(old_file: tuple[Path, int]) -> None:
    path, last = old_file
    before = dump(path, last)
    assert len(before["entries"]) == len(ENTRIES)
    with MemoryStore(path, embedder=None) as store:
        applied = {number for (number,) in store.db.execute("SELECT number FROM _migrations")}
        assert applied == {m.number for m in known_migrations()}
        assert store.stats()["schema_version"] == known_migrations()[-1].number
        tables = {name for (name,) in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"entries", "entries_fts", "settings", "episodes", "skills", "skill_revisions", "skill_sources",
                "consolidations"} <= tables
        assert "entry_vectors" not in tables  # vectors live only in vec0 now
        settings = dict(store.db.execute("SELECT key, value FROM settings").fetchall())
        assert settings["redaction.secret"] == "ab" * 32  # the file's key is kept, not replaced
        assert settings["vectors.generation"] == "0"
        assert store.integrity_check() == []
    assert dump(path, last) == before  # every old row, column for column


def test_old_entries_read_back_and_recall_from_their_keyword_rows(old_file: tuple[Path, int]) -> None:
    path, _ = old_file
    with MemoryStore(path, embedder=None) as store:
        note = store.get("n1")
        assert (note.content, note.tags, note.source, note.metadata, note.redactions) == (
            "we chose argon2id for password hashing", ("decision",), "chat", {"ticket": 42}, {})
        assert store.get("raw").redactions is None  # "written without redaction" is kept as such
        assert store.get("mail").redactions == {"EMAIL": 1}
        assert store.get("cjk").expires_at is not None
        assert [e.id for e in store.list()] == ["n1", "t1", "t2", "cjk", "mail", "raw", "episode-1"]
        assert store.count() == 7 and store.stats()["namespaces"] == ["default", "team"]

        assert [h.entry.id for h in store.recall("argon2id")] == ["n1"]
        assert [h.entry.id for h in store.recall("回答", k=1)] == ["cjk"]
        assert [h.entry.id for h in store.recall("deploy billing", role="user")] == ["t1"]
        assert store.recall("kubernetes") == []  # another namespace's row stays there
    with MemoryStore(path, namespace="team", embedder=None) as team:
        assert [h.entry.id for h in team.recall("kubernetes")] == ["n1"]


def test_new_writes_and_deletes_work_next_to_old_rows(old_file: tuple[Path, int]) -> None:
    path, _ = old_file
    with MemoryStore(path, embedder=None) as store:
        added = store.add("a new note about argon2id parameters", tags=["decision"])
        assert store.db.execute("SELECT pk FROM entries WHERE id = ?", (added.id,)).fetchone()[0] == len(ENTRIES) + 1
        assert {h.entry.id for h in store.recall("argon2id")} == {"n1", added.id}
        assert store.delete("n1")  # an old entry: its old keyword row goes with it
        assert [h.entry.id for h in store.recall("argon2id")] == [added.id]
        assert store.db.execute("SELECT count(*) FROM entries_fts").fetchone()[0] == store.db.execute(
            "SELECT count(*) FROM entries").fetchone()[0]


def test_an_old_file_gets_vectors_through_reindex(old_file: tuple[Path, int]) -> None:
    path, _ = old_file
    with MemoryStore(path, embedder=HashedEmbedder()) as store:
        with pytest.raises(EmbedderError, match=r"no vector yet for 8 entries .* run `harness-mem reindex`"):
            store.recall("password hashing", strict=True)
        with pytest.warns(MissingVectorsWarning, match="no vector yet for 8 of 8 entries"):
            assert store.recall("password hashing", k=1)[0].entry.id == "n1"  # by keyword meanwhile
        report = store.reindex()
        assert report == {"entries": 8, "keyword_rows": 8, "vectors_dropped": 0, "vectors_written": 8}
        assert store.recall("password hashing", k=1)[0].entry.id == "n1"
        assert store.recall("password hashing", k=1, mode="semantic")[0].entry.id == "n1"
        # The rebuilt keyword rows give turns their context: the answer is found by the question's words.
        assert {h.entry.id for h in store.recall("billing", mode="keyword")} == {"t1", "t2"}


def test_old_episodes_and_skills_are_read_by_the_experience_layer(db_path: Path) -> None:
    build_old_file(db_path, 3)
    with MemoryStore(db_path, embedder=None) as store:
        experience = ExperienceStore(store)
        stored = experience.get("episode-1")
        assert (stored.episode.situation, stored.episode.tools, stored.episode.skills, stored.episode.success) == (
            "deploy the marketing site", ["read_file", "shell", "shell"], ["deploy-runbook"], True)
        assert [r.skill.name for r in experience.list_skills()] == ["deploy-runbook"]
        assert [(v.version, v.origin, v.episode_id) for v in experience.skill_history("deploy-runbook")] == [
            (1, "distilled", "episode-1")]
        assert experience.delete("episode-1")  # the old foreign key still cascades from the entry
        assert store.db.execute("SELECT count(*) FROM episodes").fetchone()[0] == 0
        assert store.db.execute("SELECT count(*) FROM skill_sources").fetchone()[0] == 0
        assert store.db.execute("SELECT skill_md FROM skills").fetchone()[0] == SKILL_MD  # the skill outlives it
