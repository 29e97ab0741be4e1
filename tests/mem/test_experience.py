"""ExperienceStore (episodes + skills on one SQLite file), the recorder, and the guide."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_mem.db import write_transaction
from harness_mem.errors import DuplicateIdError, InvalidInputError, NotFoundError
from harness_mem.experience.episode import Episode
from harness_mem.experience.skills import RevisionLedger, Skill, write_skill_md
from harness_mem.experience.store import (
    GUIDE_HEADER,
    RESULT_WEIGHTS,
    ExperienceGuide,
    ExperienceRecorder,
    ExperienceStore,
    format_guide,
)
from harness_mem.models import from_ms, to_ms
from harness_mem.store import MemoryStore


@pytest.fixture
def exp(store: MemoryStore) -> ExperienceStore:
    return ExperienceStore(store)


def deploy(**fields: Any) -> Episode:
    data: dict[str, Any] = {"situation": "deploy the marketing site to production", "outcome": "it is live",
                            "tools": ["read_file", "shell", "shell"]}
    data.update(fields)
    return Episode(**data)


def skill(name: str = "deploy-runbook", **fields: Any) -> Skill:
    data: dict[str, Any] = {
        "description": "Deploys a website to production and verifies it. Use when a release must go out.",
        "body": "# Deploy Runbook\n\n1. Build.\n2. Run the deploy script.\n3. Check the health page.\n",
    }
    data.update(fields)
    return Skill(name=name, **data)


# ---- schema ------------------------------------------------------------------------------------

EXPECTED_COLUMNS = {
    "episodes": ["pk", "id", "namespace", "entry_id", "situation", "tools", "skills", "outcome", "success", "tags",
                 "created_at"],
    "skills": ["pk", "namespace", "name", "skill_md", "description", "metadata", "version", "created_at",
               "updated_at"],
    "skill_revisions": ["pk", "skill_pk", "version", "skill_md", "origin", "rationale", "episode_id", "created_at"],
    "skill_sources": ["skill_pk", "episode_pk", "role", "created_at"],
}


def test_migration_creates_the_tables(store: MemoryStore) -> None:
    for table, columns in EXPECTED_COLUMNS.items():
        assert [row[1] for row in store.db.execute(f"PRAGMA table_info({table})")] == columns
    fks = {(r[2], r[3], r[6]) for r in store.db.execute("PRAGMA foreign_key_list(episodes)")}
    assert fks == {("entries", "namespace", "CASCADE"), ("entries", "entry_id", "CASCADE")}


# ---- recording ---------------------------------------------------------------------------------


def test_record_stores_an_entry_and_a_row(exp: ExperienceStore, store: MemoryStore) -> None:
    ep = deploy(skills=["deploy-runbook"], success=True, tags=["release"])
    episode_id = exp.record(ep, session="s1")
    entry = store.get(episode_id)
    assert entry.kind == "episode" and entry.source == "experience" and entry.session == "s1"
    assert entry.content == ep.render()
    assert list(entry.tags) == ["experience", "tool:read_file", "tool:shell", "skill:deploy-runbook", "release"]
    stored = exp.get(episode_id)
    assert stored.episode == ep  # tags included: they live in the row
    assert stored.entry_id == episode_id
    row = store.db.execute("SELECT tools, success, tags FROM episodes WHERE id = ?", (episode_id,)).fetchone()
    assert row == ('["read_file","shell","shell"]', 1, '["release"]')


def test_unknown_result_is_null(exp: ExperienceStore, store: MemoryStore) -> None:
    episode_id = exp.record(deploy())
    assert store.db.execute("SELECT success FROM episodes WHERE id = ?", (episode_id,)).fetchone() == (None,)
    assert exp.get(episode_id).episode.success is None


def test_multiline_and_unicode_episodes_round_trip(exp: ExperienceStore) -> None:
    ep = deploy(situation="部署网站\nOutcome: 不是结果\n第二行", outcome="好了\n🚀", success=False)
    assert exp.get(exp.record(ep)).episode == ep


def test_the_row_is_what_the_store_kept(exp: ExperienceStore, store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redaction happens in the store's write path: the structural row must not keep the raw text."""
    real_add = store.add

    def redacting_add(content: str, **fields: Any) -> Any:
        return real_add(content.replace("ops@example.com", "<EMAIL>"), **fields)

    monkeypatch.setattr(store, "add", redacting_add)
    episode_id = exp.record(deploy(outcome="mailed ops@example.com"))
    assert exp.get(episode_id).episode.outcome == "mailed <EMAIL>"
    assert "example.com" not in str(store.db.execute("SELECT outcome FROM episodes").fetchall())


