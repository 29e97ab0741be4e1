from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_embedder import cli_process

from harness_mem.cli import cli
from harness_mem.errors import StorageError
from harness_mem.store import MemoryStore

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_conversation.jsonl"


# The tests of what the commands do with a store run on both engines (``--db`` takes a server URL
# too): they take ``engine_target``. Those about paths and files (a missing file, a folder, a path
# under a file), the README's demo on its file and the real-process round trip (exit codes and
# stderr; test_engines runs the commands in real processes on a server) stay on SQLite.


def run(db: Path | str, *args: str, input: str | bytes | None = None) -> object:
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=input, catch_exceptions=False)


def test_add_then_recall_as_json(engine_target: str) -> None:
    db_path = engine_target
    added = run(db_path, "add", "deploys happen on Tuesdays", "--tag", "ops", "--json")
    assert added.exit_code == 0
    entry = json.loads(added.stdout)
    result = run(db_path, "recall", "when are deploys", "--json")
    assert result.exit_code == 0
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert [h["id"] for h in hits] == [entry["id"]]
    assert {"id", "score", "kind", "role", "session", "content", "created_at", "tags"} <= hits[0].keys()
    assert hits[0]["tags"] == ["ops"]


@pytest.mark.slow
@pytest.mark.real_model
def test_the_readme_demo_recalls_what_it_shows(db_path: Path) -> None:
    """The default embedder is the real model here: the recalls the README shows, end to end."""
    assert run(db_path, "import", str(SAMPLE)).exit_code == 0

    def ranked(query: str, k: int) -> list[str]:
        result = run(db_path, "recall", query, "-k", str(k), "--json")
        assert result.exit_code == 0
        return [json.loads(line)["id"] for line in result.stdout.splitlines()]

    assert ranked("what did we decide about the auth refactor", 3) == [
        "proj:2026-03-02:1", "proj:2026-03-02:2", "proj:2026-03-02:4"]  # the decision, third
    assert ranked("when can I ship to production", 3) == [
        "proj:2026-03-23:4", "proj:2026-03-23:2", "proj:2026-03-04:2"]  # the deploy windows
    assert ranked("回答偏好", 1) == ["proj:2026-03-23:7"]
    assert "model: all-MiniLM-L6-v2-int8s, 384 dimensions, every entry embedded" in run(db_path, "doctor").stdout


def test_readable_recall_shows_rank_score_and_snippet(engine_target: str) -> None:
    db_path = engine_target
    run(db_path, "import", str(SAMPLE))
    result = run(db_path, "recall", "bcrypt or argon2id", "-k", "2", "--explain")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith(" 1. [") and "argon2id" in result.stdout
    assert "keyword #1" in result.stdout


def test_import_reports_bad_lines_keeps_good_ones_and_exits_non_zero(engine_target: str, tmp_path: Path) -> None:
    db_path = engine_target
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"id": "1", "text": "good one"}\n{"text": \n\xc3\x28\n{"id": "2", "text": "good two"}\n')
    result = run(db_path, "import", str(source))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "Error: line 2: not valid JSON (Expecting value at column 9)",
        "Error: line 3: not valid UTF-8 (byte 0)",
        "Imported 2 entries from 4 lines (0 already stored, 2 rejected)",
    ]
    again = run(db_path, "import", str(source))
    assert "Imported 0 entries from 4 lines (2 already stored, 2 rejected)" in again.stderr


def test_import_from_stdin_is_idempotent(engine_target: str) -> None:
    db_path = engine_target
    data = SAMPLE.read_text(encoding="utf-8")
    assert run(db_path, "import", "-", input=data).exit_code == 0
    assert run(db_path, "import", "-", input=data).exit_code == 0
    with MemoryStore(db_path) as store:
        assert store.count() == len(data.splitlines())


