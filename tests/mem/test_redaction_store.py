"""Nothing unredacted reaches the file: generated PII of every form the default detectors promise to
catch, written through the store's API, the CLI import, transcript capture, identity fields,
episodes and skills, must not appear in the database file, its -wal and -shm files, or any table
(FTS shadow tables included) -- not even cut in half by a truncation, and, once deleted, expired
and collected, or forgotten and purged, not even in its redacted form."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from engine_rows import sql, stored_text, written
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pii import (
    EVERY_FORM,
    FILLER,
    FORMS,
    PII,
    SAMPLES,
    SLOW_PATH,
    assert_absent,
    every_written_byte,
    spellings,
    straddling,
)

from harness_mem.cli import cli
from harness_mem.errors import WriteRefusedError
from harness_mem.redaction import Redactor
from harness_mem.store import MemoryStore

REDACTOR = Redactor.default(secret=b"proofs")

# The proofs about entries run on both engines: what reaches a SQLite file (every byte of it, its
# -wal and -shm), or every value of every table of a PostgreSQL store's schema (``written`` and
# ``stored_text`` in tests/engine_rows.py). ``store`` is conftest's ``engine_store``; a proof that
# makes a store per generated example makes it at ``fresh_target()``. Episodes and skills keep their
# tables in SQLite: their proofs stay there.


@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store


def distinct(value: str) -> str:
    """What a pseudonym is keyed by, near enough: "4111 1111 1111 1111" and "4111111111111111" are
    one card, and as identity fields they are one session."""
    return "".join(ch for ch in value.lower() if ch.isalnum())


# ---- the generated values mean something -----------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=EVERY_FORM, before=FILLER, after=FILLER)
def test_every_form_is_redacted_in_context(values: list[str], before: str, after: str) -> None:
    """The proofs below prove something only if each generated value is one the redactor finds,
    in the contexts they write it in (words, punctuation, CJK text glued on)."""
    for name, value in zip(FORMS, values, strict=True):
        out = REDACTOR.scrub(f"{before}{value}{after}")
        assert out.counts, name
        assert_absent([value], out.text.encode(), heads=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=1, max_size=5, unique=True), before=FILLER, after=FILLER)
def test_api_writes_never_store_raw_pii(fresh_target: Callable[[], str], values: list[str],
                                        before: str, after: str) -> None:
    db = fresh_target()
    with MemoryStore(db, embedder=None) as store:
        for i, value in enumerate(values):
            store.add(f"{before}{value}{after}", role="user", session=f"s{i}", tags=[f"who:{value}"],
                      source=f"chat with {value}", metadata={"raw": value, "nested": {"list": [value]}})
        store.add_many([{"text": f"batch {value} end"} for value in values])
        assert store.count() == 2 * len(values)
    assert_absent(values, written(db))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=1, max_size=5, unique=True), before=FILLER)
def test_cli_import_never_stores_raw_pii(tmp_path_factory: pytest.TempPathFactory, fresh_target: Callable[[], str],
                                         values: list[str], before: str) -> None:
    db, source = fresh_target(), tmp_path_factory.mktemp("cli") / "in.jsonl"  # the input is the caller's
    source.write_text("".join(
        json.dumps({"text": f"{before}{value}", "role": "user", "session": "s", "tags": [value],
                    "metadata": {"v": value}, "extra_field": value}, ensure_ascii=False) + "\n"
        for value in values
    ), encoding="utf-8")
    result = CliRunner().invoke(cli, ["--db", db, "--embedder", "none", "import", str(source)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert_absent(values, written(db))


def test_counts_are_recorded_per_entry_and_in_stats(store: MemoryStore) -> None:
    entry = store.add("mail ada@example.com or bob@example.org, phone 13800138000", tags=["x@y.io"])
    assert entry.redactions == {"EMAIL": 3, "PHONE": 1}
    assert store.get(entry.id).redactions == {"EMAIL": 3, "PHONE": 1}
    assert store.add("nothing sensitive here").redactions == {}
    assert store.stats()["redacted"] == {"EMAIL": 3, "PHONE": 1}


def test_turning_redaction_off_is_explicit_and_recorded(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None, redactor=None) as raw:
        entry = raw.add("ada@example.com")
        assert entry.content == "ada@example.com" and entry.redactions is None
        assert raw.stats()["written_without_redaction"] == 1


def test_the_hash_pseudonym_is_keyed_per_database_and_stable(fresh_target: Callable[[], str]) -> None:
    def pseudonyms(path: str) -> list[str]:
        with MemoryStore(path, embedder=None) as store:
            [(secret,)] = sql(store, "SELECT value FROM settings WHERE key = 'redaction.secret'")
            store.redactor = Redactor.default(secret=secret).set_action("EMAIL", "hash")  # type: ignore[arg-type]
            return [store.add("write to ada@example.com").content for _ in range(2)]

    a = fresh_target()
    first, again = pseudonyms(a), pseudonyms(a)
    other = pseudonyms(fresh_target())
    assert first[0] == first[1] == again[0]  # the same value links across entries and opens
    assert first[0] != other[0]  # another file, another key
    # Nothing of the address is left: only its label and a keyed hash (whose hex digits may spell
    # "ada" by chance: a fifth of a percent of keys do, so the text around it is what is checked).
    assert re.fullmatch(r"write to <EMAIL:[0-9a-f]{12}>", first[0]), first[0]


def test_a_hygiene_store_refuses_what_must_not_be_kept(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None, redactor=Redactor.hygiene()) as store:
        with pytest.raises(WriteRefusedError, match="refuses to store this entry"):
            store.add("the api_key=sk-proj-abcdefghijklmnopqrstuvwxyz123456 is live")
        assert store.count() == 0
        reported: list[int] = []
        store.add_many([{"text": "fine"}, {"text": "costs $500"}], on_invalid=lambda i, e: reported.append(i))
        assert reported == [1] and store.count() == 1


@pytest.mark.parametrize("text", [
    "released 2024-05-01T12:30:00Z as v2.10.4 (commit 3f9a2c1, 9fceb02d0ae598e95dc970b74767f19372d61af8)",
    "order 1234567890123456 shipped at 1717171717123, build 3.11.7",
    "request 550e8400-e29b-41d4-a716-446655440000 took 12:30:45",
])
def test_false_positives_stay_untouched_through_the_store(store: MemoryStore, text: str) -> None:
    entry = store.add(text)
    assert entry.content == text and entry.redactions == {}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=1, max_size=4, unique=True), before=FILLER)
def test_transcript_capture_never_stores_raw_pii(fresh_target: Callable[[], str], values: list[str],
                                                 before: str) -> None:
    from harness_mem.experience.transcript import TranscriptRecorder

    db = fresh_target()
    with MemoryStore(db, embedder=None) as store:
        with TranscriptRecorder(store, session="s-1") as recorder:
            for value in values:
                recorder.note_user(f"{before}{value}")
                recorder.note_tool("lookup", {"contact": value, "note": f"found {value}"})
                recorder.note_assistant(f"noted {value} ")
        assert store.count(session="s-1") == 3 * len(values)
    assert_absent(values, written(db))


def test_a_credential_inside_a_structured_tool_result_is_scrubbed_before_it_becomes_json(store: MemoryStore) -> None:
    from harness_mem.experience import TranscriptRecorder

    # Written as JSON first, '"password": "…"' inside a string value would read '\\"password\\": \\"…\\"'.
    with TranscriptRecorder(store, session="s") as recorder:
        recorder.note_tool("config", {"body": '{"password": "Xq7Lm2Vb9Nz4", "user": "ada"}'})
    turn = next(store.list(session="s"))
    assert "Xq7Lm2Vb9Nz4" not in turn.content and "<SECRET>" in turn.content
    assert turn.redactions == {"SECRET": 1}


# ---- identity fields --------------------------------------------------------------------------


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=2, max_size=4, unique_by=distinct))
def test_identity_fields_are_stored_as_pseudonyms_and_found_by_their_raw_value(
        fresh_target: Callable[[], str], values: list[str]) -> None:
    db = fresh_target()
    with MemoryStore(db, embedder=None, namespace=f"tenant {values[0]}") as store:
        for value in values:
            store.add("a plain note about the deploy", id=f"id {value}", session=f"user {value}",
                      role=f"speaker {value}")
        store.add_many([{"text": "imported turn", "id": f"import {value}", "session": f"user {value}",
                         "role": "user", "namespace": f"tenant {values[0]}"} for value in values])
        for value in values:  # every lookup by the raw value finds its own entries, and only those
            assert store.get(f"id {value}").content == "a plain note about the deploy"
            assert store.count(session=f"user {value}") == 2
            stored = store.get(f"id {value}").session
            assert [e.session for e in store.list(role=f"speaker {value}")] == [stored]
            assert {hit.entry.session for hit in store.recall("deploy", session=f"user {value}")} == {stored}
            assert store.get(f"import {value}").role == "user"
        assert len({e.session for e in store.list()}) == len(values)  # two sessions never merge
        assert all(e.redactions for e in store.list(kind="turn"))  # what the identity fields held is counted
        assert store.delete(f"id {values[0]}") and store.count() == 2 * len(values) - 1
    with MemoryStore(db, embedder=None, namespace=f"tenant {values[0]}") as again:  # the same key next time
        assert again.count(session=f"user {values[1]}") == 2
    assert_absent(values, written(db))


@SLOW_PATH
@given(values=EVERY_FORM)
def test_every_form_in_every_identity_field(fresh_target: Callable[[], str], values: list[str]) -> None:
    db = fresh_target()
    # The number keeps two values that pseudonymise alike (one card spaced and dashed) apart.
    items = [{"text": "a plain note about the deploy", "id": f"id{i} {v}", "session": f"user{i} {v}",
              "role": f"speaker{i} {v}", "tags": [f"who {v}"], "source": f"chat with {v}"}
             for i, v in enumerate(values)]
    with MemoryStore(db, embedder=None, namespace=f"tenant {values[0]}") as store:
        store.add_many(items[: len(items) // 2])
        for item in items[len(items) // 2:]:
            store.add(item.pop("text"), **item)
        for i, v in enumerate(values):
            entry = store.get(f"id{i} {v}")
            assert store.count(session=f"user{i} {v}") == 1
            assert [e.id for e in store.list(role=f"speaker{i} {v}")] == [entry.id]
            assert entry.redactions
        assert store.delete(f"id0 {values[0]}") and store.count() == len(values) - 1
    assert_absent(values, written(db))


def test_the_cli_stores_a_session_address_as_its_pseudonym_and_gives_it_back(engine_target: str) -> None:
    def run(*args: str, identity_key: bool = True) -> str:
        result = CliRunner(env={"HARNESS_MEM_CONFIG": None if identity_key else "/nonexistent/config"}).invoke(
            cli, ["--db", engine_target, "--embedder", "none", *args], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return result.stdout

    entry_id = run("add", "met about the launch", "--session", "user-ada@example.com", "--role", "user").strip()
    listed = [json.loads(line) for line in run("list", "--session", "user-ada@example.com", "--json").splitlines()]
    assert [e["id"] for e in listed] == [entry_id]
    assert listed[0]["session"] == "user-ada@example.com"  # the identity key opens what the file holds sealed
    assert run("list", "--session", "user-bob@example.com", "--json") == ""
    assert_absent(["ada@example.com", "user-ada"], stored_text(engine_target))
    # Where the key is not, the memory still reads, its session as stored. The pseudonym is hex:
    # "ada" can occur in it by chance (c1adad…), the address cannot.
    [keyless] = [json.loads(line) for line in run("list", "--json", identity_key=False).splitlines()]
    assert re.fullmatch(r"<EMAIL:[0-9a-f]{12}>", keyless["session"]) and keyless["content"] == "met about the launch"


def test_without_redaction_identity_fields_are_stored_as_given(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None, redactor=None, namespace="ada@example.com") as raw:
        raw.add("x", session="user-ada@example.com", id="ada@example.com")
        assert raw.get("ada@example.com").session == "user-ada@example.com"
        assert raw.namespace == "ada@example.com"


def test_pseudonymising_is_a_fixed_point_and_keeps_what_is_not_sensitive() -> None:
    redactor = Redactor.default(secret="k")
    for value in ["user-ada@example.com", "run 13800138000 / AKIAIOSFODNN7EXAMPLE", "plain-id", "costs $500"]:
        once = redactor.pseudonymise(value).text
        assert redactor.pseudonymise(once).text == once
    assert redactor.pseudonymise("plain-id").text == "plain-id"
    assert redactor.pseudonymise("costs $500").text == "costs $500"  # kept by the policy: kept here too
    a, b = redactor.pseudonymise("ada@example.com").text, redactor.pseudonymise("bob@example.com").text
    assert a != b and a == redactor.pseudonymise("ADA@example.com").text  # the e-mail's normal form
    assert redactor.pseudonymise("AKIAIOSFODNN7EXAMPLE").text.startswith("<API_KEY:")  # never a shared label


# ---- experience: episodes, consolidation, skills ------------------------------------------------


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=1, max_size=3, unique=True))
def test_episodes_and_consolidation_never_store_raw_pii(tmp_path_factory: pytest.TempPathFactory,
                                                        values: list[str]) -> None:
    from harness_mem.experience import Episode, ExperienceStore, consolidate

    db = tmp_path_factory.mktemp("experience") / "memory.db"
    with MemoryStore(db, embedder=None) as store:
        experience = ExperienceStore(store)
        for value in values:
            stored = experience.save(
                Episode(situation=f"customer {value} asked for a refund", outcome=f"refunded {value}",
                        tools=["lookup"], tags=[f"customer {value}"], success=True),
                id=f"episode {value}", session=f"run {value}",
            )
            assert experience.get(f"episode {value}").id == stored.id
            assert experience.get(stored.id).episode.tags == stored.episode.tags
            store.add_many([
                {"text": f"I am {value}, please help", "role": "user", "session": f"chat {value}"},
                {"text": f"Done for {value}.", "role": "assistant", "session": f"chat {value}",
                 "tags": ["result:success"]},
            ])
            report = consolidate(store, session=f"chat {value}")
            assert [s.action for s in report.sessions] == ["created"]
        assert experience.count() == 2 * len(values)
        assert experience.delete(f"episode {values[0]}")
    assert_absent(values, every_written_byte(db.parent))


def test_skills_saved_imported_and_revised_never_store_raw_pii(tmp_path: Path) -> None:
    from harness_mem.experience import ExperienceStore, Skill

    values = [str(v) for v in SAMPLES]  # plain strings: YAML front matter cannot hold a str subclass
    db = tmp_path / "store" / "memory.db"  # apart from the SKILL.md given as input
    db.parent.mkdir()
    source = tmp_path / "incoming" / "refund-flow"
    source.mkdir(parents=True)
    source.joinpath("SKILL.md").write_text(Skill(
        name="refund-flow", description=f"Use when a refund is asked for by {values[0]}.",
        body="\n".join(f"- call {value} first" for value in values), metadata={"owner": values[1]},
    ).render(), encoding="utf-8")
    with MemoryStore(db, embedder=None) as store:
        experience = ExperienceStore(store)
        report = experience.import_skills(tmp_path / "incoming")
        assert report.saved == ["refund-flow"]
        saved = experience.save_skill(Skill(
            name="escalation", description=f"Use when {values[3]} shows up in a log line.",
            body=f"Page {values[4]} and {values[5]}.", license=f"ask {values[0]}",
            compatibility=f"needs {values[6]}", extra={"contact": values[7]},
        ), rationale=f"written after talking to {values[8]}", episode_id=f"episode {values[9]}")
        assert saved.version == 1 and "<PHONE>" in saved.skill.body
        revised = experience.save_skill(
            Skill(name="escalation", description="Use when an alert fires.", body=f"Page {values[10]} now."),
            origin="revised", rationale=f"it misled {values[11]}",
        )
        assert revised.version == 2
        history = experience.skill_history("escalation")
        assert [v.origin for v in history] == ["saved", "revised"]
        assert history[0].episode_id is not None and history[0].episode_id.startswith("episode <")
        # Importing the same tree again is idempotent: the stored (redacted) document is unchanged.
        assert experience.import_skills(tmp_path / "incoming").unchanged == ["refund-flow"]
    assert_absent(SAMPLES, every_written_byte(db.parent))


@SLOW_PATH
@given(values=EVERY_FORM)
def test_skills_with_every_form_never_store_raw_pii(tmp_path_factory: pytest.TempPathFactory,
                                                    values: list[str]) -> None:
    from harness_mem.experience import ExperienceStore, Skill

    plain = [str(v) for v in values]  # YAML front matter cannot hold a str subclass
    root = tmp_path_factory.mktemp("skills")
    db, source = root / "store" / "memory.db", root / "incoming" / "contact-flow"  # the input apart
    source.mkdir(parents=True)
    db.parent.mkdir()
    source.joinpath("SKILL.md").write_text(Skill(
        name="contact-flow", description=f"Use when a customer like {plain[0]} writes in.",
        body="\n".join(f"- check {v}" for v in plain), metadata={"owner": plain[1], "all": " | ".join(plain)},
    ).render(), encoding="utf-8")
    with MemoryStore(db, embedder=None) as store:
        experience = ExperienceStore(store)
        assert experience.import_skills(root / "incoming").saved == ["contact-flow"]
        saved = experience.save_skill(Skill(
            name="escalation", description=f"Use when {plain[2]} shows up in a log line.",
            body="\n".join(f"Page {v}." for v in plain), license=f"ask {plain[3]}",
            compatibility=f"needs {plain[4]}", extra={"contact": plain[5], "all": plain},
        ), rationale=" / ".join(plain), episode_id=f"episode {plain[6]}")
        revised = experience.save_skill(
            Skill(name="escalation", description="Use when an alert fires.", body=" / ".join(plain)),
            origin="revised", rationale=f"it misled {plain[7]}",
        )
        assert (saved.version, revised.version) == (1, 2)
    assert_absent(values, every_written_byte(db.parent))


# ---- truncation: a cut through a value leaves nothing of it --------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=PII, data=st.data())
def test_a_value_straddling_a_transcript_or_episode_cut_leaves_no_fragment(
        tmp_path_factory: pytest.TempPathFactory, value: str, data: st.DataObject) -> None:
    """A turn is cut at 2,000 characters, and so are an episode's situation and outcome: the value
    the cut goes through must be redacted whole first, or its head reaches the file unrecognised."""
    from harness_mem.experience import DEFAULT_MAX_CHARS, ExperienceStore, TranscriptRecorder, consolidate

    offset = data.draw(st.integers(1, len(value) - 1), label="offset")
    # A long tail: once the value is redacted (a label is shorter), the turn is still over the cut.
    text = straddling(value, DEFAULT_MAX_CHARS, offset) + " and the rest of the turn" + " more" * 400
    db = tmp_path_factory.mktemp("cut") / "memory.db"
    with MemoryStore(db, embedder=None) as store:
        with TranscriptRecorder(store, session="cut") as recorder:
            recorder.note_user(text)
            recorder.note_tool("lookup", text)
            recorder.note_assistant(f"done: {text}")
        turns = list(store.list(session="cut"))
        assert len(turns) == 3 and all("chars truncated]" in t.content for t in turns)
        report = consolidate(store, session="cut")  # the episode's situation and outcome are cut too
        assert [s.action for s in report.sessions] == ["created"]
        assert ExperienceStore(store).count() == 1
    assert_absent([value], every_written_byte(db.parent), heads=True)


# ---- deleted, expired, forgotten: gone, redacted form included ------------------------------------------

PAST = "2020-01-01T00:00:00Z"


@SLOW_PATH
@given(values=EVERY_FORM)
def test_deleted_expired_and_forgotten_pii_leaves_no_trace(fresh_target: Callable[[], str],
                                                            values: list[str]) -> None:
    """Every value is stored (redacted) in one of four ways and then removed: deleted, or expired,
    and collected by ``gc``; forgotten, or superseded and then forgotten, and purged. Afterwards
    neither the value nor the text that was stored for it (content, session, tags) is in any byte
    of the file, its -wal or -shm."""
    from fake_embedder import HashedEmbedder

    db = fresh_target()
    collected: list[str] = []  # what was stored for the deleted and expired entries
    purged: list[str] = []  # ... and for the forgotten ones
    with MemoryStore(db, embedder=HashedEmbedder()) as store:
        store.add_many([{"text": f"filler note number {i} about the weekly deploy", "session": "kept", "role": "user"}
                        for i in range(50)])
        kept = store.add("this note stays")
        to_forget, to_delete = [], []
        for i, value in enumerate(values):
            # Each stored text is its own ("<PHONE>" alone is in many): a number in every field.
            text, session, tag = f"zanzibar{i:03d}quokka wrote {value} today", f"user{i:03d} {value}", f"who{i:03d} {value}"
            if i % 4 == 0:
                entry = store.add(text, session=session, role="user", tags=[tag])
                to_delete.append(entry.id)
            elif i % 4 == 1:
                entry = store.add(text, session=session, role="user", metadata={"v": value}, expires_at=PAST)
            else:
                entry = store.get(store.remember(text, tags=[tag], session=session).id)
                to_forget.append(entry.id)
            # As stored: the session and tags as their pseudonyms (reads give them back as written).
            stored = [entry.content, store.scope.key(entry.session) or "", *store.scope.tags(list(entry.tags))]
            if i % 4 == 3:  # corrected: the correction stays (with the session and tags), the old text goes
                store.supersede(entry.id, f"corrected note {i}")
                stored = [entry.content]
            (collected if i % 4 < 2 else purged).extend(stored)
        assert_absent(values, stored_text(db))  # never stored raw in the first place
        found = stored_text(db).lower()
        assert all(any(s in found for s in spellings(text)) for text in collected + purged)  # the proof can fail

        assert all(store.delete(entry_id) for entry_id in to_delete)
        report = store.gc()
        assert report["expired_purged"] == len(values[1::4]) and report["wal_truncated"]
        assert_absent(collected, stored_text(db))

        assert sum(store.forget(entry_id) for entry_id in to_forget) == len(to_forget)
        assert store.purge() == len(to_forget)
        assert_absent(purged, stored_text(db))
        assert store.get(kept.id).content == "this note stays"
        assert {e.content for e in store.list(kind="note")} >= {f"corrected note {i}" for i in range(3, len(values), 4)}
    assert_absent([*values, *collected, *purged], written(db))
