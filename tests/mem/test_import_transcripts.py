"""``import --format claude-code|codex``: a coding agent's history brought into memory (issue #36).

The transcripts under ``transcripts/`` are small hand-written files in each tool's documented shape:
a Claude Code session with a sub-agent beside it and a harness-mem note file in the same folder,
and a Codex rollout of each generation. Each test copies them, so lines can be appended.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_embedder import cli_process

from harness_mem.importers import find_transcripts, import_transcripts
from harness_mem.integrations.claude_code import TOOL_MAX_CHARS
from harness_mem.store import MemoryStore

HERE = Path(__file__).resolve().parent / "transcripts"
PROJECT = "-home-ada-repos-harness"
SESSION_FILE = f"{PROJECT}/5f0c-session-a.jsonl"
# What the fixtures hold: the turns each import stores, by role.
CLAUDE_TURNS = {"user": 3, "assistant": 3, "tool": 1}  # the sub-agent's prompt and answer included
CODEX_TURNS = {"user": 2, "assistant": 2, "tool": 2}


@pytest.fixture
def claude(tmp_path: Path) -> Path:
    return Path(shutil.copytree(HERE / "claude-code", tmp_path / "projects"))


@pytest.fixture
def codex(tmp_path: Path) -> Path:
    return Path(shutil.copytree(HERE / "codex", tmp_path / "sessions"))


def run(db: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return cli_process("--db", str(db), "--embedder", "none", "import", *args)


def report_of(result: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr.decode()
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def entries(db: Path) -> list[dict[str, Any]]:
    out = cli_process("--db", str(db), "export").stdout.decode()
    return [json.loads(line) for line in out.splitlines()]


def by_role(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["role"]] = counts.get(row["role"], 0) + 1
    return counts


def append(path: Path, *records: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")


def claude_record(uuid: str, role: str, content: Any, **more: Any) -> dict[str, Any]:
    return {"type": role, "uuid": uuid, "sessionId": "5f0c-session-a", "timestamp": "2025-06-01T11:00:00.000Z",
            "cwd": "/home/ada/repos/harness", "isSidechain": False, "message": {"role": role, "content": content},
            **more}


# ---- through the command line -------------------------------------------------------------------


def test_one_claude_code_file_keeps_sessions_roles_times_and_the_project(tmp_path: Path, claude: Path) -> None:
    db = tmp_path / "m.db"
    result = run(db, "--format", "claude-code", str(claude / SESSION_FILE))
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stderr.decode().splitlines()
    assert lines[0] == "Imported 5 turns from 1 file (1 session, 1 with new turns; 0 turns already stored)"
    assert lines[1].startswith("Skipped 6 records: 3 injected context, ")
    for reason in ("1 summary record", "1 file-history-snapshot record", "1 thinking block"):
        assert reason in lines[1]
    rows = entries(db)
    assert by_role(rows) == {"user": 2, "assistant": 2, "tool": 1}
    first = rows[0]
    assert first["id"] == "claude-code:a-01" and first["session"] == "5f0c-session-a" and first["kind"] == "turn"
    assert first["created_at"] == "2025-06-01T10:00:00.000Z"
    assert first["source"] == "claude-code"
    # The project is the repository at cwd; with none there (not on this machine), the path.
    assert "project:/home/ada/repos/harness" in first["tags"] and first["metadata"]["cwd"] == "/home/ada/repos/harness"
    assert first["metadata"]["git_branch"] == "main"
    assert [r["created_at"] for r in rows] == sorted(r["created_at"] for r in rows)


def test_a_folder_marks_the_sub_agent_and_passes_over_other_files(tmp_path: Path, claude: Path) -> None:
    db = tmp_path / "m.db"
    report = report_of(run(db, "--format", "claude-code", str(claude), "--json"))
    assert report["files"] == 2 and report["turns"] == sum(CLAUDE_TURNS.values())
    assert report["files_skipped"] == {"its first records have other fields": 1}  # notes.jsonl
    rows = entries(db)
    assert by_role(rows) == CLAUDE_TURNS
    sidechain = [r for r in rows if "sidechain" in r["tags"]]
    assert [r["content"] for r in sidechain] == ["Find where the clock fixture is defined.",
                                                 "The frozen clock fixture is in tests/conftest.py."]
    assert all(r["metadata"]["sidechain"] is True and r["metadata"]["agent"] == "7c1" for r in sidechain)
    assert all(r["session"] == "5f0c-session-a" for r in rows)


def test_a_second_run_reads_nothing_and_appended_lines_come_on_the_next(tmp_path: Path, claude: Path) -> None:
    db = tmp_path / "m.db"
    first = report_of(run(db, "--format", "claude-code", str(claude), "--json"))
    again = report_of(run(db, "--format", "claude-code", str(claude), "--json"))
    # Not a byte of an unchanged file is read again: its position is in the store's settings.
    assert (again["files"], again["unchanged"], again["bytes"]) == (2, 2, 0)
    assert again["turns"] == again["already_stored"] == again["new_sessions"] == 0 and again["skipped"] == {}
    session = claude / SESSION_FILE
    size = session.stat().st_size
    append(session,
           claude_record("a-09", "user", "Now run the whole suite."),
           claude_record("a-10", "assistant", [{"type": "text", "text": "All 212 tests pass."}]))
    third = report_of(run(db, "--format", "claude-code", str(claude), "--json"))
    # Only the appended lines are read, and give only the new turns.
    assert (third["turns"], third["already_stored"], third["skipped"]) == (2, 0, {})
    assert (third["unchanged"], third["bytes"]) == (1, session.stat().st_size - size)
    rows = entries(db)
    assert len(rows) == first["turns"] + 2 == len({r["id"] for r in rows})
    assert rows[-1]["content"] == "All 212 tests pass."
    assert "2 files unchanged since the last import: not read" in run(db, "--format", "claude-code", str(claude)).stderr.decode()


def test_a_rewritten_or_truncated_file_is_read_in_full_and_stores_nothing_twice(tmp_path: Path, claude: Path) -> None:
    session = claude / SESSION_FILE
    original = session.read_bytes()
    files, _ = find_transcripts([session], "claude-code")
    with MemoryStore(tmp_path / "m.db", embedder=None) as store:
        first = import_transcripts(store, files, "claude-code")
        # Rewritten with the same size: an edited line (a-08's reply), the file as long as before.
        session.write_bytes(original.replace(b"now uses the frozen clock", b"NOW USES THE FROZEN CLOCK"))
        rewritten = import_transcripts(store, files, "claude-code")
        assert rewritten.bytes == len(original) and rewritten.already_stored == first.turns
        session.write_bytes(original[: len(original) // 2].rpartition(b"\n")[0] + b"\n")  # truncated
        truncated = import_transcripts(store, files, "claude-code")
        assert truncated.bytes == session.stat().st_size and truncated.turns == 0
        assert store.count() == first.turns


def test_a_tool_call_waiting_for_its_result_is_read_again_with_it(tmp_path: Path, claude: Path) -> None:
    session = claude / SESSION_FILE
    files, _ = find_transcripts([session], "claude-code")
    append(session, claude_record("a-09", "assistant", [{"type": "tool_use", "id": "toolu_09", "name": "Bash",
                                                         "input": {"command": "pytest -q"}}]))
    with MemoryStore(tmp_path / "m.db", embedder=None) as store:
        first = import_transcripts(store, files, "claude-code")
        assert first.skipped["tool call without its result"] == 1
        # The host writes the result's record later, and half a line of the next one (still being written).
        append(session, claude_record("a-10", "user", [{"type": "tool_result", "tool_use_id": "toolu_09",
                                                        "content": "212 passed"}]))
        with session.open("a", encoding="utf-8") as out:
            out.write(json.dumps(claude_record("a-11", "assistant", "All green."))[:40])
        second = import_transcripts(store, files, "claude-code")
        assert second.turns == 1 and store.get("claude-code:a-10:toolu_09").content.endswith("\n212 passed")
        with session.open("a", encoding="utf-8") as out:  # the line is finished
            out.write(json.dumps(claude_record("a-11", "assistant", "All green."))[40:] + "\n")
        third = import_transcripts(store, files, "claude-code")
        assert (third.turns, third.already_stored) == (1, 0) and store.get("claude-code:a-11").content == "All green."
        assert store.count() == first.turns + 2


def test_a_codex_file_read_from_where_it_stopped_keeps_its_session_and_line_ids(tmp_path: Path, codex: Path) -> None:
    path = next(codex.rglob("rollout-2025-06-01*.jsonl"))
    files, _ = find_transcripts([path], "codex")
    with MemoryStore(tmp_path / "m.db", embedder=None) as store:
        import_transcripts(store, files, "codex")
        lines = len(path.read_bytes().splitlines())
        append(path, {"timestamp": "2025-06-01T09:10:00.000Z", "type": "response_item",
                      "payload": {"type": "message", "role": "user", "content": [
                          {"type": "input_text", "text": "Ship the cart fix."}]}})
        again = import_transcripts(store, files, "codex")
        assert (again.turns, again.already_stored) == (1, 0)
        turn = store.get(f"codex:7d2e:{lines + 1}")  # numbered as a whole read numbers it
        assert turn.session == "7d2e" and turn.content == "Ship the cart fix."
        assert "project:/home/ada/repos/webshop" in turn.tags  # from the header, read again


def test_tool_turns_are_cut_as_the_hooks_cut_them(tmp_path: Path, claude: Path) -> None:
    db = tmp_path / "m.db"
    log = "".join(f"line {i}: ok\n" for i in range(2000))  # far past TOOL_MAX_CHARS
    append(claude / SESSION_FILE,
           claude_record("a-09", "assistant", [{"type": "tool_use", "id": "toolu_02", "name": "Read",
                                                 "input": {"file_path": "build.log"}}]),
           claude_record("a-10", "user", [{"type": "tool_result", "tool_use_id": "toolu_02",
                                           "content": [{"type": "text", "text": log}]}]))
    report_of(run(db, "--format", "claude-code", str(claude / SESSION_FILE), "--json"))
    tools = {r["id"]: r for r in entries(db) if r["role"] == "tool"}
    bash = tools["claude-code:a-06:toolu_01"]
    assert bash["content"].startswith('[Bash] {"command":"pytest tests/test_login.py -q"}\nF\nFAILED tests/test_login')
    assert bash["metadata"]["tool"] == "Bash" and bash["metadata"]["error"] is True
    read = tools["claude-code:a-10:toolu_02"]
    assert read["content"].startswith('[Read] {"file_path":"build.log"}\nline 0: ok')
    head = read["content"].split("…")[0]
    assert len(head) == TOOL_MAX_CHARS and read["content"].endswith(" chars truncated]")


def test_injected_blocks_are_left_out(tmp_path: Path, claude: Path, codex: Path) -> None:
    db = tmp_path / "m.db"
    report_of(run(db, "--format", "claude-code", str(claude), "--json"))
    report_of(run(db, "--format", "codex", str(codex), "--json"))
    texts = "\n".join(r["content"] for r in entries(db))
    for injected in ("Caveat:", "<command-name>", "/model", "local-command-stdout", "Set model to opus",
                     "system-reminder", "opened tests/conftest.py in the IDE", "environment_context",
                     "sandbox_mode", "user_instructions", "linter", "You are Codex", "Be brief", "fixture may be stale"):
        assert injected not in texts
    assert "Use the frozen clock fixture." in texts.splitlines()  # the prompt around a reminder stays


def test_secrets_are_redacted_like_every_write(tmp_path: Path, claude: Path, codex: Path) -> None:
    db = tmp_path / "m.db"
    report_of(run(db, "--format", "claude-code", str(claude), "--json"))
    report_of(run(db, "--format", "codex", str(codex), "--json"))
    rows = {r["id"]: r for r in entries(db)}
    assert rows["claude-code:a-01"]["content"] == "The login test fails on CI; the deploy key is <API_KEY>"
    assert rows["codex:7d2e:5"]["content"] == "Why is the cart total wrong? Write to <EMAIL> when done."
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("m.db*"))
    assert b"AKIAIOSFODNN7EXAMPLE" not in stored and b"ada.lovelace@example.com" not in stored


def test_codex_sessions_of_both_generations(tmp_path: Path, codex: Path) -> None:
    db = tmp_path / "m.db"
    report = report_of(run(db, "--format", "codex", str(codex), "--json"))
    assert (report["files"], report["sessions"], report["turns"]) == (2, 2, sum(CODEX_TURNS.values()))
    assert report["skipped"] == {"injected context": 3, "event_msg record": 2, "turn_context record": 1,
                                 "reasoning item": 1, "state record": 2}
    rows = {r["id"]: r for r in entries(db)}
    assert by_role(list(rows.values())) == CODEX_TURNS
    tool = rows["codex:7d2e:10"]
    assert tool["content"] == ('[shell] {"command":["bash","-lc","grep -n total cart.py"],'
                               '"workdir":"/home/ada/repos/webshop"}\n12:    total = sum(p.price for p in items)')
    assert tool["created_at"] == "2025-06-01T09:00:04.000Z" and tool["metadata"]["tool"] == "shell"
    assert "project:/home/ada/repos/webshop" in tool["tags"] and tool["metadata"]["git_branch"] == "fix-cart"
    old = rows["codex:0a1b:3"]  # the older files' items have no time: the session's start
    assert (old["role"], old["content"], old["created_at"]) == ("user", "Rename utils.py to helpers.py",
                                                                "2025-04-01T08:00:00.000Z")
    again = report_of(run(db, "--format", "codex", str(codex), "--json"))
    assert (again["turns"], again["unchanged"], again["bytes"]) == (0, 2, 0)


@pytest.mark.parametrize("format_", ["claude-code", "codex"])
def test_a_file_that_is_not_a_transcript_is_refused_in_one_line(tmp_path: Path, claude: Path, format_: str) -> None:
    db = tmp_path / "m.db"
    notes = claude / PROJECT / "notes.jsonl"
    result = run(db, "--format", format_, str(notes))
    title = "Claude Code transcript" if format_ == "claude-code" else "Codex CLI session file"
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"Error: {notes} is not a {title} (its first records have other fields) — nothing was imported"]
    assert not db.exists()  # refused before the store was opened: nothing stored


def test_refusals_in_one_line(tmp_path: Path, claude: Path) -> None:
    db = tmp_path / "m.db"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(db, "--format", "codex", str(empty)).stderr.decode().splitlines() == [
        f"Error: no Codex CLI session file in {empty} — nothing was imported"]
    assert run(db, "--format", "codex", str(tmp_path / "nope")).stderr.decode().splitlines() == [
        f"Error: no such file or folder: {tmp_path / 'nope'}"]
    mixed = run(db, "--format", "claude-code", "--replace", str(claude))
    assert mixed.returncode == 2 and "--replace works with --format jsonl only" in mixed.stderr.decode()
    assert not db.exists()


def test_bad_lines_in_a_transcript_are_counted_never_raised(tmp_path: Path, claude: Path) -> None:
    db = tmp_path / "m.db"
    path = claude / SESSION_FILE
    with path.open("ab") as out:
        out.write(b"{not json\n[1, 2]\n\xff\xfe\n" + b'{"type": "user", "message": 3}\n')
    append(path, claude_record("a-11", "user", "a bad time", timestamp="yesterday-ish"),
           claude_record("a-12", "user", [{"type": "tool_result", "tool_use_id": "toolu_gone", "content": "x"}]),
           claude_record("a-13", "assistant", [{"type": "tool_use", "id": "toolu_03", "name": "Bash", "input": {}}]),
           claude_record("a-14", "user", [{"type": "image", "source": {"type": "base64", "data": "iVBOR"}}]))
    report = report_of(cli_process("--db", str(db), "--embedder", "none", "import", "--format", "claude-code",
                                   str(path), "--json", raise_errors=True))
    assert report["turns"] == 5
    skipped = report["skipped"]
    for reason in ("not JSON", "not a JSON object", "not UTF-8", "no message", "tool result without its call",
                   "tool call without its result", "image block"):
        assert skipped.get(reason) == 1, (reason, skipped)
    assert any("yesterday-ish" in reason for reason in skipped)  # the store's own reason for the time


def test_the_default_folders_come_from_the_tools_settings(tmp_path: Path, claude: Path, codex: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "claude-config").mkdir()
    shutil.move(str(claude), tmp_path / "claude-config" / "projects")
    (tmp_path / "codex-home").mkdir()
    shutil.move(str(codex), tmp_path / "codex-home" / "sessions")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    db = tmp_path / "m.db"
    assert report_of(run(db, "--format", "claude-code", "--json"))["files"] == 2
    assert report_of(run(db, "--format", "codex", "--json"))["files"] == 2


def test_the_import_loads_no_embedding_model(tmp_path: Path, claude: Path) -> None:
    code = (
        "import sys\nfrom harness_mem.cli import main\n"
        f"sys.argv = ['harness-mem', '--db', {str(tmp_path / 'm.db')!r}, '--embedder', 'none', 'import',"
        f" '--format', 'claude-code', {str(claude)!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "assert 'sentence_transformers' not in sys.modules and 'torch' not in sys.modules, 'heavy import'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# ---- through the library -----------------------------------------------------------------------


class Told:
    """A :class:`~harness_mem.progress.Progress` that keeps what it is told."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.steps: list[tuple[int, int]] = []

    def phase(self, name: str) -> None:
        if name not in self.phases:
            self.phases.append(name)

    def advance(self, done: int, written: int) -> None:
        self.steps.append((done, written))


