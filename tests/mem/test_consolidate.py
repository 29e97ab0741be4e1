"""Offline consolidation: transcripts → episodes (and facts), idempotent and incremental."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness_mem.errors import ModelError
from harness_mem.experience.consolidate import (
    CONSOLIDATION_SOURCE,
    MAX_FACTS,
    Turn,
    build_episode,
    consolidate,
    episode_id_for,
    facts_prompt,
    parse_facts,
    verdict,
)
from harness_mem.experience.episode import Episode
from harness_mem.experience.skills import Skill
from harness_mem.experience.store import ExperienceStore
from harness_mem.experience.transcript import TranscriptRecorder
from harness_mem.providers.textmodel import ScriptedTextModel
from harness_mem.store import MemoryStore

# The module (the package exports the function of the same name).
consolidation = importlib.import_module("harness_mem.experience.consolidate")

SITUATION = "Deploy the marketing site to production and check that it is live"


def record(store: MemoryStore, session: str, *turns: tuple[str, Any], success: bool | None = None) -> None:
    """Write a transcript the way an agent would: ``("user", text)``, ``("tool", (name, result))``…"""
    with TranscriptRecorder(store, session=session) as rec:
        for i, (role, body) in enumerate(turns):
            last = i == len(turns) - 1
            if role == "user":
                rec.note_user(body)
            elif role == "tool":
                rec.note_tool(*body, success=success if last else None)
            else:
                rec.note_assistant(body, success=success if last else None)


def deploy_run(store: MemoryStore, session: str = "s-1", *, success: bool | None = True) -> None:
    record(
        store, session,
        ("user", SITUATION),
        ("assistant", "I will read the release notes first."),
        ("tool", ("read_file", "RELEASE.md: v2")),
        ("tool", ("shell", {"exit": 0, "out": "built"})),
        ("tool", ("shell", {"exit": 0, "out": "deployed"})),
        ("tool", ("http_get", {"status": 200})),
        ("assistant", "The site is deployed and answers 200."),
        success=success,
    )


def snapshot(store: MemoryStore) -> dict[str, Any]:
    """Everything consolidation may touch, comparable with ==."""
    conn = store.db.conn
    return {
        "export": list(store.export()),
        "episodes": conn.execute("SELECT * FROM episodes ORDER BY pk").fetchall(),
        "consolidations": conn.execute(
            "SELECT namespace, session, episode_id, last_pk, last_turn_id, turns, facts_pk, facts FROM consolidations"
        ).fetchall(),
        "counts": {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                   for t in ("entries", "episodes", "consolidations", "skill_sources")},
    }


# ---- the episode -----------------------------------------------------------------------------------


def test_a_session_becomes_an_episode(store: MemoryStore) -> None:
    deploy_run(store)
    report = consolidate(store)
    assert (report.created, report.updated, report.skipped, report.facts) == (1, 0, 0, 0)
    stored = ExperienceStore(store).get(episode_id_for("s-1"))
    assert stored.episode == Episode(
        SITUATION, "The site is deployed and answers 200.",
        tools=["read_file", "shell", "shell", "http_get"], tags=["consolidated"], success=True,
    )
    entry = store.get(stored.entry_id or "")
    assert entry.kind == "episode" and entry.session == "s-1"
    assert entry.metadata["consolidated_from"]["turns"] == 7
    recalled = ExperienceStore(store).recall("deploy marketing site", mode="keyword")
    assert [r.id for r in recalled] == ["session:s-1"]
    assert report.sessions[0].describe().startswith("created    s-1  → session:s-1  (7 new turns, 4 tool calls, success)")


def test_running_twice_adds_nothing(store: MemoryStore) -> None:
    deploy_run(store, "s-1")
    deploy_run(store, "s-2", success=False)
    record(store, "no-user", ("assistant", "hello?"))
    first = consolidate(store)
    assert (first.created, first.skipped) == (2, 1)
    before = snapshot(store)
    second = consolidate(store)
    assert snapshot(store) == before
    assert [(s.session, s.action) for s in second.sessions] == [("no-user", "skipped")]  # looked at, unchanged
    assert second.created == second.updated == second.facts == 0


def test_new_turns_update_the_same_episode_in_place(store: MemoryStore) -> None:
    deploy_run(store)
    consolidate(store)
    experience = ExperienceStore(store)
    old = experience.get("session:s-1")
    skill = Skill("deploy-static-site", "Deploys a static website and verifies it. Use when a site must go live.",
                  "# Deploy\n\n1. Build.\n2. Deploy.\n3. Check.")
    experience.save_skill(skill, origin="distilled", episode_id="session:s-1")

    record(store, "s-1",
           ("user", "Now purge the CDN cache too"),
           ("tool", ("cdn_purge", {"ok": False})),
           ("assistant", "The purge failed: the token expired.\nStatus: failed"))
    report = consolidate(store)
    assert [(s.action, s.new_turns) for s in report.sessions] == [("updated", 3)]
    new = experience.get("session:s-1")
    assert new.episode.situation == SITUATION                       # the situation stays
    assert new.episode.tools == ["read_file", "shell", "shell", "http_get", "cdn_purge"]
    assert new.episode.outcome.startswith("The purge failed") and new.episode.success is False
    assert new.entry_id != old.entry_id
    assert store.count(kind="episode") == 1 and experience.count() == 1  # the old text is gone
    assert experience.get_skill("deploy-static-site").source_episodes == ("session:s-1",)  # the link survives
    assert store.db.execute("SELECT turns FROM consolidations").fetchone()[0] == 10

    record(store, "s-1", ("user", "thanks"))  # a new turn that neither answers nor judges
    consolidate(store)
    assert experience.get("session:s-1").episode.success is False


def test_only_sessions_with_new_turns_are_read(store: MemoryStore) -> None:
    for i in range(5):
        deploy_run(store, f"s-{i}")
    consolidate(store)
    record(store, "s-3", ("user", "one more thing"), ("assistant", "Done.\nResult: success"))
    seen: list[tuple[int, int, str]] = []
    report = consolidate(store, progress=lambda done, total, session: seen.append((done, total, session)))
    assert [s.session for s in report.sessions] == ["s-3"] and seen == [(1, 1, "s-3")]


def test_filters_session_since_and_idle(store: MemoryStore) -> None:
    old = datetime.now(UTC) - timedelta(days=3)
    for session in ("old", "recent"):
        when = old if session == "old" else datetime.now(UTC) - timedelta(seconds=30)
        store.add(f"{session} task: write the quarterly report", role="user", session=session, created_at=when)
        store.add("Written.", role="assistant", session=session, created_at=when + timedelta(seconds=1))
    assert [s.session for s in consolidate(store, since="1d", idle="5m").sessions] == []   # recent is still active
    assert [s.session for s in consolidate(store, since="1d").sessions] == ["recent"]
    assert [s.session for s in consolidate(store, idle=3600).sessions] == ["old"]
    assert consolidate(store, session="old").sessions == []                                 # done already


def test_a_session_without_a_user_turn_waits_for_one(store: MemoryStore) -> None:
    record(store, "later", ("tool", ("cron", "tick")))
    report = consolidate(store)
    assert [(s.action, s.note) for s in report.sessions] == [("skipped", "no user turn yet to take the situation from")]
    record(store, "later", ("user", "summarise the cron output"), ("assistant", "Nothing happened."))
    (result,) = consolidate(store).sessions
    assert result.action == "created" and result.episode is not None
    assert result.episode.situation == "summarise the cron output" and result.episode.tools == ["cron"]


def test_a_deleted_episode_is_not_recreated(store: MemoryStore) -> None:
    deploy_run(store)
    consolidate(store)
    assert ExperienceStore(store).delete("session:s-1")
    record(store, "s-1", ("user", "and again"), ("assistant", "ok"))
    (result,) = consolidate(store).sessions
    assert (result.action, result.note) == ("skipped", "its episode was deleted; not recreated")
    assert store.count(kind="episode") == 0
    assert consolidate(store).sessions == []


def test_a_run_interrupted_between_episode_and_bookkeeping_is_repaired(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy_run(store)

    def crash(self: object, mark: object) -> bool:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(consolidation._Job, "_record", crash)
        with pytest.raises(KeyboardInterrupt):
            consolidate(store)
    assert store.count(kind="episode") == 1 and store.db.execute("SELECT count(*) FROM consolidations").fetchone()[0] == 0
    (result,) = consolidate(store).sessions
    assert result.action == "updated"
    assert store.count(kind="episode") == 1 and ExperienceStore(store).count() == 1
    assert consolidate(store).sessions == []


# ---- the success rule --------------------------------------------------------------------------------


def turn(role: str, content: str, *tags: str) -> Turn:
    return Turn(0, "id", role, content, tags)


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        ([turn("user", "go"), turn("assistant", "done", "result:success")], True),
        ([turn("assistant", "Result: success", "result:failure")], False),           # a tag beats a phrase
        ([turn("assistant", "x", "result:failure"), turn("assistant", "y", "result:success")], True),  # latest tag
        ([turn("assistant", "All done.\nResult: success")], True),
        ([turn("assistant", "status: PASSED — 12 tests")], True),
        ([turn("assistant", "Build finished.\nStatus: failed")], False),
        ([turn("tool", "Result: failure"), turn("user", "hm")], False),                # the final non-user turn
        ([turn("assistant", "Result: success"), turn("tool", "[ls] a")], None),       # ... is the tool turn here
        ([turn("assistant", "The result: success is not guaranteed")], None),           # not at a line start
        ([turn("assistant", "Everything worked perfectly!")], None),                    # tone is not a verdict
        ([turn("user", "Result: success")], None),                                      # users do not judge the run
        ([], None),
    ],
)
def test_success_is_read_from_tags_then_result_lines_else_unknown(turns: list[Turn], expected: bool | None) -> None:
    assert verdict(turns) is expected


def test_build_episode_merges_new_turns_into_a_base() -> None:
    base = Episode("task", "first answer", tools=["a"], skills=["s"], tags=["x"], success=True)
    merged = build_episode([turn("tool", "[b] out")], base)
    assert merged == Episode("task", "first answer", tools=["a", "b"], skills=["s"], tags=["x", "consolidated"],
                             success=True)
    assert build_episode([turn("assistant", "second answer")], base) == Episode(
        "task", "second answer", tools=["a"], skills=["s"], tags=["x", "consolidated"], success=None
    )
    assert build_episode([turn("assistant", "no user yet")]) is None
    named = Turn(0, "id", "tool", "whatever", metadata={"tool": "from-metadata"})
    assert named.tool == "from-metadata" and turn("tool", "[a,b] x").tool is None and turn("tool", "no name").tool is None


# ---- facts -------------------------------------------------------------------------------------------


def facts_reply(*facts: tuple[str, Sequence[int]]) -> str:
    return json.dumps([{"fact": text, "turns": list(turns)} for text, turns in facts])


def test_facts_are_extracted_with_one_call_per_session_and_linked_to_their_turns(store: MemoryStore) -> None:
    deploy_run(store, "s-1")
    record(store, "s-2", ("user", "Remember that I prefer dark mode in every dashboard"), ("assistant", "Noted."))
    model = ScriptedTextModel([
        facts_reply(("Production deploys use the release script", [4, 5]), ("Release notes live in RELEASE.md", [3])),
        "```json\n" + facts_reply(("The user prefers dark mode", [1]), ("b", []), ("c", [99]), ("dropped", [1]))
        + "\n```",
    ])
    report = consolidate(store, model=model)
    assert model.calls == 2 and report.facts == 2 + MAX_FACTS
    assert "[1] user: " + SITUATION in model.prompts[0] and "[3] tool: [read_file] RELEASE.md: v2" in model.prompts[0]

    s1_turns = [t.id for t in store.list(kind="turn", session="s-1")]
    facts = {f.content: f for f in store.list(kind="fact")}
    deploy = facts["Production deploys use the release script"]
    assert deploy.session == "s-1" and deploy.source == CONSOLIDATION_SOURCE and "consolidated" in deploy.tags
    assert deploy.metadata == {"source_turns": [s1_turns[3], s1_turns[4]], "session": "s-1"}
    s2_turns = [t.id for t in store.list(kind="turn", session="s-2")]
    assert facts["b"].metadata["source_turns"] == s2_turns  # no citation: every turn shown
    assert facts["c"].metadata["source_turns"] == s2_turns  # no valid citation: the same
    assert "dropped" not in facts                           # at most MAX_FACTS per session
    assert [h.entry.content for h in store.recall("dark mode", kind="fact")] == ["The user prefers dark mode"]

    before = snapshot(store)
    assert consolidate(store, model=model).sessions == [] and model.calls == 2  # nothing new: no call
    assert snapshot(store) == before

    record(store, "s-2", ("user", "Also: our staging host is stage.example.com"), ("assistant", "Got it."))
    model.push(facts_reply(("Staging runs on stage.example.com", [1])))
    (result,) = consolidate(store, model=model).sessions
    assert result.action == "updated" and len(result.facts) == 1
    assert "dark mode" not in model.prompts[-1]  # only the new turns are shown


def test_malformed_model_output_writes_no_facts_and_says_so(store: MemoryStore) -> None:
    deploy_run(store)
    model = ScriptedTextModel(["Sure! Here are some facts: the site is deployed."])
    (result,) = consolidate(store, model=model).sessions
    assert result.action == "created" and result.facts == []
    assert result.note is not None and result.note.startswith("the model's reply is not a JSON array of facts")
    assert store.count(kind="fact") == 0
    assert consolidate(store, model=model).sessions == [] and model.calls == 1  # not asked again


def test_a_failed_model_call_is_noted_and_retried_next_run(store: MemoryStore) -> None:
    deploy_run(store)
    model = ScriptedTextModel([ModelError("cannot connect to the model server")])
    (result,) = consolidate(store, model=model).sessions
    assert result.action == "created" and "facts not extracted (cannot connect" in (result.note or "")
    model.push(facts_reply(("Deploys go through the release script", [5])))
    (retry,) = consolidate(store, model=model).sessions
    assert retry.action == "unchanged" and len(retry.facts) == 1 and model.calls == 2


def test_a_model_configured_later_extracts_facts_for_consolidated_sessions(store: MemoryStore) -> None:
    deploy_run(store)
    consolidate(store)
    episode_before = ExperienceStore(store).get("session:s-1")
    model = ScriptedTextModel(["[]"])
    (result,) = consolidate(store, model=model).sessions
    assert (result.action, result.facts, model.calls) == ("unchanged", [], 1)
    assert ExperienceStore(store).get("session:s-1") == episode_before


def test_parse_facts_accepts_the_shapes_models_produce() -> None:
    shown = [Turn(i, f"t{i}", "user", "x") for i in (1, 2, 3)]
    assert parse_facts('{"facts": ["plain string fact"]}', shown) == [
        consolidation.Fact("plain string fact", ("t1", "t2", "t3"))
    ]
    assert parse_facts('[{"text": "cited twice", "source_turns": [2, 2, "3", true]}]', shown) == [
        consolidation.Fact("cited twice", ("t2",))
    ]
    assert parse_facts('[{"fact": "' + "long " * 200 + '"}, 42, {"fact": "  "}]', shown) == []
    assert parse_facts("[]", shown) == []
    for bad in ("no json here", '{"answer": 1}', "[1, 2"):
        assert parse_facts(bad, shown) is None


def test_a_long_session_keeps_its_start_and_end_in_the_prompt() -> None:
    turns = [Turn(i, f"t{i}", "user" if i == 1 else "assistant", f"turn {i} " + "z" * 700) for i in range(1, 201)]
    prompt = facts_prompt("long", turns)
    assert len(prompt) < 26_000
    assert "[1] user: turn 1" in prompt and "[200] assistant: turn 200" in prompt
    assert "turns omitted …]" in prompt and "… [" in prompt  # each turn also cut to its head
