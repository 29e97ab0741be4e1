"""``harness-mem hooks install`` and ``harness-mem hook EVENT``: memory for coding agents' hooks.

The logic is :mod:`harness_mem.integrations.claude_code`; these commands only read stdin, open the
store and print. ``cli.py`` registers both. The console script answers most hooks without this
module (:mod:`harness_mem.entry` hands them to :mod:`harness_mem.hook_writer`); ``hook`` here is the
in-process path it falls back to, and the one for every other command line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from .cliutils import StoreLocation
from .errors import InvalidInputError
from .hook_client import MAX_PAYLOAD_BYTES
from .integrations import claude_code

if TYPE_CHECKING:
    from .store import MemoryStore

HOSTS = ("claude-code",)


@click.group("hooks")
def hooks() -> None:
    """Install harness-mem's hooks into a coding agent.

    \b
    Example:
        harness-mem hooks install claude-code --db ~/agent-memory.db
    """


@hooks.command("install")
@click.argument("host", type=click.Choice(HOSTS))
@click.option("--project", "scope", flag_value="project", default=True,
              help="Into .claude/settings.json in the current directory, the file a team commits (the default):"
                   " the hooks run `harness-mem` from PATH, with no path of this machine.")
@click.option("--local", "scope", flag_value="local",
              help="Into .claude/settings.local.json, this project on this machine only (not committed).")
@click.option("--user", "scope", flag_value="user", help="Into ~/.claude/settings.json, for every project.")
@click.option("--db", "db_path", type=StoreLocation(),
              help="The store the hooks use (default: harness-mem --db, $HARNESS_MEM_DB, else the default file);"
                   " not with --project.")
@click.pass_context
def install(ctx: click.Context, host: str, scope: str, db_path: Path | str | None) -> None:
    """Add the hooks to Claude Code's settings, keeping every other hook and setting.

    SessionStart gives the project's decisions, conventions and facts as context; UserPromptSubmit
    stores the prompt and gives the memories it touches; PostToolUse and Stop store each tool
    result and the reply; PreCompact and SessionEnd consolidate the session in the background.
    Running it again changes nothing (or updates the --db of harness-mem's own hooks).

    \b
    Example:
        harness-mem hooks install claude-code                  # the team's .claude/settings.json
        harness-mem hooks install claude-code --local --db ~/agent-memory.db
        harness-mem hooks install claude-code --user
    """
    root = ctx.find_root().params
    chosen = db_path if db_path is not None else root.get("db_path")
    shared = scope in claude_code.SHARED_SCOPES
    given = db_path is not None or ctx.find_root().get_parameter_source("db_path") is ParameterSource.COMMANDLINE
    if shared and given:
        raise click.UsageError("--db names a store on this machine, and .claude/settings.json is shared with"
                               " the team: use --local (.claude/settings.local.json), or --user, or leave --db"
                               " out and set $HARNESS_MEM_DB")
    if shared:
        chosen = None  # $HARNESS_MEM_DB stays where it is: each machine's hooks read their own
    db = None if chosen is None else chosen if isinstance(chosen, str) else str(Path(chosen).expanduser().resolve())
    namespaces = root.get("namespaces") or ()
    namespace = namespaces[0] if namespaces else None  # hooks write (and read) the first namespace alone
    path = claude_code.settings_path(scope)
    # The shared file runs whatever harness-mem each machine has on its PATH; the others this one's.
    report = claude_code.install(path, db, None if namespace in (None, "default") else str(namespace),
                                 program="harness-mem" if shared else None)
    if report.changed:
        click.echo(f"{path}: added {report.added} and updated {report.updated} of"
                   f" {len(claude_code.EVENTS)} hooks ({', '.join(claude_code.EVENTS)})")
    else:
        click.echo(f"{path}: the hooks are already installed")
    if scope == "local" and not _ignored_by_git(path):
        click.echo(f"note: git does not ignore {path.name}, which names paths of this machine — add"
                   " .claude/settings.local.json to .gitignore", err=True)
    if shared and not _on_path("harness-mem"):
        click.echo("note: these hooks run `harness-mem` from PATH, where this shell has none — put it there"
                   " (pipx install harness-mem) or use --local", err=True)
    if db is not None and "://" not in db and not Path(db).exists():
        click.echo(f"note: no database at {db} yet — create it with `harness-mem --db {db} init`", err=True)


def _ignored_by_git(path: Path) -> bool:
    """True unless ``path`` is in a git work tree that would not ignore it (no git: nothing to commit)."""
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(path.parent), "check-ignore", "-q", str(path)],  # noqa: S603, S607
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return done.returncode != 1  # 0: ignored; 128: not a repository; 1: would be committed


def _on_path(program: str) -> bool:
    import shutil

    return shutil.which(program) is not None


@click.command("hook")
@click.argument("event")
@click.option("--db", "db_path", type=StoreLocation(),
              help="Database file or postgresql:// URL (the same as harness-mem --db, given after the command).")
@click.option("--namespace", help="Tenant (the same as harness-mem --namespace, given after the command).")
@click.pass_context
def hook(ctx: click.Context, event: str, db_path: Path | str | None, namespace: str | None) -> None:
    """Answer one Claude Code hook: its JSON on stdin.

    SessionStart prints the project's knowledge (Claude Code's hookSpecificOutput JSON);
    UserPromptSubmit stores the prompt and prints the memories it touches, if any; PostToolUse and
    Stop store the turn; PreCompact and SessionEnd start the session's consolidation. Errors are one
    line and exit status 1, never 2, which would block the host. No embedding model is loaded.

    \b
    Example:
        echo '{"session_id": "s1", "prompt": "hi"}' | harness-mem hook UserPromptSubmit
    """
    raw = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise InvalidInputError(f"the {event} hook input is over {MAX_PAYLOAD_BYTES // 2**20} MiB")
    payload = claude_code.parse_payload(raw, event)
    options = dict(ctx.find_root().obj or {})
    if namespace is not None:
        options["namespace"] = namespace
    location = db_path if db_path is not None else options.get("db")
    if location is None:
        from .db import default_path

        location = default_path()
    if not _exists(location):
        if event == claude_code.CONTEXT_EVENT:
            return  # nothing remembered yet: no context, not an error
        raise click.ClickException(f"no database at {location} — create one with `harness-mem --db {location} init`")
    store = _open(location, options)
    try:
        answered = claude_code.answer(store, payload, event)
    finally:
        store.close()
    for notice in answered.notices:
        click.echo(f"note: {notice}", err=True)
    if answered.output is not None:
        click.echo(answered.output)


def _exists(location: Path | str) -> bool:
    from .engines import is_url

    return is_url(location) or Path(location).exists()


def _open(location: Path | str, options: dict[str, object]) -> MemoryStore:
    from .db import ONE_SHOT_CACHE_KIB
    from .store import MemoryStore

    redactor = options.get("redactor", "default")
    # embedder=None: a hook never loads a model; turns go in without vectors (`reindex` adds them).
    return MemoryStore(location, namespace=str(options.get("namespace") or "default"), embedder=None,
                       redactor="default" if redactor == "default" else None, cache_kib=ONE_SHOT_CACHE_KIB)