def test_the_python_api_counts_progress_in_the_bytes_it_read(tmp_path: Path, claude: Path) -> None:
    files, passed = find_transcripts([claude], "claude-code")
    assert [f.name for f in files] == ["5f0c-session-a.jsonl", "agent-7c1.jsonl"] and sum(passed.values()) == 1
    told = Told()
    with MemoryStore(tmp_path / "m.db", embedder=None) as store:
        report = import_transcripts(store, files, "claude-code", progress=told, batch_size=2)
        assert report.turns == sum(CLAUDE_TURNS.values()) and report.new_sessions == 1
        steps = [done for done, _ in told.steps]
        assert sum(steps) == sum(f.stat().st_size for f in files) and len(steps) > len(files)
        assert sum(written for _, written in told.steps) == report.turns == store.count()
        assert told.phases == ["reading", "writing"]  # each named when it first begins
        hits = store.recall("frozen clock fixture", mode="keyword", tags=["sidechain"])
        assert hits and all("sidechain" in h.entry.tags for h in hits)
        again = import_transcripts(store, files, "claude-code")
        assert (again.turns, again.unchanged) == (0, len(files))
        assert store.count() == report.turns


def test_on_each_engine_a_second_run_writes_nothing_and_a_forgotten_turn_stays_forgotten(
        engine_store: MemoryStore, claude: Path, codex: Path) -> None:
    store = engine_store
    for format_, root in (("claude-code", claude), ("codex", codex)):
        files, _ = find_transcripts([root], format_)
        first = import_transcripts(store, files, format_)
        assert first.turns == sum((CLAUDE_TURNS if format_ == "claude-code" else CODEX_TURNS).values())
        again = import_transcripts(store, files, format_)
        assert (again.turns, again.unchanged, again.bytes) == (0, len(files), 0)
    total = store.count()
    assert store.forget("claude-code:a-01") == 1
    copy = Path(shutil.copy(claude / SESSION_FILE, claude / "copy.jsonl"))  # another file: read in full
    assert import_transcripts(store, [copy], "claude-code").turns == 0
    assert store.count() == total - 1


