"""SKILL.md documents: format, validation, lint, text helpers, similarity, and files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness_mem.errors import InvalidInputError, InvalidSkillError
from harness_mem.experience import skills as skills_mod
from harness_mem.experience.skills import (
    MAX_DESCRIPTION_BYTES,
    RevisionLedger,
    Skill,
    SkillIndex,
    clip_utf8,
    finalize_description,
    first_sentence,
    has_routing_cue,
    lint,
    lint_collection,
    near_duplicate_names,
    overlap_similarity,
    overlap_tokens,
    read_skill,
    scan_skills_dir,
    set_overlap,
    slugify,
    utf8_len,
    validate,
    write_skill_md,
)

BODY = "# Deploy Runbook\n\nShip the site.\n\n## Steps\n\n1. Build it.\n2. Upload it.\n3. Check it.\n"


def make(name: str = "deploy-runbook", description: str = "Ships a static site to production. Use when a deploy is asked for.",
         **fields: object) -> Skill:
    return Skill(name=name, description=description, body=fields.pop("body", BODY), **fields)  # type: ignore[arg-type]


# ---- format ------------------------------------------------------------------------------------


def test_render_exactly() -> None:
    skill = make(metadata={"experience": RevisionLedger(origin="distilled").to_dict()}, license="MIT")
    assert skill.render() == (
        "---\n"
        "name: deploy-runbook\n"
        "description: Ships a static site to production. Use when a deploy is asked for.\n"
        "license: MIT\n"
        "metadata:\n"
        "  experience:\n"
        "    revision: 0\n"
        "    revisions_today: 0\n"
        "    origin: distilled\n"
        "---\n"
        "# Deploy Runbook\n\nShip the site.\n\n## Steps\n\n1. Build it.\n2. Upload it.\n3. Check it.\n"
    )


def test_round_trip_with_every_field() -> None:
    skill = make(
        license="Apache-2.0",
        compatibility="needs rsync: and ssh",
        allowed_tools="shell read_file",
        metadata={"author": "me", "experience": {"revision": 3, "revised_on": "2025-01-02", "revisions_today": 1}},
        extra={"x-custom": ["a", "b"]},
        description="Déploie le site — « vite ». Use when: quoting matters #1",
    )
    assert Skill.parse(skill.render()) == skill


def test_parse_tolerates_bom_crlf_and_a_blank_line_after_front_matter() -> None:
    text = "\ufeff---\r\nname: a-skill\r\ndescription: Does a thing. Use when needed.\r\n---\r\n\r\n# Title\r\n\r\nBody.\r\n"
    skill = Skill.parse(text)
    assert skill.name == "a-skill"
    assert skill.body == "# Title\n\nBody."


def test_allowed_tools_as_a_list_reads_as_the_spec_string() -> None:
    skill = Skill.parse("---\nname: a\ndescription: d\nallowed-tools: [shell, read_file]\n---\nbody\n")
    assert skill.allowed_tools == "shell read_file"


@pytest.mark.parametrize(
    "text",
    [
        "name: a\ndescription: b\n",                       # no front matter
        "---\nname: a\ndescription: b\n",                  # not closed
        "---\nname: [a\n---\nbody",                        # bad YAML
        "---\n- a\n- b\n---\nbody",                        # not a mapping
        "---\nname: a\ndescription: b\nmetadata: 3\n---\n",  # metadata not a mapping
        "---\nname: {a: 1}\ndescription: b\n---\n",        # name not a string
    ],
)
def test_malformed_documents_raise(text: str) -> None:
    with pytest.raises(InvalidSkillError):
        Skill.parse(text)


def _billion_laughs() -> str:
    """387 bytes of YAML whose aliases expand to 9**7 strings."""
    lines = ["---", "name: lol", "description: d", "metadata:", "  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for before, name in zip("abcdef", "bcdefg", strict=True):
        lines.append(f"  {name}: &{name} [{', '.join([f'*{before}'] * 9)}]")
    return "\n".join([*lines, "---", "body", ""])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_billion_laughs(), "uses a YAML anchor or alias"),
        ("---\nname: a\ndescription: &d text\n---\n", "uses a YAML anchor or alias"),
        ("---\nname: &n a\ndescription: *n\n---\n", "uses a YAML anchor or alias"),
        ("---\nname: a\ndescription: " + "x" * (64 << 10) + "\n---\n", "front matter is 65,557 bytes; the limit is 65,536"),
        ("---\nname: a\ndescription: d\nmetadata: " + "[" * 70 + "]" * 70 + "\n---\n", "nested more than 64 levels"),
        ("---\nname: a\ndescription: d\nmetadata: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n---\n", "not valid YAML"),
    ],
)
def test_front_matter_that_would_cost_too_much_to_read_is_refused_at_once(text: str, message: str) -> None:
    # CPU time, which a busy machine does not stretch: reading any of these whole costs far more.
    started = time.process_time()
    with pytest.raises(InvalidSkillError, match=message):
        Skill.parse(text)
    assert time.process_time() - started < 1


def test_a_value_used_twice_is_written_out_twice_and_reads_back() -> None:
    shared = {"steps": [1, 2]}
    skill = make(metadata={"first": shared, "second": shared})
    assert "&" not in skill.render() and Skill.parse(skill.render()) == skill


def test_a_skill_file_past_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "SKILL.md").write_text(make(name="big", body="x" * (1 << 20)).render())
    with pytest.raises(InvalidSkillError, match="SKILL.md is larger than 1,048,576 bytes"):
        read_skill(tmp_path / "big")
    [found] = scan_skills_dir(tmp_path)
    assert found.skill is None and "larger than 1,048,576 bytes" in (found.error or "")


def test_ledger_survives_yaml_including_an_unquoted_date() -> None:
    ledger = RevisionLedger(revision=4, revised_on="2025-03-09", revisions_today=2, origin="distilled")
    skill = make().with_ledger(ledger)
    assert Skill.parse(skill.render()).ledger == ledger
    hand_written = "---\nname: a\ndescription: d\nmetadata:\n  experience:\n    revision: 2\n    revised_on: 2025-03-09\n---\nb"
    assert Skill.parse(hand_written).ledger == RevisionLedger(revision=2, revised_on="2025-03-09")


def test_ledger_rules() -> None:
    assert RevisionLedger.of({}) == RevisionLedger()
    assert RevisionLedger.of({"experience": "junk"}) == RevisionLedger()
    first = RevisionLedger().bumped("2025-01-01")
    assert first == RevisionLedger(1, "2025-01-01", 1)
    second = first.bumped("2025-01-01")
    assert (second.revision, second.revisions_today) == (2, 2)
    next_day = second.bumped("2025-01-02")
    assert (next_day.revision, next_day.revisions_today, next_day.revised_on) == (3, 1, "2025-01-02")
    assert RevisionLedger().to_dict() == {"revision": 0, "revisions_today": 0}


def test_with_ledger_keeps_other_metadata() -> None:
    skill = make(metadata={"author": "me", "experience": {"note": "keep", "revision": 1}})
    updated = skill.with_ledger(RevisionLedger(revision=2, revised_on="2025-01-01", revisions_today=1))
    assert updated.metadata["author"] == "me"
    assert updated.metadata["experience"]["note"] == "keep"
    assert updated.ledger.revision == 2


# ---- validation and lint -------------------------------------------------------------------------


def rules(findings: list[skills_mod.Finding]) -> set[str]:
    return {f.rule for f in findings}


def test_a_good_skill_is_lint_clean() -> None:
    assert lint(make(), dir_name="deploy-runbook") == []


@pytest.mark.parametrize("name", ["Deploy", "deploy_runbook", "-deploy", "deploy-", "deploy--runbook", "dépl",
                                  # control characters, a trailing newline above all (``$`` matches before it)
                                  "deploy\n", "deploy\r\n", "\ndeploy", "de\tploy", "deploy\x00", "deploy\x1b",
                                  "deploy\u2028"])
def test_bad_names(name: str) -> None:
    assert "name-format" in rules(validate(make(name=name)))
    with pytest.raises(InvalidSkillError, match="must be lowercase letters and digits"):
        skills_mod.check_skill(make(name=name))


def test_a_name_with_a_trailing_newline_never_becomes_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InvalidSkillError, match=r"name 'deploy\\n' must be"):
        write_skill_md(make(name="deploy\n"), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_name_length_and_directory() -> None:
    assert validate(make(name="a" * 64)) == []
    assert "name-length" in rules(validate(make(name="a" * 65)))
    assert "name-directory" in rules(validate(make(), dir_name="other"))
    assert "name-missing" in rules(validate(make(name="")))


def test_description_bytes_not_chars() -> None:
    assert validate(make(description="é" * 512)) == []            # 1024 bytes
    assert "description-length" in rules(validate(make(description="é" * 513)))  # 1026 bytes, 513 chars
    assert "description-missing" in rules(validate(make(description="  ")))


def test_compatibility_limit() -> None:
    assert validate(make(compatibility="x" * 500)) == []
    assert "compatibility-length" in rules(validate(make(compatibility="x" * 501)))


def test_lint_rules_r1_to_r4_and_unknown_fields() -> None:
    assert rules(lint(make(description="Deploys."))) >= {"R1", "R2"}
    assert "R3" in rules(lint(make(body="# T\n\nshort")))
    assert "R4" in rules(lint(make(description="Deploy runbook. Use when needed.")))
    assert "unknown-field" in rules(lint(make(extra={"tags": ["x"]})))
    severities = {f.rule: f.severity for f in lint(make(description="Deploys.", extra={"t": 1}))}
    assert severities["R1"] == "warning" and severities["R2"] == "info" and severities["unknown-field"] == "warning"


def test_cross_skill_near_duplicates() -> None:
    a = make("deploy-runbook")
    b = make("runbooks-deploy", description="Something else entirely about kittens. Use when petting.")
    c = make("deploy-runbok", description="Completely unrelated gardening advice. Use when planting.")
    d = make("site-release", description="Ships a static site to production servers. Use when a deploy is asked.")
    e = make("kitten-care", description="Feeding schedule for young cats. Use when adopting.")
    found = lint_collection([a, b, c, d, e])
    pairs = {(f.rule, f.skill) for f in found}
    assert ("near-duplicate-name", "deploy-runbook") in pairs  # vs b and c
    assert ("near-duplicate-description", "deploy-runbook") in pairs  # vs d
    assert not any(f.skill == "kitten-care" for f in found)
    assert near_duplicate_names("deploy-runbook", "deploy-runbooks")
    assert not near_duplicate_names("deploy-runbook", "review-code")


# ---- text helpers --------------------------------------------------------------------------------


def test_slugify() -> None:
    assert slugify("Deploy Runbook") == "deploy-runbook"
    assert slugify("  --Fix: the CI (again)!! ") == "fix-the-ci-again"
    assert slugify("Ｄｅｐｌｏｙ ｉｔ") == "deploy-it"
    long = slugify(" ".join(["word"] * 30))
    assert len(long) <= 64 and not long.endswith("-") and long.endswith("word")


def test_slugify_cjk_falls_back_to_a_stable_ascii_name() -> None:
    first = slugify("部署网站到生产环境")
    assert first.startswith("skill-") and len(first) == len("skill-") + 8
    assert slugify("部署网站到生产环境") == first
    assert slugify("检查数据库备份") != first
    assert skills_mod.NAME_PATTERN.match(first)
    assert slugify("部署网站", fallback=False) == ""
    assert slugify("   ") == ""


def test_first_sentence() -> None:
    assert first_sentence("Deploy the site. Then check.") == "Deploy the site"
    assert first_sentence("部署网站。然后检查") == "部署网站"
    assert first_sentence("v1.2 is out") == "v1.2 is out"
    clipped = first_sentence("word " * 100, limit=40)
    assert len(clipped) <= 40 and clipped.endswith("…")


def test_routing_cues() -> None:
    assert has_routing_cue("Does X. Use when Y.")
    assert has_routing_cue("Applies when the build breaks")
    assert not has_routing_cue("Does X.")


def test_finalize_repairs_a_terse_description() -> None:
    out = finalize_description("Deploys  sites", "Deploy the marketing site to production. Then verify.")
    assert out.startswith("Deploys sites. Use when deploy the marketing site to production.")
    assert has_routing_cue(out) and utf8_len(out) >= 60


def test_finalize_keeps_a_good_description() -> None:
    good = "Ships a static site to production and verifies it. Use when a deploy is requested."
    assert finalize_description(good, "whatever") == good


def test_finalize_empty_uses_fallback_then_situation() -> None:
    assert finalize_description("", "Rotate the TLS certificates.", fallback="Rotate Certs").startswith("Rotate Certs")
    assert finalize_description("   ", "Rotate the TLS certificates.").startswith("Rotate the TLS certificates")


@pytest.mark.parametrize("unit", ["a", "é", "咖", "🚀"])
def test_finalize_never_exceeds_1024_bytes_including_the_ellipsis(unit: str) -> None:
    long = "Use when needed. " + unit * 2000
    out = finalize_description(long, "situation")
    assert utf8_len(out) <= MAX_DESCRIPTION_BYTES
    assert out.endswith("…")
    out.encode("utf-8").decode("utf-8")  # a whole number of characters
    assert validate(make(description=out)) == []


def test_finalize_the_1024_byte_edge() -> None:
    exact = "Use when x. " + "a" * (1024 - len("Use when x. "))
    assert utf8_len(exact) == 1024
    assert finalize_description(exact, "s") == exact
    over = exact + "b"
    out = finalize_description(over, "s")
    assert utf8_len(out) <= 1024 and out.endswith("…")


def test_finalize_long_description_without_a_cue_keeps_the_appended_cue() -> None:
    out = finalize_description("x" * 3000, "Deploy the site.")
    assert utf8_len(out) <= 1024
    assert out.endswith("… Use when deploy the site.")
    assert "…" in out


@given(st.text(max_size=1500), st.text(max_size=400))
def test_finalize_is_always_valid(description: str, situation: str) -> None:
    out = finalize_description(description, situation)
    assert 0 < utf8_len(out) <= MAX_DESCRIPTION_BYTES
    assert out.strip() and has_routing_cue(out)
    assert "\n" not in out


def test_clip_utf8_counts_the_ellipsis() -> None:
    assert clip_utf8("abcdef", 6) == "abcdef"
    assert clip_utf8("abcdefg", 6) == "abc…"
    assert utf8_len(clip_utf8("é" * 10, 8)) <= 8


# ---- similarity ----------------------------------------------------------------------------------


def test_overlap_tokens() -> None:
    assert overlap_tokens("手冲咖啡") == {"手冲", "冲咖", "咖啡"}
    assert overlap_tokens("is a cat with the deploy") == {"deploy"}  # short words and stopwords dropped
    assert overlap_tokens("咖") == {"咖"}


def test_overlap_lopsided_duplicate_and_unrelated() -> None:
    skill = "deploy static site: Deploy a static site to production with rsync."
    situation = "Please deploy the static site for the marketing team to production using rsync and verify it loads"
    assert overlap_similarity(situation, skill) >= 0.6
    assert overlap_similarity("Summarise the quarterly sales report for finance", skill) < 0.3


def test_overlap_works_for_cjk() -> None:
    skill = "部署网站到生产环境"
    assert overlap_similarity("帮我把网站部署到生产环境然后检查", skill) >= 0.6
    assert overlap_similarity("帮我订一张去上海的机票", skill) < 0.3


def test_overlap_of_empty_is_zero() -> None:
    assert overlap_similarity("", "anything here") == 0.0
    assert set_overlap(frozenset(), frozenset({"a"})) == 0.0


words = st.sampled_from(["deploy", "static", "website", "rotate", "certs", "backup", "database", "kitten",
                         "review", "pull", "request", "部署", "网站", "生产环境", "咖啡"])
texts = st.lists(words, min_size=0, max_size=8).map(" ".join)


@given(st.lists(st.tuples(st.integers(0, 10_000).map(lambda i: f"s{i}"), texts), max_size=20), texts)
def test_index_agrees_with_brute_force(items: list[tuple[str, str]], query: str) -> None:
    index = SkillIndex(items)
    final: dict[str, str] = {}
    for name, description in items:  # a re-added name replaces the old one and goes last
        final.pop(name, None)
        final[name] = description
    best = index.best_match(query)
    scores = {n: overlap_similarity(query, skills_mod.skill_key_text(n, d)) for n, d in final.items()}
    top = max(scores.values(), default=0.0)
    if top == 0.0:
        assert best is None
    else:
        first = next(n for n, score in scores.items() if score == top)  # ties: the first indexed
        assert best == (first, pytest.approx(top))


def test_index_remove() -> None:
    index = SkillIndex([("deploy-site", "Deploy a static website")])
    assert index.best_match("deploy website") is not None
    index.remove("deploy-site")
    assert index.best_match("deploy website") is None and len(index) == 0


# ---- files ---------------------------------------------------------------------------------------


def test_write_and_read_back(tmp_path: Path) -> None:
    skill = make()
    path = write_skill_md(skill, tmp_path)
    assert path == tmp_path / "deploy-runbook" / "SKILL.md"
    assert read_skill(path.parent) == skill
    assert path.read_text(encoding="utf-8") == skill.render()
    assert [p.name for p in (tmp_path / "deploy-runbook").iterdir()] == ["SKILL.md"]  # no temp left


def test_write_refuses_an_invalid_skill_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(InvalidSkillError):
        write_skill_md(make(name="Bad Name"), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_write_restores_the_previous_file_when_the_read_back_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_skill_md(make(), tmp_path)
    before = first.read_bytes()

    def broken(path: object) -> Skill:
        raise InvalidSkillError("simulated")

    monkeypatch.setattr(skills_mod, "read_skill", broken)
    with pytest.raises(InvalidSkillError):
        write_skill_md(make(description="A new description that will not stick. Use when testing."), tmp_path)
    assert first.read_bytes() == before


def test_write_removes_a_new_directory_when_the_read_back_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skills_mod, "read_skill", lambda path: (_ for _ in ()).throw(InvalidSkillError("x")))
    with pytest.raises(InvalidSkillError):
        write_skill_md(make(), tmp_path)
    assert not (tmp_path / "deploy-runbook").exists()


@pytest.mark.parametrize("link", ["folder", "file", "temporary file"])
def test_write_never_follows_a_symbolic_link_out_of_the_target(tmp_path: Path, link: str) -> None:
    root, outside = tmp_path / "skills", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "SKILL.md").write_text("someone else's file\n")
    folder = root / "deploy-runbook"
    if link == "folder":
        folder.symlink_to(outside, target_is_directory=True)
    else:
        folder.mkdir()
        name = "SKILL.md" if link == "file" else f".SKILL.md.{os.getpid()}.tmp"
        (folder / name).symlink_to(outside / "SKILL.md")
    if link == "temporary file":  # a link at the temporary name is removed, never written through
        assert write_skill_md(make(), root).read_text(encoding="utf-8") == make().render()
    else:
        with pytest.raises(InvalidInputError, match="is a symbolic link, and skills are never written through one"):
            write_skill_md(make(), root)
    assert [p.name for p in outside.iterdir()] == ["SKILL.md"]
    assert (outside / "SKILL.md").read_text() == "someone else's file\n"


@pytest.mark.skipif(not skills_mod._BY_FOLDER, reason="no O_NOFOLLOW folder writes on this platform")
def test_a_folder_swapped_for_a_link_after_the_checks_is_refused_too(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "deploy-runbook").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidInputError, match="is a symbolic link"):
        skills_mod._atomic_write(tmp_path / "deploy-runbook" / "SKILL.md", b"x")
    assert list(outside.iterdir()) == []


def test_scan_skills_dir(tmp_path: Path) -> None:
    assert scan_skills_dir(tmp_path / "missing") == []
    write_skill_md(make(), tmp_path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "SKILL.md").write_text("no front matter", encoding="utf-8")
    (tmp_path / "not-a-skill").mkdir()
    (tmp_path / "stray.txt").write_text("x", encoding="utf-8")
    found = scan_skills_dir(tmp_path)
    assert [(f.dir_name, f.skill is not None) for f in found] == [("broken", False), ("deploy-runbook", True)]
    assert found[0].error


name_parts = st.sampled_from(["deploy", "deploys", "runbook", "runbok", "site", "sites", "review", "code", "ci"])
skill_names = st.lists(name_parts, min_size=1, max_size=3).map("-".join)


@given(st.lists(skill_names, max_size=12, unique=True), skill_names)
def test_similar_name_agrees_with_near_duplicate_names(existing: list[str], name: str) -> None:
    index = SkillIndex([(n, "a description") for n in existing])
    found = index.similar_name(name)
    expected = [n for n in existing if near_duplicate_names(name, n)]
    if expected:
        assert found in expected
    else:
        assert found is None


yaml_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3)),
    max_leaves=8,
)


@given(
    description=st.text(max_size=80),
    body=st.text(max_size=200),
    license=st.one_of(st.none(), st.text(max_size=20)),
    metadata=st.dictionaries(st.text(min_size=1, max_size=8), yaml_values, max_size=3),
)
def test_any_skill_round_trips_through_skill_md(description: str, body: str, license: str | None,
                                                metadata: dict[str, object]) -> None:
    skill = Skill(name="any-skill", description=description, body=body, license=license, metadata=metadata)
    assert Skill.parse(skill.render()) == skill