def test_a_failed_row_write_removes_the_entry(exp: ExperienceStore, store: MemoryStore) -> None:
    with write_transaction(store.db.conn):
        store.db.execute(
            "INSERT INTO episodes (id, namespace, situation, outcome, created_at) VALUES ('x', 'default', 's', 'o', 0)"
        )
    with pytest.raises(Exception, match="UNIQUE"):
        exp.record(deploy(), id="x")
    with pytest.raises(NotFoundError):
        store.get("x")


def test_record_refuses_an_empty_situation(exp: ExperienceStore) -> None:
    with pytest.raises(InvalidInputError):
        exp.record(Episode("   ", "o"))


def test_deleting_the_entry_deletes_the_episode(exp: ExperienceStore, store: MemoryStore) -> None:
    episode_id = exp.record(deploy())
    assert store.delete(episode_id)
    with pytest.raises(NotFoundError):
        exp.get(episode_id)
    other = exp.record(deploy())
    assert exp.delete(other) and not exp.delete(other)
    with pytest.raises(NotFoundError):
        store.get(other)
    assert exp.count() == 0


def test_list_filters(exp: ExperienceStore) -> None:
    a = exp.record(deploy(success=True, skills=["deploy-runbook"]))
    b = exp.record(deploy(tools=["http_get"], success=False))
    c = exp.record(deploy(tools=["shell"]))
    assert [s.id for s in exp.list()] == [c, b, a]
    assert [s.id for s in exp.list(newest_first=False, limit=2)] == [a, b]
    assert [s.id for s in exp.list(tool="shell")] == [c, a]
    assert [s.id for s in exp.list(skill="deploy-runbook")] == [a]
    assert [s.id for s in exp.list(success=False)] == [b]
    assert [s.id for s in exp.list(success=True)] == [a]


def test_expired_entries_hide_their_episodes(exp: ExperienceStore, store: MemoryStore) -> None:
    episode_id = exp.record(deploy())
    store.db.execute("UPDATE entries SET expires_at = 1 WHERE id = ?", (episode_id,))
    assert exp.list() == []
    with pytest.raises(NotFoundError):
        exp.get(episode_id)


def test_namespaces_do_not_mix(db_path: Path) -> None:
    with MemoryStore(db_path) as one, MemoryStore(db_path, namespace="other") as two:
        a, b = ExperienceStore(one), ExperienceStore(two)
        episode_id = a.record(deploy())
        a.save_skill(skill())
        assert b.list() == [] and b.recall("deploy the marketing site") == []
        assert b.list_skills() == []
        with pytest.raises(NotFoundError):
            b.get(episode_id)
        b.save_skill(skill())  # the same name is free in another namespace
        assert len(a.list_skills()) == len(b.list_skills()) == 1


# ---- recall ------------------------------------------------------------------------------------


def test_success_outranks_failure_at_equal_relevance(exp: ExperienceStore) -> None:
    failed = exp.record(deploy(outcome="it broke", success=False))
    unknown = exp.record(deploy(outcome="no idea"))
    worked = exp.record(deploy(outcome="it worked", success=True))
    hits = exp.recall("deploy the marketing site", k=3)
    assert [h.id for h in hits] == [worked, unknown, failed]
    assert hits[0].score == pytest.approx(hits[0].relevance * RESULT_WEIGHTS[True])
    assert hits[2].score == pytest.approx(hits[2].relevance * RESULT_WEIGHTS[False])


def test_recall_filters(exp: ExperienceStore) -> None:
    a = exp.record(deploy(success=True, skills=["deploy-runbook"]))
    b = exp.record(deploy(tools=["http_get"], success=False))
    assert [h.id for h in exp.recall("deploy marketing site", tool="http_get")] == [b]
    assert [h.id for h in exp.recall("deploy marketing site", skill="deploy-runbook")] == [a]
    assert [h.id for h in exp.recall("deploy marketing site", success=False)] == [b]
    assert [h.id for h in exp.recall("deploy marketing site", success=True)] == [a]
    assert exp.recall("deploy marketing site", tool="nope") == []


def test_recall_edges(exp: ExperienceStore) -> None:
    exp.record(deploy())
    assert exp.recall("deploy", k=0) == []
    assert exp.recall("   ") == []
    assert exp.recall("completely unrelated kittens") == []
    assert len(exp.recall("deploy marketing", k=1)) == 1


def test_recall_reads_episode_entries_without_a_row(exp: ExperienceStore, store: MemoryStore) -> None:
    """Entries written by an older writer (or imported) carry only the text and the tag."""
    text = "Situation: deploy the marketing site\nTools used: shell, shell\nOutcome: done"
    store.add(text, kind="note", tags=["experience", "legacy"], id="old-1")
    store.add("Situation-less note about deploying the marketing site", tags=["experience"])
    hits = exp.recall("deploy the marketing site")
    assert [h.id for h in hits] == ["old-1"]
    assert hits[0].episode == Episode("deploy the marketing site", "done", tools=["shell", "shell"], tags=["legacy"])