def test_an_id_the_redactor_changes_is_still_found_on_the_next_run(tmp_path: Path, claude: Path) -> None:
    path = claude / SESSION_FILE
    append(path, claude_record("ada@example.com", "user", "a uuid no tool would write, holding an address"))
    files, _ = find_transcripts([path], "claude-code")
    with MemoryStore(tmp_path / "m.db", embedder=None) as store:
        first = import_transcripts(store, files, "claude-code")
        with store.stored_forms():
            assert [e.id for e in store.list() if "address" in e.content] != ["claude-code:ada@example.com"]
        assert store.get("claude-code:ada@example.com").content.startswith("a uuid no tool")
        copy = Path(shutil.copy(path, tmp_path / "copy.jsonl"))  # another file, read in full: ids dedupe
        again = import_transcripts(store, [copy], "claude-code")
        assert (again.turns, again.already_stored) == (0, first.turns)


def test_a_large_import_shows_progress_unless_quiet(tmp_path: Path, claude: Path) -> None:
    path = claude / SESSION_FILE
    append(path, *(claude_record(f"p-{i}", "assistant", [{"type": "text", "text": f"step {i} " + "ok " * 100}])
                   for i in range(1000)))  # past 256 KiB
    loud = run(tmp_path / "a.db", "--format", "claude-code", str(path))
    quiet = run(tmp_path / "b.db", "--format", "claude-code", str(path), "-q")
    lines = loud.stderr.decode().splitlines()
    progress = [line for line in lines if line.startswith("import: ")]
    # The phases in the order they begin, then a last line that has read every byte and counts
    # the turns that were stored, not the lines that were read.
    assert progress[:2] == ["import: reading", "import: writing"]
    size = path.stat().st_size / 1e6
    assert progress[-1].startswith(f"import: writing, {size:,.1f}/{size:,.1f} MB read, 1,005 turns written, ")
    assert lines[len(progress)].startswith("Imported 1,005 turns from 1 file")
    with MemoryStore(tmp_path / "a.db", embedder=None) as store:
        assert store.count() == 1005
    assert quiet.stderr.decode().startswith("Imported 1,005 turns from 1 file")