def test_get_list_delete_stats_export(engine_target: str) -> None:
    db_path = engine_target
    entry_id = run(db_path, "add", "remember the milk", "--id", "milk", "--role", "user").stdout.strip()
    assert entry_id == "milk"
    shown = run(db_path, "get", "milk", "--json")
    assert json.loads(shown.stdout)["content"] == "remember the milk"
    listed = run(db_path, "list", "--json")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["milk"]
    stats = json.loads(run(db_path, "stats", "--json").stdout)
    assert stats["entries"] == 1 and stats["by_kind"] == {"turn": 1}
    exported = run(db_path, "export")
    assert json.loads(exported.stdout)["id"] == "milk"
    assert run(db_path, "delete", "milk").exit_code == 0
    assert run(db_path, "list").stdout == ""


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["get", "nope"], 1, "Error: no entry with id 'nope' in namespace 'default' — `harness-mem list` shows the ids"),
        (["delete", "nope"], 1, "Error: no entry with id 'nope' in namespace 'default' — `harness-mem list` shows ids"),
        (["add", "   "], 1, "Error: an entry's content cannot be empty (or only spaces and control characters)"),
        (["add", "x", "--kind", "memo"], 1, "Error: unknown kind 'memo' — use one of: note, turn, episode, fact, summary"),
        (["recall", "x", "--since", "someday"], 1,
         "Error: cannot read a time from 'someday' — use ISO-8601 (2024-05-01T12:00:00Z) or an age (7d, 24h)"),
        (["add", "x", "--ttl-days", "0"], 1, "Error: ttl_days must be a positive number, not 0.0"),
        (["import", "/no/such/file.jsonl"], 2, "No such file or directory"),
        (["recall", "x", "-k", "0"], 2, "0 is not in the range"),
        (["recall", "x", "--since", "99999999d"], 1,
         "Error: cannot read a time from '99999999d' — an age must reach back no further than year 1"),
        (["list", "--until", "99999999999999999999999999s"], 1,
         "Error: cannot read a time from '99999999999999999999999999s' — an age must reach back no further than year 1"),
        (["list", "--since", "9" * 400 + "w"], 1,
         f"Error: cannot read a time from '{'9' * 400}w' — an age must reach back no further than year 1"),
        (["recall", "x", "--until", "9999999999h"], 1,
         "Error: cannot read a time from '9999999999h' — an age must reach back no further than year 1"),
    ],
)
def test_user_errors_are_one_line_with_a_fix(engine_target: str, args: list[str], code: int, message: str) -> None:
    db_path = engine_target
    MemoryStore(db_path, embedder=None).close()  # the file exists: the errors are about the arguments
    result = run(db_path, *args)
    assert result.exit_code == code
    assert message in result.stderr
    if code == 1:
        assert result.stderr.strip() == message  # exactly one line, nothing else
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("db", "message"),
    [
        ("somefile.txt/x.db", "Error: cannot create a database at {tmp}/somefile.txt/x.db: {tmp}/somefile.txt is a file,"
                              " not a folder — choose another path"),
        ("somefile.txt/deeper/x.db", "Error: cannot create a database at {tmp}/somefile.txt/deeper/x.db:"
                                     " {tmp}/somefile.txt is a file, not a folder — choose another path"),
    ],
)
def test_a_database_path_under_a_file_is_one_line(tmp_path: Path, db: str, message: str) -> None:
    (tmp_path / "somefile.txt").write_text("not a folder\n")
    for args in (["add", "x"], ["init"]):
        result = run(tmp_path / db, *args)
        assert (result.exit_code, result.stderr) == (1, message.format(tmp=tmp_path) + "\n")  # type: ignore[attr-defined]


def test_a_folder_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="is a folder, not a database file — name a file in it"):
        MemoryStore(tmp_path, embedder=None)


def test_recall_of_fts_syntax_is_not_an_error(engine_target: str) -> None:
    db_path = engine_target
    run(db_path, "add", "auth refactor plan")
    for query in ['"', 'NEAR("auth"', "*", "-", "AND", "🙂", "x" * 10_000]:
        result = run(db_path, "recall", query)
        assert result.exit_code == 0, query


def test_db_path_respects_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MEM_DB", str(tmp_path / "env.db"))
    result = CliRunner().invoke(cli, ["db", "path"], catch_exceptions=False)
    assert result.stdout.strip() == str(tmp_path / "env.db")
    monkeypatch.delenv("HARNESS_MEM_DB")
    result = CliRunner().invoke(cli, ["db", "path"], catch_exceptions=False)
    assert result.stdout.strip() == str(tmp_path / "home" / "memory.db")


def test_doctor_and_migrate_list(engine_target: str) -> None:
    db_path = engine_target
    assert run(db_path, "init").exit_code == 0
    doctor = run(db_path, "doctor")
    assert doctor.exit_code == 0
    checks = doctor.stdout.splitlines()
    assert len(checks) >= 8 and all(line.split()[0] == "ok" for line in checks), doctor.stdout
    assert "identity key: no identity key yet" in doctor.stdout  # init seals no name
    assert "model:" in doctor.stdout
    assert "pseudonyms: pseudonyms keyed outside the store" in doctor.stdout
    listing = run(db_path, "migrate", "--list")
    assert "0001_init" in listing.stdout and "applied" in listing.stdout