def test_an_episode_written_as_a_note_after_a_recall_is_found_by_the_next(exp: ExperienceStore, store: MemoryStore) -> None:
    """Recall ranks episode entries by their (indexed) kind; notes count once one holds an episode."""
    exp.record(Episode("rotate the signing keys", "rotated", tools=["vault"]))
    assert [h.episode.situation for h in exp.recall("deploy the marketing site")] == []
    text = "Situation: deploy the marketing site\nTools used: shell\nOutcome: done"
    store.add(text, kind="note", tags=["experience"], id="old-2")
    assert [h.id for h in exp.recall("deploy the marketing site")] == ["old-2"]


def test_recall_finds_cjk_situations(exp: ExperienceStore) -> None:
    episode_id = exp.record(deploy(situation="把网站部署到生产环境"))
    assert [h.id for h in exp.recall("部署网站")] == [episode_id]


# ---- guide and recorder ------------------------------------------------------------------------


def test_guide_block_is_exact(exp: ExperienceStore) -> None:
    exp.record(deploy(outcome="it is live", success=True))
    exp.record(Episode("answer a question about the marketing site", "answered"))
    block = ExperienceGuide(exp, top_k=2).render("marketing site deploy")
    assert block == (
        "[experience-recall]\nSimilar past experience — how you handled comparable situations before:"
        "\n  1. situation: deploy the marketing site to production"
        "\n     tools used: read_file, shell, shell"
        "\n     outcome: it is live"
        "\n  2. situation: answer a question about the marketing site"
        "\n     tools used: (none)"
        "\n     outcome: answered"
    )
    assert block.startswith(GUIDE_HEADER)


def test_guide_is_empty_when_nothing_is_recalled(exp: ExperienceStore) -> None:
    assert ExperienceGuide(exp).render("anything") == ""
    assert format_guide([]) == ""


def test_recorder_drains_its_traces(exp: ExperienceStore) -> None:
    recorder = ExperienceRecorder(exp, session="run-1")
    for name in ["read_file", "shell", "shell", "http_get"]:
        recorder.on_tool_use(name)
    recorder.on_skill_activated({"skill": "deploy-runbook"})
    recorder.on_skill_activated("deploy-runbook")
    stored = recorder.record("deploy the marketing site to production", "it is live", True, tags=["release"])
    assert stored.episode.tools == ["read_file", "shell", "shell", "http_get"]
    assert stored.episode.skills == ["deploy-runbook"]
    assert stored.episode.success is True and stored.episode.tags == ["release"]
    assert exp.get(stored.id).episode == stored.episode
    assert recorder.tool_trace.tools == [] and recorder.skill_trace.skills == []
    assert recorder.record("next run with nothing traced", "ok").episode.tools == []


def test_record_episode_fills_only_empty_tools(exp: ExperienceStore) -> None:
    recorder = ExperienceRecorder(exp)
    recorder.tool_trace.note("shell")
    explicit = recorder.record_episode(deploy(tools=["http_get"]))
    assert explicit.episode.tools == ["http_get"]
    assert recorder.tool_trace.tools == []  # drained anyway: the next run starts clean
    recorder.tool_trace.note("shell")
    assert recorder.record_episode(deploy(tools=[])).episode.tools == ["shell"]


def test_recorder_guide(exp: ExperienceStore) -> None:
    recorder = ExperienceRecorder(exp, top_k=1)
    recorder.record_episode(deploy())
    recorder.record_episode(deploy(outcome="again"))
    assert recorder.guide().render("deploy marketing site").count("situation:") == 1


# ---- skills ------------------------------------------------------------------------------------


def test_save_and_get_a_skill(exp: ExperienceStore) -> None:
    record = exp.save_skill(skill(), origin="distilled", rationale="first")
    assert record.version == 1 and record.name == "deploy-runbook" and record.skill == skill()
    assert exp.get_skill("deploy-runbook") == record
    assert [r.name for r in exp.list_skills()] == ["deploy-runbook"]
    assert exp.skills() == [skill()]


def test_versions_and_history(exp: ExperienceStore) -> None:
    exp.save_skill(skill(), origin="distilled", rationale="first")
    assert exp.save_skill(skill()).version == 1  # identical: no new version
    changed = skill(body="# Deploy Runbook\n\n1. Build first, always.\n2. Deploy.\n3. Check the health page.\n")
    changed = changed.with_ledger(RevisionLedger(revision=1, revised_on="2025-01-01", revisions_today=1))
    record = exp.save_skill(changed, origin="revised", rationale="build first")
    assert record.version == 2 and record.skill.ledger.revision == 1
    assert record.updated_at >= record.created_at
    history = exp.skill_history("deploy-runbook")
    assert [(h.version, h.origin, h.rationale) for h in history] == [(1, "distilled", "first"), (2, "revised", "build first")]
    assert history[0].skill == skill() and history[1].skill == changed
    with pytest.raises(NotFoundError):
        exp.skill_history("nope")