def test_a_session_the_hooks_captured_is_imported_only_up_to_their_first_turn(tmp_path: Path, claude: Path) -> None:
    files, _ = find_transcripts([claude], "claude-code")
    with MemoryStore(tmp_path / "m.db", embedder=None) as store:
        # What the UserPromptSubmit hook stored when it was installed in the middle of the session.
        store.add("Use the frozen clock fixture.", role="user", session="5f0c-session-a", source="claude-code",
                  metadata={"host": "claude-code", "event": "UserPromptSubmit"}, created_at="2025-06-01T10:00:15Z")
        report = import_transcripts(store, files, "claude-code")
        assert report.skipped["captured by the hooks"] == 4  # from 5 s before the hooks' first turn
        assert [e.id for e in store.list(metadata={"event": "import"})] == [
            "claude-code:a-01", "claude-code:a-05", "claude-code:a-06:toolu_01"]
        assert import_transcripts(store, files, "claude-code").turns == 0


@pytest.mark.parametrize(("format_", "name"), [("claude-code", SESSION_FILE),
                                               ("codex", "2025/06/01/rollout-2025-06-01T09-00-00-7d2e.jsonl")])
def test_a_transcript_imported_as_json_lines_is_refused_with_the_flag_to_use(tmp_path: Path, format_: str,
                                                                              name: str) -> None:
    db = tmp_path / "m.db"
    path = HERE / format_ / name
    result = run(db, str(path))
    title = "Claude Code transcript" if format_ == "claude-code" else "Codex CLI session file"
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"Error: {path} is a {title}, not harness-mem's JSON Lines — import it with --format {format_};"
        " nothing was imported"]
    assert not db.exists()