def test_every_command_has_help_with_an_example() -> None:
    import click

    def walk(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        found = []
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                found += walk(command, (*prefix, name))
            else:
                found.append((*prefix, name))
        return found

    for path in walk(cli):
        result = CliRunner().invoke(cli, [*path, "--help"], catch_exceptions=False)
        assert result.exit_code == 0
        assert "Example:" in result.stdout, path


def test_real_process_round_trip_and_errors(db_path: Path) -> None:
    db = ("--db", str(db_path))
    imported = cli_process(*db, "import", "-", input=SAMPLE.read_bytes())
    assert imported.returncode == 0, imported.stderr
    recalled = cli_process(*db, "recall", "deploy on Fridays", "--json", "-k", "3")
    assert recalled.returncode == 0
    first = json.loads(recalled.stdout.splitlines()[0])
    assert "Friday" in first["content"]
    broken = cli_process(*db, "import", "-", input=b'{"text": "ok"}\n{oops\n')
    assert broken.returncode == 1
    assert b"line 2: not valid JSON" in broken.stderr and b"Traceback" not in broken.stderr
    missing = cli_process(*db, "get", "nope")
    assert missing.returncode == 1 and missing.stderr.count(b"\n") == 1


def test_keyword_commands_do_not_import_the_embedding_model(engine_target: str) -> None:
    db_path = engine_target
    code = (
        "import sys\nfrom harness_mem.cli import main\n"
        f"sys.argv = ['harness-mem', '--db', {str(db_path)!r}, 'recall', 'x', '--mode', 'keyword']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'sentence_transformers' not in sys.modules and 'torch' not in sys.modules, 'heavy import'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_doctor_fails_when_entries_lack_vectors(engine_target: str) -> None:
    db_path = engine_target
    CliRunner().invoke(cli, ["--db", str(db_path), "init"], catch_exceptions=False)  # a file with vectors
    CliRunner().invoke(cli, ["--db", str(db_path), "--embedder", "none", "add", "a note"], catch_exceptions=False)
    result = CliRunner().invoke(cli, ["--db", str(db_path), "doctor"], catch_exceptions=False)
    assert result.exit_code == 1
    assert "FAIL  model: EmbedderError: no vector yet for 1 entry (stored" in result.stdout
    assert "run `harness-mem reindex`" in result.stdout


@pytest.mark.parametrize("args", [
    ["recall", "auth"], ["list"], ["get", "x"], ["stats"], ["export"], ["doctor"], ["delete", "x"],
    ["reindex"], ["episodes", "list"], ["skills", "list"],
])
def test_reading_a_path_that_does_not_exist_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "typo" / "memroy.db"
    result = run(missing, *args)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert result.stderr == (  # type: ignore[attr-defined]
        f"Error: no database at {missing} — create one with `harness-mem init` (or `add`/`import`, which create it)\n"
    )
    assert not missing.parent.exists()


def test_eval_on_a_path_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"question": "auth?", "evidence": ["a"]}\n')
    missing = tmp_path / "nowhere.db"
    result = run(missing, "eval", str(queries))
    assert result.exit_code == 1 and "no database at" in result.stderr  # type: ignore[attr-defined]
    assert not missing.exists()


@pytest.mark.parametrize("args", [["add", "a first note"], ["init"]])
def test_writing_commands_create_the_file(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "new" / "agent.db"
    assert run(path, *args).exit_code == 0  # type: ignore[attr-defined]
    assert path.exists()


def test_the_python_api_honours_harness_mem_embedder(engine_target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    db_path = engine_target
    with MemoryStore(db_path) as store:
        store.add("made with vectors")
    monkeypatch.setenv("HARNESS_MEM_EMBEDDER", "none")
    with MemoryStore(db_path) as store:
        assert store.embedder is None and not store.keyword_only  # this handle only: the file keeps its vectors
        store.add("keyword only, as the environment says")
        assert [h.entry.content for h in store.recall("keyword")] == ["keyword only, as the environment says"]
    monkeypatch.setenv("HARNESS_MEM_EMBEDDER", "auto")
    with MemoryStore(db_path) as store:
        assert store.embedder is not None


def test_recent_takes_its_count_as_an_argument_and_counts_agree(db_path: Path) -> None:
    for text in ("first note", "second note", "third note"):
        assert run(db_path, "add", text).exit_code == 0
    newest = run(db_path, "recent", "2")
    assert newest.exit_code == 0 and "third note" in newest.stdout and "first note" not in newest.stdout
    assert run(db_path, "recent", "-n", "1").stdout.count(" note\n") == 1  # one entry: its text line
    exported = run(db_path, "export")
    one = run(db_path, "forget", "--kind", "note", "--since", "1d")
    assert one.stderr.startswith("Forgot 3 entries") and exported.stderr == "Exported 3 entries\n"
    assert run(db_path, "purge").stderr.startswith("Purged 3 entries")
    assert run(db_path, "add", "alone").exit_code == 0
    assert run(db_path, "export").stderr == "Exported 1 entry\n"


def test_import_reports_as_json_on_stdout(db_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "text": "kept"}\nnot json\n{"id": "b", "text": "kept too"}\n')
    result = run(db_path, "import", str(source), "--json")
    assert result.exit_code == 1  # a rejected line, as without --json
    report = json.loads(result.stdout)
    assert {k: report[k] for k in ("lines", "added", "skipped")} == {"lines": 3, "added": 2, "skipped": 0}
    assert [r["line"] for r in report["rejected"]] == [2]
    again = json.loads(run(db_path, "import", str(source), "--json").stdout)
    assert (again["added"], again["skipped"]) == (0, 2)
