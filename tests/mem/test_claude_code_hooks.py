"""Claude Code hooks: `harness-mem hooks install` and `harness-mem hook EVENT` as real processes.

The payloads are recorded in Claude Code's documented hook-input format (common fields
session_id, transcript_path, cwd, permission_mode, hook_event_name, then each event's own), and the
transcript in its JSONL format (one record per line, ``type`` user/assistant, ``message.content``
a string or a list of blocks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hook_writers import private_runtime_dir

from harness_mem.integrations import claude_code
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.slow  # every test starts real processes

BIN = Path(sys.executable).parent
SESSION = "8c35adc1-2b7e-4f0e-9d51-6a1f0c2d7e10"
SHOP = "project:/work/shop"  # /work/shop is no git repository: the project is the directory
EARLIER = "1f0e9d51-6a1f-4c2d-8c35-adc12b7e4f0e"
# Runs the real CLI, then says on stderr which model runtimes the process imported.
WATCHED = ("torch", "sentence_transformers", "onnxruntime", "transformers")
LAUNCHER = (
    "import atexit, runpy, sys\n"
    f"atexit.register(lambda: sys.stderr.write('LOADED:' + ','.join(m for m in {WATCHED!r} if m in sys.modules)))\n"
    "runpy.run_module('harness_mem', run_name='__main__', alter_sys=True)\n"
)


def common(tmp_path: Path, event: str, session: str = SESSION) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": str(tmp_path / "projects" / "-work-shop" / f"{session}.jsonl"),
        "cwd": "/work/shop",
        "permission_mode": "default",
        "hook_event_name": event,
    }


def session_start(tmp_path: Path) -> dict[str, Any]:
    return {**common(tmp_path, "SessionStart"), "source": "startup"}


def user_prompt(tmp_path: Path, prompt: str, session: str = SESSION) -> dict[str, Any]:
    return {**common(tmp_path, "UserPromptSubmit", session), "prompt": prompt}


def post_tool(tmp_path: Path) -> dict[str, Any]:
    return {
        **common(tmp_path, "PostToolUse"),
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q tests/test_cart.py", "description": "Run the cart tests"},
        "tool_response": {"stdout": "3 passed in 0.41s", "stderr": "", "interrupted": False, "isImage": False},
        "tool_use_id": "toolu_01DUx9kq3Lr2",
    }


def stop(tmp_path: Path) -> dict[str, Any]:
    return {**common(tmp_path, "Stop"), "stop_hook_active": False}


TRANSCRIPT = [
    {"type": "summary", "summary": "Cart rounding", "leafUuid": "u0"},
    {"type": "user", "uuid": "u1", "sessionId": SESSION,
     "message": {"role": "user", "content": "the cart total rounds wrong"}},
    {"type": "assistant", "uuid": "u2", "sessionId": SESSION,
     "message": {"role": "assistant", "content": [
         {"type": "text", "text": "An early thought that is not the final reply."},
         {"type": "tool_use", "id": "toolu_01DUx9kq3Lr2", "name": "Bash", "input": {"command": "pytest -q"}}]}},
    {"type": "user", "uuid": "u3", "sessionId": SESSION,
     "message": {"role": "user", "content": [
         {"type": "tool_result", "tool_use_id": "toolu_01DUx9kq3Lr2", "content": "3 passed"}]}},
    {"type": "assistant", "uuid": "u4", "sessionId": SESSION,
     "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": "done"}]}},
    {"type": "assistant", "uuid": "u5", "sessionId": SESSION,
     "message": {"role": "assistant", "content": [
         {"type": "text", "text": "Fixed: totals now round half-even in cart.py."}]}},
    {"type": "assistant", "uuid": "u6", "sessionId": SESSION, "isSidechain": True,
     "message": {"role": "assistant", "content": [{"type": "text", "text": "a subagent's note"}]}},
]


def write_transcript(payload: dict[str, Any], records: list[dict[str, Any]]) -> None:
    path = Path(payload["transcript_path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "{truncated line\n", encoding="utf-8")


def env(tmp_path: Path) -> dict[str, str]:
    environ = dict(os.environ, HF_HUB_OFFLINE="1", HOME=str(tmp_path / "user-home"),
                   PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    environ.pop("HARNESS_MEM_RAISE_ERRORS", None)  # a real hook shows one line, never a traceback
    return environ


def run(tmp_path: Path, *args: str, stdin: bytes | dict[str, Any] = b"", cwd: Path | None = None,
        watch: bool = False) -> subprocess.CompletedProcess[str]:
    data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    command = [sys.executable, "-c", LAUNCHER, *args] if watch else [str(BIN / "harness-mem"), *args]
    done = subprocess.run(command, input=data, capture_output=True, env=env(tmp_path), cwd=cwd or tmp_path,
                          timeout=60, check=False)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


@pytest.fixture(autouse=True)
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The hooks start writers (harness_mem.hook_writer): in a directory of this test's, stopped after it."""
    with private_runtime_dir(monkeypatch) as directory:
        yield directory


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store with vectors (the test embedder): the hooks must use it without loading any model."""
    path = tmp_path / "memory.db"
    with MemoryStore(path) as store:
        store.add("we deploy the shop with `make ship`, never by hand", kind="fact", session=EARLIER,
                  tags=["decision", SHOP])
        store.add("totals use decimal, not float", tags=["decision", SHOP])
        store.add("add a coupon field to checkout", role="user", session=EARLIER,
                  tags=[SHOP, f"session:{EARLIER}"])
        store.add("the blog uses Hugo, not Jekyll", kind="fact", tags=["project:/work/blog"])
        store.add("a note of no project", tags=["decision"])
    return path


def turns(path: Path, session: str = SESSION) -> list[Any]:
    with MemoryStore(path, embedder=None) as store:
        return list(store.list(session=session))


# ---- settings ------------------------------------------------------------------------------------


EXISTING = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test:*)"]},
    "hooks": {
        "PostToolUse": [{"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "npx prettier --write"}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send claude"}]}],
    },
}


def test_install_merges_into_existing_settings_and_twice_adds_nothing(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(EXISTING), encoding="utf-8")

    first = run(tmp_path, "hooks", "install", "claude-code", "--local", "--db", "memory.db")
    assert first.returncode == 0, first.stderr
    assert "added 6 and updated 0" in first.stdout
    merged = json.loads(settings.read_text(encoding="utf-8"))
    assert merged["model"] == "opus" and merged["permissions"] == EXISTING["permissions"]
    assert merged["hooks"]["Notification"] == EXISTING["hooks"]["Notification"]
    post = merged["hooks"]["PostToolUse"]
    assert post[0] == EXISTING["hooks"]["PostToolUse"][0]  # the user's own hook, first and unchanged
    db = str((tmp_path / "memory.db").resolve())
    for event in claude_code.EVENTS:
        commands = [h["command"] for g in merged["hooks"][event] for h in g["hooks"]]
        assert f"{BIN / 'harness-mem'} hook {event} --db {db}" in commands  # by its path: see below

    before = settings.read_bytes(), settings.stat().st_mtime_ns
    again = run(tmp_path, "hooks", "install", "claude-code", "--local", "--db", "memory.db")
    assert again.returncode == 0 and "already installed" in again.stdout
    assert (settings.read_bytes(), settings.stat().st_mtime_ns) == before

    moved = run(tmp_path, "hooks", "install", "claude-code", "--local", "--db", "other.db")  # updated in place
    assert "added 0 and updated 6" in moved.stdout
    assert not (tmp_path / ".claude" / "settings.json").exists()
    after = json.loads(settings.read_text(encoding="utf-8"))
    assert len(after["hooks"]["PostToolUse"]) == 2
    assert after["hooks"]["Stop"][0]["hooks"][0]["command"].endswith(str((tmp_path / "other.db").resolve()))


@pytest.mark.parametrize("content", [b'{"hooks": {', b"[1, 2]", b'{"hooks": {"Stop": {"x": 1}}}'])
def test_install_refuses_a_settings_file_it_cannot_merge_and_leaves_it_untouched(tmp_path: Path,
                                                                                 content: bytes) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_bytes(content)
    done = run(tmp_path, "hooks", "install", "claude-code")
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1
    assert settings.read_bytes() == content
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]  # no temporary file left


def test_the_shared_settings_name_no_path_of_this_machine(tmp_path: Path) -> None:
    done = run(tmp_path, "hooks", "install", "claude-code")
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / ".claude" / "settings.json").read_text(encoding="utf-8"))
    commands = {event: [h["command"] for g in written["hooks"][event] for h in g["hooks"]]
                for event in written["hooks"]}
    assert commands == {event: [f"harness-mem hook {event}"] for event in claude_code.EVENTS}
    assert str(tmp_path) not in json.dumps(written) and str(BIN) not in json.dumps(written)

    for db in (["--db", "memory.db"], ["--db=memory.db"]):
        refused = run(tmp_path, "hooks", "install", "claude-code", *db)
        assert refused.returncode == 2 and "--local" in refused.stderr
    top = run(tmp_path, "--db", "memory.db", "hooks", "install", "claude-code")
    assert top.returncode == 2 and "--local" in top.stderr
    assert json.loads((tmp_path / ".claude" / "settings.json").read_text(encoding="utf-8")) == written
    # $HARNESS_MEM_DB is each machine's own: not refused, and not written either.
    environ = env(tmp_path) | {"HARNESS_MEM_DB": str(tmp_path / "mine.db")}
    done = subprocess.run([str(BIN / "harness-mem"), "hooks", "install", "claude-code"], capture_output=True, text=True,
                          env=environ, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0 and "already installed" in done.stdout, done.stderr


def test_install_local_says_when_git_would_commit_the_local_settings(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    done = run(tmp_path, "hooks", "install", "claude-code", "--local", "--db", "memory.db")
    assert done.returncode == 0 and "add .claude/settings.local.json to .gitignore" in done.stderr
    (tmp_path / ".gitignore").write_text(".claude/settings.local.json\n", encoding="utf-8")
    again = run(tmp_path, "hooks", "install", "claude-code", "--local", "--db", "other.db")
    assert again.returncode == 0 and ".gitignore" not in again.stderr


def test_install_user_scope_writes_the_home_settings(tmp_path: Path) -> None:
    done = run(tmp_path, "hooks", "install", "claude-code", "--user")
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "user-home" / ".claude" / "settings.json").read_text(encoding="utf-8"))
    assert written["hooks"]["SessionStart"][0]["hooks"][0]["command"] == f"{BIN / 'harness-mem'} hook SessionStart"
    assert not (tmp_path / ".claude").exists()


def test_the_installed_commands_capture_when_the_host_runs_them(tmp_path: Path, db: Path) -> None:
    run(tmp_path, "hooks", "install", "claude-code", "--local", "--db", str(db))
    settings = json.loads((tmp_path / ".claude" / "settings.local.json").read_text(encoding="utf-8"))
    command = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    # The host's PATH need not hold the virtual environment harness-mem was installed in.
    hosts_path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                 if not (Path(p) / "harness-mem").exists())
    done = subprocess.run(command, shell=True, input=json.dumps(user_prompt(tmp_path, "make checkout faster")),
                          capture_output=True, text=True, env=env(tmp_path) | {"PATH": hosts_path}, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert [t.content for t in turns(db)] == ["make checkout faster"]


def test_install_carries_the_namespace_and_keeps_a_symlinked_settings_file(tmp_path: Path, db: Path) -> None:
    real = tmp_path / "dotfiles" / "claude-settings.json"
    real.parent.mkdir()
    real.write_text(json.dumps({"model": "opus"}), encoding="utf-8")
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.local.json").symlink_to(real)
    done = run(tmp_path, "-N", "team-a", "hooks", "install", "claude-code", "--local", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".claude" / "settings.local.json").is_symlink()
    written = json.loads(real.read_text(encoding="utf-8"))
    command = written["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert command.endswith("--namespace team-a") and written["model"] == "opus"
    prompt = subprocess.run(command, shell=True, input=json.dumps(user_prompt(tmp_path, "a team prompt")),
                            capture_output=True, text=True, env=env(tmp_path), cwd=tmp_path, timeout=60)
    assert prompt.returncode == 0, prompt.stderr
    assert turns(db) == []  # not in the default namespace
    with MemoryStore(db, namespace="team-a", embedder=None) as store:
        assert [t.content for t in store.list(session=SESSION)] == ["a team prompt"]


# ---- capture -------------------------------------------------------------------------------------


def test_each_capture_event_stores_its_turn(tmp_path: Path, db: Path) -> None:
    prompt = run(tmp_path, "hook", "UserPromptSubmit", "--db", str(db),
                 stdin=user_prompt(tmp_path, "the cart total rounds wrong, ask ada@example.com"), watch=True)
    tool = run(tmp_path, "hook", "PostToolUse", "--db", str(db), stdin=post_tool(tmp_path))
    payload = stop(tmp_path)
    write_transcript(payload, TRANSCRIPT)
    reply = run(tmp_path, "hook", "Stop", "--db", str(db), stdin=payload)
    for done in (prompt, tool, reply):
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""
    assert prompt.stderr == "LOADED:"  # no model runtime imported on the capture path

    stored = turns(db)
    assert [(t.role, t.kind) for t in stored] == [("user", "turn"), ("tool", "turn"), ("assistant", "turn")]
    assert stored[0].content == "the cart total rounds wrong, ask <EMAIL>"  # the store redacted it
    assert stored[1].content == '[Bash] {"command":"pytest -q tests/test_cart.py","description":"Run the cart tests"}' \
                                "\n3 passed in 0.41s"
    assert stored[1].metadata["tool"] == "Bash"
    assert stored[2].content == "Fixed: totals now round half-even in cart.py."
    assert all(t.session == SESSION and SHOP in t.tags and t.source == "claude-code" for t in stored)


def test_a_repeated_tool_result_and_a_reply_without_text_store_nothing(tmp_path: Path, db: Path) -> None:
    for _ in range(2):
        assert run(tmp_path, "hook", "PostToolUse", "--db", str(db), stdin=post_tool(tmp_path)).returncode == 0
    payload = stop(tmp_path)
    write_transcript(payload, TRANSCRIPT[:4])  # ends on a tool result: no reply yet
    assert run(tmp_path, "hook", "Stop", "--db", str(db), stdin=payload).returncode == 0
    assert [t.role for t in turns(db)] == ["tool"]


# ---- session start -------------------------------------------------------------------------------


def test_session_start_returns_the_memories_as_additional_context(tmp_path: Path, db: Path) -> None:
    run(tmp_path, "hook", "UserPromptSubmit", "--db", str(db), stdin=user_prompt(tmp_path, "a prompt of this session"))
    done = run(tmp_path, "hook", "SessionStart", "--db", str(db), stdin=session_start(tmp_path), watch=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "LOADED:"
    output = json.loads(done.stdout)
    assert list(output) == ["hookSpecificOutput"]
    assert output["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    context = output["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(claude_code.OPEN_MARK) and context.endswith(claude_code.CLOSE_MARK)
    assert "make ship" in context and "totals use decimal" in context  # the project's facts and notes
    assert "add a coupon field to checkout" not in context  # a raw prompt is no knowledge
    assert "Hugo" not in context and "no project" not in context  # another project's, nobody's
    assert "a prompt of this session" not in context


def test_injected_context_is_stripped_before_capture(tmp_path: Path, db: Path) -> None:
    context = json.loads(run(tmp_path, "hook", "SessionStart", "--db", str(db),
                             stdin=session_start(tmp_path)).stdout)["hookSpecificOutput"]["additionalContext"]
    pasted = run(tmp_path, "hook", "UserPromptSubmit", "--db", str(db),
                 stdin=user_prompt(tmp_path, f"why did you say this?\n{context}\nplease explain"))
    only = run(tmp_path, "hook", "UserPromptSubmit", "--db", str(db), stdin=user_prompt(tmp_path, context))
    payload = stop(tmp_path)
    # A reply quoting the block with its end cut off: everything from the opening mark goes.
    write_transcript(payload, [TRANSCRIPT[1], {"type": "assistant", "message": {"content": [
        {"type": "text", "text": f"Here is what I was given: {context[:60]}"}]}}])
    reply = run(tmp_path, "hook", "Stop", "--db", str(db), stdin=payload)
    assert pasted.returncode == only.returncode == reply.returncode == 0
    stored = turns(db)
    assert [t.content for t in stored] == ["why did you say this?\n\nplease explain", "Here is what I was given:"]
    assert not any("make ship" in t.content or "harness-mem-recall" in t.content for t in stored)


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("event", "stdin"), [
    ("UserPromptSubmit", b"not json at all"),
    ("UserPromptSubmit", b"\xff\xfe{"),
    ("UserPromptSubmit", b'["session_id", "prompt"]'),
    ("UserPromptSubmit", b'{"prompt": "no session"}'),
    ("UserPromptSubmit", b'{"session_id": "s", "prompt": 42}'),
    ("PostToolUse", b'{"session_id": "s", "tool_name": "Bash"}'),
    ("Stop", b'{"session_id": "s"}'),
    ("PostToolUse", b'{"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "x"}'),
    ("Notification", b'{"session_id": "s"}'),
    ("SessionStart", b""),
])
def test_bad_input_is_one_line_a_nonblocking_status_and_nothing_stored(tmp_path: Path, db: Path, event: str,
                                                                        stdin: bytes) -> None:
    with MemoryStore(db, embedder=None) as store:
        before = store.count()
    done = run(tmp_path, "hook", event, "--db", str(db), stdin=stdin)
    assert done.returncode == 1  # not 0 (it failed) and not 2 (which blocks Claude Code's prompt or stop)
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    with MemoryStore(db, embedder=None) as store:
        assert store.count() == before


def test_a_missing_store_gives_no_context_and_a_capture_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.db")
    start = run(tmp_path, "hook", "SessionStart", "--db", missing, stdin=session_start(tmp_path))
    assert (start.returncode, start.stdout, start.stderr) == (0, "", "")
    prompt = run(tmp_path, "hook", "UserPromptSubmit", "--db", missing, stdin=user_prompt(tmp_path, "hello"))
    assert prompt.returncode == 1 and "harness-mem --db" in prompt.stderr and prompt.stderr.count("\n") == 1
    assert not Path(missing).exists()


# ---- the pieces, in process ----------------------------------------------------------------------


def test_strip_injected_and_last_reply(tmp_path: Path) -> None:
    block = f"{claude_code.OPEN_MARK}\nold\n{claude_code.CLOSE_MARK}"
    assert claude_code.strip_injected(f"a {block} b {block}") == "a  b"
    assert claude_code.strip_injected(f"kept {claude_code.OPEN_MARK} cut off") == "kept"
    assert claude_code.strip_injected(block) == ""
    payload = stop(tmp_path)
    write_transcript(payload, TRANSCRIPT)
    assert claude_code.last_reply(Path(payload["transcript_path"])) == "Fixed: totals now round half-even in cart.py."
    assert claude_code.last_reply(tmp_path / "missing.jsonl") is None


def test_only_the_tail_of_a_transcript_is_read(tmp_path: Path) -> None:
    transcript = tmp_path / "long.jsonl"
    old = json.dumps({"type": "assistant", "message": {"content": "an old reply " + "x" * 1000}})
    records = [old] * 50 + [json.dumps(r) for r in TRANSCRIPT]
    transcript.write_text("\n".join(records) + "\n", encoding="utf-8")
    tail = claude_code.transcript_tail(transcript, limit=len(records[-1]) + len(records[-2]) + 10)
    assert tail is not None and tail.splitlines() == records[-2:]  # the line cut in two is left out
    assert claude_code.last_reply(transcript) == "Fixed: totals now round half-even in cart.py."
