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
    Turn,
    build_episode,
    consolidate,
    episode_id_for,
    verdict,
)
from harness_mem.experience.derive import SpokenTurn
from harness_mem.experience.episode import Episode
from harness_mem.experience.model_consolidation import digest_prompt
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
    record(store, "chat", ("assistant", "hello?"))
    first = consolidate(store)
    assert (first.created, first.derived, first.skipped) == (2, 1, 0)  # a chat gets no episode
    before = snapshot(store)
    second = consolidate(store)
    assert snapshot(store) == before
    assert second.sessions == []


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


# ---- with a model -------------------------------------------------------------------------------------


def chat(store: MemoryStore, session: str = "c-1", *lines: tuple[str, str], when: str = "2023-05-08T10:00:00Z") -> list[str]:
    lines = lines or (
        ("Ada", "Hi Bo! Guess what, I moved to Porto last month."),
        ("Bo", "No way! Do you like it there?"),
        ("Ada", "I love it, and I adopted two cats called Salt and Pepper."),
        ("Bo", "That's lovely. See you soon!"),
    )
    entries = store.add_many([{"content": text, "role": role, "session": session, "created_at": when}
                              for role, text in lines])
    return [e.id for e in entries]


def digest(segments: Sequence[tuple[str, Sequence[int]]], facts: Sequence[tuple[str, Sequence[int]]] = ()) -> str:
    return json.dumps({"segments": [{"text": t, "turns": list(n)} for t, n in segments],
                       "facts": [{"text": t, "turns": list(n)} for t, n in facts]})


def test_the_model_writes_the_summaries_and_facts_citing_their_turns(store: MemoryStore) -> None:
    turns = chat(store)
    model = ScriptedTextModel([digest(
        [("On 8 May 2023 Ada told Bo about her move to Porto and her two cats.", [1, 3])],
        [("Ada moved to Porto in April 2023.", [1]), ("Ada has two cats, Salt and Pepper.", [3, 3])],
    )])
    report = consolidate(store, model=model)
    assert model.calls == 1 and (report.segments, report.facts) == (1, 2)   # nothing stored near: no 2nd call
    assert "[1] Ada (2023-05-08): Hi Bo! Guess what, I moved to Porto last month." in model.prompts[0]
    assert "## Segment 1" in model.prompts[0]
    (summary,) = store.list(kind="summary")
    assert summary.content.startswith("On 8 May 2023 Ada told Bo") and summary.metadata["source_turns"] == turns
    cats = next(e for e in store.list(kind="fact") if "cats" in e.content)
    assert cats.metadata["source_turns"] == [turns[2]] and cats.source == CONSOLIDATION_SOURCE
    assert consolidate(store, model=model).sessions == [] and model.calls == 1   # nothing new: no call


def test_a_reply_that_fails_validation_is_asked_again_once_then_the_rules_write(store: MemoryStore) -> None:
    chat(store)
    model = ScriptedTextModel(["Sure! Ada moved to Porto.", digest([])])   # not JSON; then 0 summaries for 1 segment
    (result,) = consolidate(store, model=model).sessions
    assert model.calls == 2 and "Your previous reply was rejected: the reply is not a JSON object" in model.prompts[1]
    assert result.model_rejected and "0 segment summaries for 1 segments" in (result.note or "")
    assert result.segments and result.facts                                   # the rules' text, not nothing
    assert store.get(result.segments[0]).content.startswith("Ada and Bo on 8 May 2023: ")


def test_a_reply_citing_a_turn_that_was_not_shown_is_rejected(store: MemoryStore) -> None:
    chat(store)
    model = ScriptedTextModel([
        digest([("Ada and Bo caught up.", [1])], [("Ada moved to Porto.", [99])]),
        digest([("Ada and Bo caught up.", [1])], [("Ada moved to Porto.", [])]),   # cites nothing
        digest([("Ada and Bo caught up.", [1])], [("Ada moved to Porto.", [1])]),
    ])
    (result,) = consolidate(store, model=model).sessions
    assert model.calls == 2 and result.model_rejected
    assert "facts cite turn 99, not one of the 4 shown" in model.prompts[1]
    assert "facts.0.turns: List should have at least 1 item" in (result.note or "")


