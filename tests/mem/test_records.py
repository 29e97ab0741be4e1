"""Records at the library's edge: pydantic models with dataclass manners, one-line errors and JSON schemas."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from harness_mem import Entry, Episode, Hit, ImportLine, MemoryStore, Settings, json_schema, schemas
from harness_mem.cli import cli
from harness_mem.errors import InvalidInputError, InvalidSkillError
from harness_mem.experience.skills import Skill
from harness_mem.jsonl import export_jsonl, import_jsonl
from harness_mem.schema import MODELS

# The tests that write and read a store run on both engines: ``store`` is conftest's ``engine_store``.


@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store

FIELDS = {
    "entry": {"id", "content", "kind", "namespace", "role", "session", "tags", "source", "metadata", "created_at",
              "expires_at", "content_hash", "redactions", "superseded_by", "superseded_at", "updated_at",
              "ttl_days"},
    "hit": set(),  # flat, one shape for the API, recall --json and MCP: set below
    "import-line": {"content", "text", "role", "session", "kind", "id", "created_at", "timestamp", "tags", "source",
                    "metadata", "expires_at", "ttl_days", "updated_at", "redactions", "namespace"},
    "filters": {"kind", "role", "session", "session_prefix", "tags", "any_tags", "since", "until",
                "include_superseded", "derived", "as_of", "exclude_sessions", "exclude_kinds", "exclude_tags",
                "metadata"},
    "episode": {"situation", "outcome", "tools", "tags", "skills", "success"},
    "skill-front-matter": {"name", "description", "license", "compatibility", "metadata", "allowed-tools"},
    "settings": {"HARNESS_MEM_DB", "HARNESS_MEM_HOME", "HARNESS_MEM_NAMESPACE", "HARNESS_MEM_EMBEDDER",
                 "HARNESS_MEM_MODEL_URL", "HARNESS_MEM_MODEL", "HARNESS_MEM_API_KEY", "XDG_DATA_HOME",
                 "HARNESS_MEM_EMBED_RUNTIME", "HARNESS_MEM_CACHE_DIR", "XDG_CACHE_HOME", "HARNESS_MEM_CONFIG",
                 "XDG_CONFIG_HOME", "HARNESS_MEM_IDENTITY_KEY"},
    "stats": {"path", "namespace", "entries", "by_kind", "by_role", "sessions", "expired_pending_purge", "redacted",
              "written_without_redaction", "namespaces", "schema_version", "file_bytes", "bytes_per_entry",
              "largest_sessions", "sizes"},
    "sync-op": {"v", "op", "ns", "id", "hlc", "device", "body"},
}
FIELDS["hit"] = FIELDS["entry"] | {"score", "snippet", "components", "context", "sources", "truncated"}


def test_every_public_schema_is_valid_json_schema_and_names_its_fields() -> None:
    found = schemas()
    assert set(found) == set(FIELDS) == set(MODELS)
    for name, schema in found.items():
        Draft202012Validator.check_schema(schema)
        assert set(schema["properties"]) == FIELDS[name], name
        assert json.loads(json.dumps(schema)) == schema  # plain JSON
    with pytest.raises(InvalidInputError, match="no schema named 'entries' — use one of: entry, hit"):
        json_schema("entries")


def test_the_schemas_describe_what_the_library_writes_and_reads(store: MemoryStore) -> None:
    entry = store.add("we chose argon2id", tags=["decision"], ttl_days=3, metadata={"n": 1})
    Draft202012Validator(json_schema("entry")).validate(entry.to_dict())
    [hit] = store.recall("argon2id", explain=True)
    Draft202012Validator(json_schema("hit")).validate(hit.model_dump(mode="json"))
    out = io.StringIO()
    export_jsonl(store, out)
    line = Draft202012Validator(json_schema("import-line"))
    for exported in out.getvalue().splitlines():
        line.validate(json.loads(exported))  # an export is importable, by the schema too
    line.validate({"text": "a turn", "timestamp": 1714557600, "tags": "one"})
    for bad in ({"tags": ["x"]}, {"text": "x", "tags": [1]}, {"text": "x", "kind": "diary"}, {"text": 5}):
        assert not line.is_valid(bad), bad
        with pytest.raises(InvalidInputError):
            ImportLine.check(bad)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"text": "x", "tags": {"a": 1}}', "tags must be a list of strings, not dict"),
        ('{"text": "x", "tags": ["ok", 7]}', "tags must be strings, got 7"),
        ('{"text": "x", "role": 5}', "role must be a string, not int"),
        ('{"text": "x", "namespace": ["a"]}', "namespace must be a string, not list"),
        ('{"text": "x", "source": false}', "source must be a string, not bool"),
        ('{"content": 5}', "an entry needs its text as a string in 'content' (or 'text')"),
        ('{"text": " \\t\\u001c "}', "an entry's content cannot be empty"),
        ('{"text": "x", "id": "  "}', "an id must be a non-empty string, not '  '"),
        ('{"text": "x", "id": 12}', "an id must be a non-empty string, not 12"),
        ('{"text": "x", "kind": "diary"}', "unknown kind 'diary' — use one of: note, turn, episode, fact, summary"),
        ('{"text": "x", "metadata": "m"}', "metadata must be a JSON object, not str"),
        ('{"text": "x", "ttl_days": "3"}', "ttl_days must be a positive number, not '3'"),
        ('{"text": "x", "ttl_days": 0}', "ttl_days must be a positive number, not 0"),
        ('{"text": "x", "redactions": {"EMAIL": "one"}}', 'redactions must be an object of counts, like {"EMAIL": 1}'),
        ('{"text": "x", "timestamp": "last tuesday-ish"}', "cannot read a time from 'last tuesday-ish'"),
        ('{"text": "x", "expires_at": "10000-01-01"}', "cannot read a time from '10000-01-01'"),
        ('{"text": "x", "role": "a\\ud800"}', "role is not valid Unicode (it contains a lone surrogate)"),
    ],
)
def test_a_bad_import_line_is_one_line_that_names_the_field(store: MemoryStore, line: str, reason: str) -> None:
    report = import_jsonl(store, ['{"id": "a", "text": "kept"}', line], workers=0)
    assert [(e.line, e.reason[: len(reason)]) for e in report.errors] == [(2, reason)], report.errors
    assert "\n" not in report.errors[0].reason and "pydantic" not in report.errors[0].reason
    assert report.added == 1


def test_the_first_bad_field_of_a_line_is_the_one_reported(store: MemoryStore) -> None:
    report = import_jsonl(store, ['{"text": "", "kind": "diary", "tags": 5}'], workers=0)
    assert [str(e) for e in report.errors] == ["line 1: an entry's content cannot be empty (or only spaces and control characters)"]


def test_entries_and_hits_keep_their_dataclass_manners(store: MemoryStore) -> None:
    made = Entry("e1", "text", tags=["a"], created_at="2024-05-01T12:00:00Z")
    assert made.tags == ("a",) and made.created_at == datetime(2024, 5, 1, 12, tzinfo=UTC)
    with pytest.raises(Exception, match="frozen"):
        made.content = "changed"  # type: ignore[misc]
    assert made.model_copy(update={"content": "other"}).content == "other" and made.content == "text"
    assert Entry.from_dict(made.to_dict()) == made
    hit = Hit(made, 0.5)
    assert (hit.entry.id, hit.score, hit.snippet) == ("e1", 0.5, "")
    assert hit.to_dict()["score"] == 0.5 and hit.to_dict()["id"] == "e1"
    with pytest.raises(InvalidInputError, match="unknown field 'colour'"):
        Entry("e2", "x", colour="red")
    with pytest.raises(InvalidInputError, match="score must be a number, not str"):
        Hit(made, "high")
    with pytest.raises(TypeError, match="at most 5 positional"):
        Hit(made, 0.5, "", None, None, "extra")
    stored = store.add("we chose argon2id", tags=["decision"], metadata={"n": 1})
    assert store.get(stored.id) == stored == Entry.from_dict(stored.to_dict())
    assert store.recall("argon2id")[0].entry == stored


def test_rows_read_back_are_not_validated_again(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.add("first", tags=["t"])
    store.add("second", role="user", session="s")

    class Refuse:
        def validate_python(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("a stored row was validated again")

    monkeypatch.setattr(Entry, "__pydantic_validator__", Refuse())
    listed = list(store.list())
    assert [e.content for e in listed] == ["first", "second"] and listed[0].tags == ("t",)
    assert [h.entry.content for h in store.recall("second")] == ["second"]
    assert listed[1].model_dump()["session"] == "s"  # a trusted record is a whole record
    assert not ImportLine.__pydantic_custom_init__  # validation does not run twice through __init__


def test_episodes_are_records_with_their_old_messages() -> None:
    episode = Episode("  deploy the site ", "done", tools=["shell"], tags="ops", success=True)
    assert (episode.situation, episode.tags) == ("deploy the site", ["ops"])
    assert Episode.parse(episode.render()) == Episode("deploy the site", "done", tools=["shell"], success=True)
    episode.tags = ["other"]  # mutable, as before
    with pytest.raises(InvalidInputError, match="success must be True, False or None, not 'yes'"):
        Episode("s", "o", success="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="tool must be a list of names, not a string"):
        Episode("s", "o", tools="shell")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Episode("s", "o", ["shell"])  # type: ignore[misc]
    Draft202012Validator(json_schema("episode")).validate(episode.to_dict())


def test_skill_front_matter_is_validated_with_the_key_named() -> None:
    with pytest.raises(InvalidSkillError, match="SKILL.md 'allowed-tools' must be a string, not dict"):
        Skill.parse("---\nname: x\ndescription: y\nallowed-tools: {a: 1}\n---\nbody\n")
    with pytest.raises(InvalidSkillError, match="SKILL.md 'metadata' must be a mapping"):
        Skill.parse("---\nname: x\ndescription: y\nmetadata: [1]\n---\n")
    skill = Skill.parse("---\nname: x\ndescription: 2024-05-01\nallowed-tools: [read, shell]\nextra: 1\n---\nbody\n")
    assert (skill.description, skill.allowed_tools, skill.extra) == ("2024-05-01", "read shell", {"extra": 1})


def test_settings_are_read_from_the_environment_in_one_place(tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert Settings.from_env({"HARNESS_MEM_HOME": str(home)}).db_path() == home / "memory.db"
    assert Settings.from_env({"HARNESS_MEM_HOME": str(home), "HARNESS_MEM_DB": "/x/m.db"}).db_path() == Path("/x/m.db")
    assert Settings.from_env({"XDG_DATA_HOME": "/data", "HARNESS_MEM_DB": ""}).db_path() == Path(
        "/data/harness-mem/memory.db"
    )  # an empty variable counts as unset
    settings = Settings.from_env({"HARNESS_MEM_MODEL_URL": "http://m/v1", "HARNESS_MEM_API_KEY": "sk-secret"})
    assert (settings.model_url, settings.embedder, settings.namespace) == ("http://m/v1", "auto", "default")
    assert "sk-secret" not in repr(settings)
    with pytest.raises(InvalidInputError, match="HARNESS_MEM_EMBEDDER must be one of 'auto', 'none', 'minilm', 'minilm-int8' or 'minilm-int8s', not 'gpu'"):
        Settings.from_env({"HARNESS_MEM_EMBEDDER": "gpu"})


def test_the_cli_prints_a_schema(db_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db_path), "schema", "import-line"], catch_exceptions=False)
    assert result.exit_code == 0
    assert json.loads(result.stdout) == json_schema("import-line")
    every = CliRunner().invoke(cli, ["schema"], catch_exceptions=False)
    assert set(json.loads(every.stdout)) == set(MODELS)
    unknown = CliRunner().invoke(cli, ["schema", "nope"], catch_exceptions=False)
    assert unknown.exit_code == 2 and "no schema named 'nope'" in unknown.stderr


def test_every_public_record_is_a_pydantic_model() -> None:
    for model, _ in MODELS.values():
        assert issubclass(model, BaseModel)
