"""Episode text format (a contract: byte for byte), JSON, and the two run-time traces."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_mem.errors import InvalidInputError
from harness_mem.experience.episode import Episode, SkillUseTrace, ToolTrace

LEGACY = (
    "Situation: user asked to deploy the site\n"
    "Tools used: read_file, shell, shell\n"
    "Outcome: ran deploy.sh, site is live"
)


# ---- render: exact bytes ---------------------------------------------------------------------


def test_render_legacy_shape_exactly() -> None:
    ep = Episode("user asked to deploy the site", "ran deploy.sh, site is live", tools=["read_file", "shell", "shell"])
    assert ep.render() == LEGACY


def test_render_all_fields_exactly() -> None:
    ep = Episode(
        "  ship the release  ",
        "\ntagged and pushed\n",
        tools=["shell", "read_file"],
        skills=["release-runbook", "changelog-writing"],
        success=False,
        tags=["release"],
    )
    assert ep.render() == (
        "Situation: ship the release\n"
        "Tools used: shell, read_file\n"
        "Skills used: release-runbook, changelog-writing\n"
        "Result: failure\n"
        "Outcome: tagged and pushed"
    )


def test_render_no_tools_and_success() -> None:
    ep = Episode("simple question", "answered directly", success=True)
    assert ep.render() == "Situation: simple question\nTools used: (none)\nResult: success\nOutcome: answered directly"


def test_render_empty_outcome_keeps_the_prefix() -> None:
    assert Episode("s", "").render() == "Situation: s\nTools used: (none)\nOutcome: "


def test_render_keeps_a_multiline_situation_verbatim() -> None:
    ep = Episode("deploy the site\nthen check the health page", "done", tools=["shell"])
    assert ep.render() == (
        "Situation: deploy the site\nthen check the health page\nTools used: shell\nOutcome: done"
    )


def test_a_continuation_line_that_looks_like_a_field_is_escaped_with_one_space() -> None:
    ep = Episode("first\nOutcome: not really\n Tools used: nor this", "real outcome", tools=["shell"])
    assert ep.render() == (
        "Situation: first\n Outcome: not really\n  Tools used: nor this\nTools used: shell\nOutcome: real outcome"
    )
    assert Episode.parse(ep.render()) == ep


# ---- parse -------------------------------------------------------------------------------------


def test_legacy_text_round_trips_byte_for_byte() -> None:
    back = Episode.parse(LEGACY)
    assert back is not None
    assert back.situation == "user asked to deploy the site"
    assert back.tools == ["read_file", "shell", "shell"]  # duplicates kept
    assert back.outcome == "ran deploy.sh, site is live"
    assert back.skills == [] and back.success is None
    assert back.render() == LEGACY


def test_skills_and_result_round_trip_and_outcome_stays_last() -> None:
    ep = Episode("ship the release", "tagged and pushed", tools=["shell", "read_file"],
                 skills=["release-runbook", "changelog-writing"], success=False)
    text = ep.render()
    assert text.endswith("tagged and pushed")
    back = Episode.parse(text)
    assert back == ep
    assert not back.succeeded()


def test_parse_none_tools() -> None:
    back = Episode.parse(Episode("simple question", "answered directly").render())
    assert back is not None and back.tools == []


def test_not_an_episode_is_none() -> None:
    assert Episode.parse("just a note") is None
    assert Episode.parse("") is None
    assert Episode.parse("{not json") is None


def test_outcome_is_a_line_prefix_not_anywhere() -> None:
    text = "Situation: what does Outcome: mean here\nTools used: shell\nOutcome: explained it"
    back = Episode.parse(text)
    assert back is not None
    assert back.situation == "what does Outcome: mean here"
    assert back.outcome == "explained it"


def test_multiline_outcome_keeps_everything_after_its_prefix() -> None:
    ep = Episode("s" * 20, "line one\nTools used: in the outcome\nResult: also text", tools=["a"])
    assert Episode.parse(ep.render()) == ep


def test_old_multiline_text_recovers_the_whole_situation() -> None:
    text = "Situation: deploy the site\nthen check the health page\nTools used: shell\nOutcome: done"
    back = Episode.parse(text)
    assert back is not None and back.situation == "deploy the site\nthen check the health page"


def test_result_values() -> None:
    base = "Situation: s\nTools used: a\nResult: {}\nOutcome: o"
    assert Episode.parse(base.format("success")).success is True  # type: ignore[union-attr]
    assert Episode.parse(base.format("failure")).success is False  # type: ignore[union-attr]
    assert Episode.parse(base.format("maybe")).success is None  # type: ignore[union-attr]


def test_crlf_text_parses() -> None:
    back = Episode.parse(LEGACY.replace("\n", "\r\n"))
    assert back is not None
    assert back.situation == "user asked to deploy the site"
    assert back.tools == ["read_file", "shell", "shell"]


def test_trimmed_trailing_space_after_empty_outcome() -> None:
    back = Episode.parse("Situation: s\nTools used: a\nOutcome:")
    assert back is not None and back.outcome == "" and back.tools == ["a"]


def test_new_format_is_readable_by_the_old_parser() -> None:
    """A reader of the older format: the first line starting with each prefix, and everything after
    'Outcome: '. Other tools read episodes this way, so the newer fields must not break it."""
    text = Episode("ship the release", "tagged and pushed", tools=["shell"], skills=["release-runbook"],
                   success=True).render()

    def line_after(prefix: str) -> str:
        return next(line[len(prefix):].strip() for line in text.splitlines() if line.startswith(prefix))

    assert line_after("Situation: ") == "ship the release"
    assert line_after("Tools used: ") == "shell"
    assert text[text.find("Outcome: ") + len("Outcome: "):].strip() == "tagged and pushed"


# ---- JSON --------------------------------------------------------------------------------------


def test_old_json_still_reads() -> None:
    old = '{"situation":"s","tools":["a"],"outcome":"o","tags":[]}'
    ep = Episode.parse(old)
    assert ep == Episode("s", "o", tools=["a"])
    assert ep is not None and ep.skills == [] and ep.success is None


def test_json_round_trip_keeps_tags() -> None:
    ep = Episode("s", "o", tools=["a", "a"], tags=["x"], skills=["k"], success=True)
    assert Episode.from_dict(ep.to_dict()) == ep


# ---- construction ------------------------------------------------------------------------------


def test_names_are_cleaned_and_checked() -> None:
    ep = Episode("s", "o", tools=[" shell ", "", "shell"], tags=["a", " a ", ""])
    assert ep.tools == ["shell", "shell"]
    assert ep.tags == ["a"]
    with pytest.raises(InvalidInputError):
        Episode("s", "o", tools=["a,b"])
    with pytest.raises(InvalidInputError):
        Episode("s", "o", skills=["a\nb"])
    with pytest.raises(InvalidInputError):
        Episode("s", "o", tools="shell")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Episode("s", "o", success=1)  # type: ignore[arg-type]


# ---- property: parse(render(e)) == e -----------------------------------------------------------

_name_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters=",\n\r")
names = st.text(_name_chars, min_size=1, max_size=12).map(str.strip).filter(lambda s: s and s != "(none)")
# Multi-line text, unicode, and lines that mimic the format's own field prefixes.
field_lines = st.sampled_from(
    ["Tools used: x", "Outcome: y", "Result: success", "Skills used: a", " Outcome: z", "Outcome:", "Situation: q", ""]
)
free_text = st.lists(st.one_of(st.text(max_size=30), field_lines), max_size=5).map("\n".join)
episodes = st.builds(
    Episode,
    situation=free_text,
    outcome=free_text,
    tools=st.lists(names, max_size=6),
    skills=st.lists(names, max_size=3),
    success=st.sampled_from([None, True, False]),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # how fast inputs come is the machine's load
@given(episodes)
def test_parse_inverts_render(ep: Episode) -> None:
    assert Episode.parse(ep.render()) == ep


@given(episodes)
def test_render_is_stable(ep: Episode) -> None:
    back = Episode.parse(ep.render())
    assert back is not None and back.render() == ep.render()


# ---- traces ------------------------------------------------------------------------------------


def test_tool_trace_keeps_order_and_duplicates_and_drains() -> None:
    trace = ToolTrace()
    for name in ["read_file", "shell", " ", "shell"]:
        trace.note(name)
    assert trace.tools == ["read_file", "shell", "shell"]
    assert trace.drain() == ["read_file", "shell", "shell"]
    assert trace.tools == [] and len(trace) == 0


def test_skill_use_trace_dedups_in_first_use_order() -> None:
    trace = SkillUseTrace()
    trace.note_payload({"skill": "deploy"})
    trace.note_payload({"skills": ["lint", "deploy", "  ", "test"]})
    trace.note_payload("lint")
    trace.note_payload("")
    trace.note_payload(42)
    trace.note("  review ")
    assert trace.skills == ["deploy", "lint", "test", "review"]
    assert trace.drain() == ["deploy", "lint", "test", "review"]
    assert trace.skills == []