def test_the_model_decides_whether_a_new_fact_adds_updates_or_repeats(store: MemoryStore) -> None:
    lisbon = store.remember("Ada lives in Lisbon.", kind="fact").id
    cats = store.remember("Ada has two cats named Salt and Pepper.", kind="fact").id
    chat(store)
    model = ScriptedTextModel([
        digest([("Ada told Bo about Porto.", [1, 3])],
               [("Ada lives in Porto since April 2023.", [1]), ("Ada has two cats, Salt and Pepper.", [3]),
                ("Ada loves Porto.", [3])]),
        json.dumps({"decisions": [{"fact": 1, "action": "update", "existing": lisbon},
                                  {"fact": 2, "action": "repeat", "existing": cats}]}),   # 3: left out: added
    ])
    report = consolidate(store, model=model)
    assert model.calls == 2 and (report.facts, report.facts_updated, report.facts_repeated) == (2, 1, 1)
    assert lisbon in model.prompts[1] and "Ada lives in Porto since April 2023." in model.prompts[1]
    assert store.get(lisbon).superseded_by is not None                         # kept in the history
    assert [e.content for e in store.history(lisbon)] == ["Ada lives in Lisbon.", "Ada lives in Porto since April 2023."]
    assert store.count(kind="fact") == 3 and store.get(cats).superseded_by is None  # Porto, cats, loves Porto


def test_a_decision_about_a_fact_not_shown_adds_the_facts_as_new(store: MemoryStore) -> None:
    lisbon = store.remember("Ada lives in Lisbon.", kind="fact").id
    chat(store)
    bad = json.dumps({"decisions": [{"fact": 1, "action": "update", "existing": "made-up-id"}]})
    model = ScriptedTextModel([digest([("Ada told Bo about Porto.", [1])], [("Ada lives in Porto.", [1])]), bad, bad])
    (result,) = consolidate(store, model=model).sessions
    assert model.calls == 3 and "fact 1: update of 'made-up-id', not a fact shown" in (result.note or "")
    assert store.get(lisbon).superseded_by is None and len(result.facts) == 1   # added, nothing merged


def test_a_failed_call_writes_nothing_and_the_session_is_tried_again(store: MemoryStore) -> None:
    chat(store)
    model = ScriptedTextModel([ModelError("cannot connect to the model server")])
    (result,) = consolidate(store, model=model).sessions
    assert "not consolidated (cannot connect to the model server)" in (result.note or "")
    assert store.count(kind=["summary", "fact"]) == 0
    model.push(digest([("Ada and Bo caught up.", [1])], [("Ada moved to Porto.", [1])]))
    (retry,) = consolidate(store, model=model).sessions
    assert (len(retry.segments), len(retry.facts), model.calls) == (1, 1, 2)


def test_a_long_session_is_shown_whole_with_each_turn_cut() -> None:
    turns = [SpokenTurn(f"t{i}", "user", f"turn {i} " + "z" * 700, None) for i in range(1, 201)]
    prompt = digest_prompt(turns, [range(0, 100), range(100, 200)])
    assert "[1] user: turn 1" in prompt and "[200] user: turn 200" in prompt and "## Segment 2" in prompt
    assert len(prompt) < 40_000


def test_with_vectors_the_stored_facts_near_each_new_one_are_found_by_meaning(hashed_store: MemoryStore) -> None:
    lisbon = hashed_store.remember("Ada lives in Lisbon.", kind="fact").id
    chat(hashed_store)
    model = ScriptedTextModel([
        digest([("Ada told Bo about Porto.", [1])], [("Ada lives in Porto since April 2023.", [1])]),
        json.dumps({"decisions": [{"fact": 1, "action": "update", "existing": lisbon}]}),
    ])
    report = consolidate(hashed_store, model=model)
    assert model.calls == 2 and lisbon in model.prompts[1] and report.facts_updated == 1
