"""SkillDistiller and SkillReviser: gates and caps as values, one model call, checked results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_mem.errors import DuplicateIdError, InvalidInputError, InvalidSkillError, ModelError
from harness_mem.experience.distill import (
    NO_RATIONALE,
    DailyCapReached,
    Draft,
    DuplicateSkill,
    EpisodeSucceeded,
    LifetimeCapReached,
    NameTaken,
    NotSuccessful,
    Revision,
    SituationTooShort,
    SkillDistiller,
    SkillNotUsedInEpisode,
    SkillReviser,
    TooFewDistinctTools,
    TooFewToolCalls,
    distill_episode,
    revise_skill,
)
from harness_mem.experience.episode import Episode
from harness_mem.experience.skills import RevisionLedger, Skill, lint, read_skill, utf8_len
from harness_mem.experience.store import ExperienceStore
from harness_mem.providers.textmodel import ScriptedTextModel

SITUATION = "Deploy the marketing site to production with the release script and verify it is live"
TOOLS = ["read_file", "shell", "shell", "http_get", "shell", "read_file"]


def run(**fields: object) -> Episode:
    data: dict[str, object] = {"situation": SITUATION, "outcome": "site deployed and verified", "tools": TOOLS,
                               "success": True}
    data.update(fields)
    return Episode(**data)  # type: ignore[arg-type]


def reply(**fields: object) -> str:
    data: dict[str, object] = {
        "name": "Deploy Runbook",
        "title": "Deploy Runbook",
        "description": "Deploys a website to production and checks that it is live. Use when a release must go out.",
        "steps": ["Read the release notes", "Run the deploy script", "Check the health endpoint"],
        "pitfalls": ["Deploying without a build"],
    }
    data.update(fields)
    return json.dumps(data)


# ---- the gate ----------------------------------------------------------------------------------


def test_one_tool_run_is_too_few_calls() -> None:
    assert SkillDistiller(ScriptedTextModel()).gate(run(tools=["shell"])) == TooFewToolCalls(got=1, need=4)


def test_six_tool_run_passes_the_gate() -> None:
    assert SkillDistiller(ScriptedTextModel()).gate(run()) is None


@pytest.mark.parametrize("success", [False, None])
def test_failed_or_unmarked_runs_are_rejected(success: bool | None) -> None:
    assert SkillDistiller(ScriptedTextModel()).gate(run(success=success)) == NotSuccessful(success)


def test_five_shell_calls_are_one_distinct_tool() -> None:
    assert SkillDistiller(ScriptedTextModel()).gate(run(tools=["shell"] * 5)) == TooFewDistinctTools(got=1, need=2)


def test_short_situation() -> None:
    assert SkillDistiller(ScriptedTextModel()).gate(run(situation="  fix the bug  ")) == SituationTooShort(11, 16)


@pytest.mark.parametrize(
    "episode",
    [run(tools=["shell"]), run(success=False), run(success=None), run(tools=["shell"] * 5), run(situation="short")],
)
def test_a_rejection_makes_no_model_call(episode: Episode) -> None:
    model = ScriptedTextModel([reply()])
    result = SkillDistiller(model).distill(episode)
    assert not isinstance(result, Draft)
    assert model.calls == 0


def test_skips_carry_readable_messages() -> None:
    assert "at least 4" in TooFewToolCalls(1, 4).message
    assert TooFewToolCalls(1, 4).to_dict() == {
        "skipped": "too_few_tool_calls", "got": 1, "need": 4, "message": TooFewToolCalls(1, 4).message,
    }


# ---- drafting ----------------------------------------------------------------------------------


def test_deploy_runbook_draft_is_lint_clean_and_round_trips() -> None:
    model = ScriptedTextModel([reply()])
    draft = SkillDistiller(model).distill(run())
    assert isinstance(draft, Draft)
    skill = draft.skill
    assert skill.name == "deploy-runbook"
    assert lint(skill, dir_name="deploy-runbook") == []
    back = Skill.parse(skill.render())
    assert back == skill
    assert back.ledger == RevisionLedger(revision=0, revisions_today=0, origin="distilled")
    assert skill.metadata == {"experience": {"revision": 0, "revisions_today": 0, "origin": "distilled"}}
    assert skill.body == (
        "# Deploy Runbook\n\n"
        f"{skill.description}\n\n"
        f"## When this applies\n\n{SITUATION}\n\n"
        "## Steps\n\n1. Read the release notes\n2. Run the deploy script\n3. Check the health endpoint\n\n"
        "## Pitfalls\n\n- Deploying without a build"
    )
    assert model.calls == 1
    request = model.requests[0]
    assert request.max_tokens == 1200 and request.json
    assert SITUATION in request.prompt and "read_file, shell, shell" in request.prompt


def test_a_terse_reply_is_repaired() -> None:
    terse = json.dumps({"name": "deploy", "description": "Deploys.", "steps": "1. 1. Build\n2) Ship\n- 3 - Verify"})
    draft = SkillDistiller(ScriptedTextModel([terse])).distill(run())
    assert isinstance(draft, Draft)
    desc = draft.skill.description
    assert "use when" in desc.lower() and utf8_len(desc) >= 60
    assert "1. 1." not in draft.skill.body
    assert "1. Build\n2. Ship\n3. Verify\n" in draft.skill.body + "\n"
    assert draft.skill.body.startswith("# Deploy\n")  # title from the slug


def test_a_chatty_fenced_reply_is_read() -> None:
    chatty = "Sure! Here is the skill you asked for:\n```json\n" + reply() + "\n```\nHope it helps."
    assert isinstance(SkillDistiller(ScriptedTextModel([chatty])).distill(run()), Draft)


def test_no_steps_is_an_error() -> None:
    with pytest.raises(ModelError, match="steps"):
        SkillDistiller(ScriptedTextModel([reply(steps=[])])).distill(run())


def test_non_json_is_an_error() -> None:
    with pytest.raises(ModelError, match="JSON"):
        SkillDistiller(ScriptedTextModel(["I could not do that."])).distill(run())


def test_model_failure_propagates() -> None:
    with pytest.raises(ModelError, match="down"):
        SkillDistiller(ScriptedTextModel([ModelError("down")])).distill(run())


def test_name_falls_back_to_the_situation_then_to_a_hash() -> None:
    draft = SkillDistiller(ScriptedTextModel([reply(name="")])).distill(run())
    assert isinstance(draft, Draft) and draft.skill.name.startswith("deploy-the-marketing-site")
    cjk = run(situation="把市场部的网站部署到生产环境并确认已经上线", outcome="已上线")
    draft = SkillDistiller(ScriptedTextModel([reply(name="网站部署")])).distill(cjk)
    assert isinstance(draft, Draft)
    assert draft.skill.name.startswith("skill-")
    assert lint(draft.skill) == []


def test_a_huge_description_is_cut_to_1024_bytes() -> None:
    draft = SkillDistiller(ScriptedTextModel([reply(description="Use when asked. " + "咖" * 2000)])).distill(run())
    assert isinstance(draft, Draft)
    assert utf8_len(draft.skill.description) <= 1024


def test_a_duplicate_is_suppressed_before_the_call() -> None:
    existing = [("deploy-marketing-site", "Deploy the marketing site to production and verify it is live.")]
    model = ScriptedTextModel([reply()])
    result = SkillDistiller(model, existing).distill(run())
    assert isinstance(result, DuplicateSkill)
    assert result.existing == "deploy-marketing-site" and result.similarity >= 0.6 and result.threshold == 0.6
    assert model.calls == 0


def test_an_unrelated_skill_does_not_suppress() -> None:
    existing = [("summarise-sales", "Summarise a quarterly sales report for finance. Use when asked for numbers.")]
    assert isinstance(SkillDistiller(ScriptedTextModel([reply()]), existing).distill(run()), Draft)


def test_a_cjk_duplicate_is_suppressed() -> None:
    existing = [("deploy-site", "部署网站到生产环境，并检查是否上线。")]
    cjk = run(situation="帮我把网站部署到生产环境，然后检查是否上线")
    model = ScriptedTextModel([reply()])
    assert isinstance(SkillDistiller(model, existing).distill(cjk), DuplicateSkill)
    assert model.calls == 0


def test_the_name_is_taken_after_drafting() -> None:
    existing = [("deploy-runbook", "Something about kittens and yarn. Use when petting cats.")]
    model = ScriptedTextModel([reply()])
    assert SkillDistiller(model, existing).distill(run()) == NameTaken("deploy-runbook", "deploy-runbook")
    assert model.calls == 1


def test_a_near_duplicate_name_is_taken_too() -> None:
    existing = [("deploy-runbooks", "Something about kittens and yarn. Use when petting cats.")]
    result = SkillDistiller(ScriptedTextModel([reply()]), existing).distill(run())
    assert result == NameTaken("deploy-runbook", "deploy-runbooks")


def test_a_drafted_duplicate_is_skipped() -> None:
    # The situation is new, but what the model drafted is an existing skill.
    existing = [("ship-website", "Deploys a website to production and checks that it is live.")]
    result = SkillDistiller(ScriptedTextModel([reply(name="release-site")]), existing).distill(run())
    assert isinstance(result, DuplicateSkill) and result.existing == "ship-website"


def test_five_chatty_runs_make_exactly_one_skill(store: object) -> None:
    experience = ExperienceStore(store)  # type: ignore[arg-type]
    chatty = "Here you go!\n" + reply(name="deploy-marketing-site") + "\nLet me know."
    model = ScriptedTextModel([chatty] * 5)
    distiller = SkillDistiller.for_store(model, experience)
    situations = [
        SITUATION,
        "Deploy the marketing site to production again with the release script, then verify it",
        "Please deploy marketing site to production using the release script and verify live",
        "Redeploy the marketing site to production via release script and verify it is live",
        "Deploy our marketing site to production with the release script; verify it is live",
    ]
    for situation in situations:
        episode_id = experience.record(run(situation=situation))
        result = distiller.distill(experience.get(episode_id).episode)
        if isinstance(result, Draft):
            distiller.save(result, experience, episode_id=episode_id)
    assert [r.name for r in experience.list_skills()] == ["deploy-marketing-site"]
    assert model.calls <= 5


def test_distill_writes_nothing_until_asked(store: object, tmp_path: Path) -> None:
    experience = ExperienceStore(store)  # type: ignore[arg-type]
    episode_id = experience.record(run())
    model = ScriptedTextModel([reply(), reply()])
    result = distill_episode(experience, episode_id, model)
    assert isinstance(result, Draft)
    assert experience.list_skills() == []
    result = distill_episode(experience, episode_id, model, save=True)
    assert isinstance(result, Draft)
    record = experience.get_skill("deploy-runbook")
    assert record.source_episodes == (episode_id,)
    assert experience.skill_history("deploy-runbook")[0].origin == "distilled"
    # Saved: the next distiller knows the skill, so the same draft is skipped.
    assert distill_episode(experience, episode_id, ScriptedTextModel([reply()])) == NameTaken(
        "deploy-runbook", "deploy-runbook"
    )


def test_save_refuses_a_name_that_appeared_meanwhile(store: object) -> None:
    experience = ExperienceStore(store)  # type: ignore[arg-type]
    draft = SkillDistiller(ScriptedTextModel([reply()])).distill(run())
    assert isinstance(draft, Draft)
    experience.save_skill(draft.skill)
    with pytest.raises(DuplicateIdError):
        SkillDistiller(ScriptedTextModel()).save(draft, experience)


def test_write_to_a_directory(tmp_path: Path) -> None:
    distiller = SkillDistiller.for_directory(ScriptedTextModel([reply()]), tmp_path / "skills")
    draft = distiller.distill(run())
    assert isinstance(draft, Draft)
    path = distiller.write(draft, tmp_path / "skills")
    assert read_skill(path) == draft.skill
    with pytest.raises(InvalidSkillError):
        distiller.write(draft, tmp_path / "skills")
    # A fresh distiller reading the directory knows the skill.
    fresh = SkillDistiller.for_directory(ScriptedTextModel([reply()]), tmp_path / "skills")
    assert fresh.distill(run()) == NameTaken("deploy-runbook", "deploy-runbook")


# ---- the reviser -------------------------------------------------------------------------------

DAY = "2025-06-01"
GOOD_BODY = "# Deploy Runbook\n\nSteps:\n\n1. Build first.\n2. Run the deploy script.\n3. Check the health page twice.\n"


def skill(ledger: RevisionLedger | None = None, **metadata: object) -> Skill:
    base = Skill(
        name="deploy-runbook",
        description="Deploys a website to production. Use when a release must go out.",
        body="# Deploy Runbook\n\n1. Run the deploy script.\n2. Check the health page.\n",
        metadata={"author": "ops", **metadata},
    )
    return base.with_ledger(ledger) if ledger is not None else base


def failed(**fields: object) -> Episode:
    data: dict[str, object] = {"situation": SITUATION, "outcome": "deploy broke: no build", "tools": TOOLS,
                               "skills": ["deploy-runbook"], "success": False}
    data.update(fields)
    return Episode(**data)  # type: ignore[arg-type]


def revision_reply(**fields: object) -> str:
    data: dict[str, object] = {"body": GOOD_BODY, "rationale": "Build before deploying.", "description_change": None}
    data.update(fields)
    return json.dumps(data)


def test_a_revision_bumps_the_ledger_and_keeps_the_rest() -> None:
    model = ScriptedTextModel([revision_reply(name="something-else")])
    result = SkillReviser(model, today=DAY).revise(skill(), failed(), "it forgot to build")
    assert isinstance(result, Revision)
    revised = result.skill
    assert revised.name == "deploy-runbook"  # the name never changes
    assert revised.body == GOOD_BODY.strip()
    assert revised.description == skill().description
    assert revised.metadata["author"] == "ops"
    assert revised.ledger == RevisionLedger(revision=1, revised_on=DAY, revisions_today=1)
    assert result.rationale == "Build before deploying."
    assert result.description_change is None
    assert model.calls == 1 and model.requests[0].max_tokens == 3000
    assert "it forgot to build" in model.prompts[0] and "deploy-runbook" in model.prompts[0]


def test_the_ledger_survives_yaml() -> None:
    result = SkillReviser(ScriptedTextModel([revision_reply()]), today=DAY).revise(
        skill(RevisionLedger(revision=3, revised_on="2025-05-30", revisions_today=2, origin="distilled")), failed()
    )
    assert isinstance(result, Revision)
    back = Skill.parse(result.skill.render())
    assert back.ledger == RevisionLedger(revision=4, revised_on=DAY, revisions_today=1, origin="distilled")
    assert back == result.skill


def test_lifetime_cap() -> None:
    model = ScriptedTextModel([revision_reply()])
    reviser = SkillReviser(model, today=DAY)
    assert reviser.revise(skill(RevisionLedger(revision=10)), failed()) == LifetimeCapReached(10, 10)
    result = reviser.revise(skill(RevisionLedger(revision=9)), failed())
    assert isinstance(result, Revision) and result.skill.ledger.revision == 10
    assert reviser.check(result.skill, failed()) == LifetimeCapReached(10, 10)
    assert model.calls == 1


def test_daily_cap_and_day_reset() -> None:
    today = {"value": DAY}
    model = ScriptedTextModel([revision_reply()] * 3)
    reviser = SkillReviser(model, today=lambda: today["value"])
    current = skill()
    for _ in range(2):
        result = reviser.revise(current, failed())
        assert isinstance(result, Revision)
        current = result.skill
    assert reviser.revise(current, failed()) == DailyCapReached(2, 2, DAY)
    assert model.calls == 2
    today["value"] = "2025-06-02"
    result = reviser.revise(current, failed())
    assert isinstance(result, Revision)
    assert result.skill.ledger == RevisionLedger(revision=3, revised_on="2025-06-02", revisions_today=1)


def test_refusals_cost_no_calls() -> None:
    model = ScriptedTextModel([revision_reply()])
    reviser = SkillReviser(model, today=DAY)
    assert reviser.revise(skill(), failed(success=True)) == EpisodeSucceeded()
    assert reviser.revise(skill(), failed(skills=["other"])) == SkillNotUsedInEpisode("deploy-runbook")
    assert model.calls == 0


def test_an_unknown_result_may_be_revised() -> None:
    assert SkillReviser(ScriptedTextModel(), today=DAY).check(skill(), failed(success=None)) is None


def test_a_stub_body_is_refused() -> None:
    with pytest.raises(ModelError, match="stub"):
        SkillReviser(ScriptedTextModel([revision_reply(body="# T\n\ntoo short")]), today=DAY).revise(skill(), failed())


def test_non_json_revision_is_an_error() -> None:
    with pytest.raises(ModelError):
        SkillReviser(ScriptedTextModel(["no"]), today=DAY).revise(skill(), failed())


def test_a_malformed_skill_md_is_an_error_not_a_refusal() -> None:
    model = ScriptedTextModel()
    with pytest.raises(InvalidSkillError):
        SkillReviser(model, today=DAY).revise("not a skill", failed())
    with pytest.raises(InvalidSkillError):
        SkillReviser(model, today=DAY).check("---\nname: Bad Name\ndescription: x\n---\nbody", failed())


def test_skill_md_text_is_accepted() -> None:
    result = SkillReviser(ScriptedTextModel([revision_reply()]), today=DAY).revise(skill().render(), failed())
    assert isinstance(result, Revision)


def test_description_changes_only_with_a_reason() -> None:
    new = "Deploys a website after building it. Use when a release must go out."
    half = revision_reply(description_change={"new": new, "why": ""})
    whole = revision_reply(description_change={"new": new, "why": "it never mentioned the build"})
    reviser = SkillReviser(ScriptedTextModel([half, whole]), today=DAY)
    unchanged = reviser.revise(skill(), failed())
    assert isinstance(unchanged, Revision) and unchanged.skill.description == skill().description
    changed = reviser.revise(skill(), failed())
    assert isinstance(changed, Revision) and changed.skill.description == new
    assert changed.description_change is not None and changed.description_change.why


def test_default_rationale_and_whole_document_body() -> None:
    whole_doc = skill().render().replace("Check the health page.", "Check the health page; build before deploy.")
    result = SkillReviser(ScriptedTextModel([revision_reply(body=whole_doc, rationale="")]), today=DAY).revise(
        skill(), failed()
    )
    assert isinstance(result, Revision)
    assert result.rationale == NO_RATIONALE
    assert not result.skill.body.startswith("---")
    assert "build before deploy" in result.skill.body


def test_revise_skill_saves_a_new_version_with_history(store: object) -> None:
    experience = ExperienceStore(store)  # type: ignore[arg-type]
    experience.save_skill(skill(RevisionLedger(origin="distilled")), origin="distilled")
    episode_id = experience.record(failed())
    result = revise_skill(experience, "deploy-runbook", episode_id, ScriptedTextModel([revision_reply()]),
                          complaint="forgot to build", save=True, today=DAY)
    assert isinstance(result, Revision)
    record = experience.get_skill("deploy-runbook")
    assert record.version == 2 and record.skill.ledger.revision == 1
    assert record.skill.ledger.origin == "distilled"
    history = experience.skill_history("deploy-runbook")
    assert [(h.version, h.origin) for h in history] == [(1, "distilled"), (2, "revised")]
    assert history[1].rationale == "Build before deploying." and history[1].episode_id == episode_id
    assert episode_id in record.source_episodes
    # A refusal costs no call and leaves the database alone.
    worked = experience.record(failed(success=True))
    refused = revise_skill(experience, "deploy-runbook", worked, ScriptedTextModel(), save=True, today=DAY)
    assert refused == EpisodeSucceeded()
    assert experience.get_skill("deploy-runbook").version == 2


def test_a_concurrent_change_is_refused(store: object) -> None:
    experience = ExperienceStore(store)  # type: ignore[arg-type]
    experience.save_skill(skill())
    episode_id = experience.record(failed())
    reviser = SkillReviser(ScriptedTextModel([revision_reply()]), today=DAY)
    result = reviser.revise(experience.get_skill("deploy-runbook").skill, failed())
    assert isinstance(result, Revision)
    experience.save_skill(skill(note="someone else"))  # version 2 now
    with pytest.raises(InvalidInputError, match="version"):
        reviser.save(result, experience, episode_id=episode_id, expected_version=1)


# ---- the text model helpers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  {"a": 1}\n', {"a": 1}),
        ('Sure:\n```json\n{"a": 2}\n```\nDone.', {"a": 2}),
        ('```\n{"a": 3}\n```', {"a": 3}),
        ('Here: {"a": {"b": 4}} — enjoy', {"a": {"b": 4}}),
        ("[1, 2]", None),
        ("no json at all", None),
        ("{broken", None),
        ("", None),
    ],
)
def test_extract_json(text: str, expected: object) -> None:
    from harness_mem.providers.textmodel import extract_json

    assert extract_json(text) == expected


def test_str_list() -> None:
    from harness_mem.providers.textmodel import str_list

    assert str_list(["a", " ", {"text": "b", "n": 1}, {"n": 2}, 3, None]) == ["a", "b", "3"]
    assert str_list("- one\n* two\n• three\n\n  four  ") == ["one", "two", "three", "four"]
    assert str_list(None) == [] and str_list({"a": "b"}) == []


def test_scripted_model_records_and_runs_dry() -> None:
    from harness_mem.providers.textmodel import TextModel

    model = ScriptedTextModel(["one"])
    model.push(ValueError("boom"))
    assert isinstance(model, TextModel)
    assert model.complete("p1", max_tokens=5) == "one"
    with pytest.raises(ValueError, match="boom"):
        model.complete("p2", max_tokens=6, json=True)
    with pytest.raises(ModelError, match="no reply left"):
        model.complete("p3", max_tokens=7)
    assert model.prompts == ["p1", "p2", "p3"] and model.calls == 3 and model.remaining == 0
    assert [(r.max_tokens, r.json) for r in model.requests] == [(5, False), (6, True), (7, False)]