def test_json_lines_with_ids_and_times_are_still_json_lines(tmp_path: Path) -> None:
    lines = tmp_path / "turns.jsonl"
    lines.write_text('{"id": "t1", "timestamp": "2025-06-01T10:00:00Z", "text": "a note"}\n'
                     '{"id": "t2", "timestamp": "2025-06-01T10:00:01Z", "text": "another"}\n')
    result = run(tmp_path / "m.db", str(lines))
    assert result.returncode == 0 and result.stderr.decode().startswith("Imported 2 entries")
    refused = run(tmp_path / "m.db", "--format", "codex", str(lines))
    assert refused.returncode == 1 and "is not a Codex CLI session file" in refused.stderr.decode()


ODD_VALUES = [None, 1, "x", [], {}, [1], {"a": 1}, True, [{"type": "text"}], [{"type": "tool_result", "tool_use_id": [1]}],
              [{"type": "tool_use", "id": "i", "name": ["n"], "input": {}}],
              [{"type": "tool_result", "tool_use_id": "i", "content": [1, {"type": "text", "text": 3}]}]]


def test_records_of_any_odd_shape_give_turns_or_reasons_never_an_error() -> None:
    import random

    from harness_mem.importers import claude_code, codex
    from harness_mem.importers.turns import ImportedTurn, Resume, Skipped

    rng = random.Random(36)
    header = json.dumps({"type": "session_meta", "payload": {"id": "s", "timestamp": "2025-01-01T00:00:00Z"}})
    for _ in range(3000):
        record = {k: rng.choice(ODD_VALUES) for k in ("uuid", "sessionId", "timestamp", "cwd", "isSidechain",
                                                       "isMeta", "gitBranch", "agentId") if rng.random() < 0.6}
        record["type"] = rng.choice(["user", "assistant", "system", 3])
        record["message"] = {"role": "user", "content": rng.choice(ODD_VALUES)}
        record.setdefault("timestamp", "2025-01-01T00:00:00Z")
        items = list(claude_code.read(Path("x.jsonl"), [(1, json.dumps(record))]))
        payload = {k: rng.choice(ODD_VALUES) for k in ("role", "content", "call_id", "name", "arguments", "output")}
        payload["type"] = rng.choice(["message", "function_call", "function_call_output", "local_shell_call", 3])
        items += codex.read(Path("r.jsonl"), [(1, header), (2, json.dumps({"type": "response_item", "payload": payload}))])
        for item in items:
            assert isinstance(item, Skipped | Resume) or (isinstance(item, ImportedTurn) and isinstance(item.text, str)
                                                 and isinstance(item.session, str))