def test_expected_version(exp: ExperienceStore) -> None:
    exp.save_skill(skill(), expected_version=0)
    with pytest.raises(DuplicateIdError):
        exp.save_skill(skill(), expected_version=0)
    with pytest.raises(InvalidInputError, match="version 1"):
        exp.save_skill(skill(description="Other words entirely. Use when testing versions."), expected_version=3)
    assert exp.save_skill(skill(description="Other words entirely. Use when testing."), expected_version=1).version == 2


def test_invalid_skills_and_origins_are_refused(exp: ExperienceStore) -> None:
    with pytest.raises(InvalidInputError):
        exp.save_skill(skill(name="Not Valid"))
    with pytest.raises(InvalidInputError):
        exp.save_skill(skill(), origin="magic")
    with pytest.raises(NotFoundError):
        exp.get_skill("nope")
    assert exp.find_skill("nope") is None


def test_source_episodes_and_cascades(exp: ExperienceStore, store: MemoryStore) -> None:
    first = exp.record(deploy(success=True))
    second = exp.record(deploy(success=False, skills=["deploy-runbook"]))
    exp.save_skill(skill(), origin="distilled", episode_id=first)
    exp.save_skill(skill(body="# Deploy Runbook\n\n1. Build first.\n2. Deploy the site.\n3. Check health.\n"),
                   origin="revised", episode_id=second)
    exp.save_skill(skill(), episode_id="not-in-this-store")  # recorded in history, not linked
    assert exp.get_skill("deploy-runbook").source_episodes == (first, second)
    assert exp.skill_history("deploy-runbook")[-1].episode_id == "not-in-this-store"
    # Deleting an episode unlinks it; the history keeps its id.
    exp.delete(first)
    assert exp.get_skill("deploy-runbook").source_episodes == (second,)
    assert exp.skill_history("deploy-runbook")[0].episode_id == first
    # Deleting the skill deletes its history and links.
    assert exp.delete_skill("deploy-runbook") and not exp.delete_skill("deploy-runbook")
    assert store.db.execute("SELECT count(*) FROM skill_revisions").fetchone() == (0,)
    assert store.db.execute("SELECT count(*) FROM skill_sources").fetchone() == (0,)


def test_export_and_import_round_trip(exp: ExperienceStore, tmp_path: Path, db_path: Path) -> None:
    exp.save_skill(skill())
    exp.save_skill(skill("review-code", description="Reviews a pull request for bugs. Use when a PR needs review."))
    paths = exp.export_skills(tmp_path / "out")
    assert sorted(p.parent.name for p in paths) == ["deploy-runbook", "review-code"]
    assert all(p.name == "SKILL.md" for p in paths)
    assert exp.export_skills(tmp_path / "one", names=["review-code"])[0].parent.name == "review-code"

    with MemoryStore(tmp_path / "other.db") as other_store:
        other = ExperienceStore(other_store)
        report = other.import_skills(tmp_path / "out")
        assert report.saved == ["deploy-runbook", "review-code"] and report.invalid == []
        assert [r.skill for r in other.list_skills()] == [r.skill for r in exp.list_skills()]
        assert other.skill_history("review-code")[0].origin == "imported"
        again = other.import_skills(tmp_path / "out")
        assert again.saved == [] and again.unchanged == ["deploy-runbook", "review-code"]


def test_import_reports_invalid_skills(exp: ExperienceStore, tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill_md(skill(), root)
    (root / "renamed").mkdir()
    (root / "renamed" / "SKILL.md").write_text(skill("other-name").render(), encoding="utf-8")
    (root / "broken").mkdir()
    (root / "broken" / "SKILL.md").write_text("no front matter here", encoding="utf-8")
    report = exp.import_skills(root)
    assert report.saved == ["deploy-runbook"]
    assert sorted(Path(p).parent.name for p, _ in report.invalid) == ["broken", "renamed"]
    assert "differs from its directory" in dict((Path(p).parent.name, e) for p, e in report.invalid)["renamed"]
    with pytest.raises(InvalidInputError):
        exp.import_skills(tmp_path / "missing")


def test_times_are_milliseconds(exp: ExperienceStore) -> None:
    stored = exp.get(exp.record(deploy()))
    assert from_ms(to_ms(stored.created_at)) == stored.created_at
    assert stored.to_dict()["created_at"].endswith("Z")
