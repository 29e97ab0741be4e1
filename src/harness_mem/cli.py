"""The ``harness-mem`` command: a thin layer over :mod:`harness_mem`.

Each command parses its options, calls one library function and prints the result: readable text
by default, one JSON object per line with ``--json``. Data goes to stdout; progress and errors to
stderr. Library errors become one ``Error: …`` line and exit status 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import cliutils, hook_cli, key_cli, migrations
from .cliutils import (
    FiniteFloat,
    ModelSettings,
    Query,
    StoreLocation,
    command_group,
    count_type,
    db_option,
    echo_json,
    gc_report_lines,
    json_object_option,
    json_option,
    namespaces_option,
    shown,
    stats_lines,
)
from .db import CACHE_SIZE_KIB, ONE_SHOT_CACHE_KIB, connect, default_path
from .engines import is_url, open_storage, shown_location
from .errors import InvalidInputError, MissingVectorsWarning, ModelMissingWarning
from .models import MAX_CONTENT_CHARS, Entry, Hit, counted, dumps, format_time
from .progress import ProgressLines, SessionLines
from .provenance import cited_turns
from .providers.embeddings import EMBEDDERS, giving_vectors
from .providers.hints import MEM_HINTS
from .store import MemoryStore, OnConflict
from .sync.forks import Fork

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar  # the type click.progressbar returns

    from .experience.episode import Episode
    from .experience.store import ExperienceStore

# Imports shorter than this finish before a progress bar would be worth drawing.
PROGRESS_MIN_BYTES = 256 * 1024
# The most `add -` and `redact` read from stdin: an entry's longest content, four UTF-8 bytes a
# character. Past it the input is refused before more is read (`/dev/zero` would fill the memory).
MAX_STDIN_BYTES = 4 * MAX_CONTENT_CHARS
# More processes than this cannot help an import (one writer is the bottleneck), and far more would
# be a fork bomb.
MAX_IMPORT_WORKERS = 64


@command_group(prog_name="harness-mem", raise_errors_env="HARNESS_MEM_RAISE_ERRORS")
@db_option
@namespaces_option
@click.option("--embedder", type=click.Choice(["auto", "none", *EMBEDDERS]), default="auto", show_default=True,
              help="auto: the file's own model (the built-in one for a new file) unless the file is"
                   " keyword-only or $HARNESS_MEM_EMBEDDER says otherwise; none: keyword only; or a model"
                   " by name (switching models is `reindex`).")
@click.option("--no-redact", is_flag=True,
              help="Store text as given, without redacting PII and secrets (recorded on each entry).")
@click.pass_context
def cli(ctx: click.Context, db_path: Path | None, namespaces: tuple[str, ...], embedder: str, no_redact: bool) -> None:
    """Long-term memory for LLM agents, in one SQLite file.

    \b
    Example:
        harness-mem add "we chose argon2id for password hashing" --tag decision
        harness-mem recall "password hashing"
    """
    ctx.obj = {
        "db": db_path or default_path(),
        "namespace": namespaces[0] if namespaces else "default",  # the one written
        "namespaces": namespaces or ("default",),  # every one read, the written first
        "embedder": embedder,
        "redactor": None if no_redact else "default",
    }


@contextmanager
def open_store(ctx: click.Context, *, create: bool = False, rekey: bool = True,
               serving: bool = False) -> Iterator[MemoryStore]:
    """The store at ``--db``. Only commands that write (``create=True``) may bring a new file into
    being: a read on a path that does not exist is a mistyped path, so it creates nothing. An older
    store is rekeyed on open unless ``rekey`` is False (``migrate`` does it with a progress bar).
    ``serving``: the store answers many requests (``ui``), so it keeps the full page cache."""
    path = ctx.obj["db"]
    if not create and not is_url(path) and str(path) != ":memory:" and not Path(path).exists():
        raise click.ClickException(
            f"no database at {path} — create one with `harness-mem init` (or `add`/`import`, which create it)"
        )
    # A read answers once and exits: a small page cache keeps a cold recall's memory down (writes,
    # an import above all, and long-running processes such as `mcp` keep the default).
    said = (MissingVectorsWarning, ModelMissingWarning)  # each said once, after the command's output
    with warnings.catch_warnings(record=True) as caught:
        for category in said:
            warnings.simplefilter("always", category)
        store = MemoryStore(path, namespaces=ctx.obj["namespaces"], embedder=ctx.obj["embedder"],
                            redactor=ctx.obj["redactor"], cache_kib=CACHE_SIZE_KIB if create or serving else ONE_SHOT_CACHE_KIB,
                            rekey=rekey)
        try:
            yield store
        finally:
            store.close()
    for message in dict.fromkeys(str(w.message) for w in caught if w.category in said):
        click.echo(f"warning: {shown(message)}", err=True)


class JsonObject(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A JSON object given on the command line (``--where``)."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            self.fail('takes a JSON object, like \'{"team": "ops"}\'', param, ctx)
        return parsed


def filter_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The filters shared by recall and list."""
    options = [
        click.option("--kind", help="note, turn, episode, fact or summary."),
        click.option("--role", help="Only turns by this role/speaker."),
        click.option("--session", help="Only this session."),
        click.option("--session-prefix", help="Only sessions whose id starts with this."),
        click.option("--tag", "tags", multiple=True, help="Must carry this tag (repeatable: all of them)."),
        click.option("--since", help="Created at or after: ISO-8601 or an age like 7d, 24h."),
        click.option("--until", help="Created at or before: ISO-8601 or an age."),
        click.option("--exclude-session", "exclude_sessions", multiple=True, help="Not this session (repeatable)."),
        click.option("--exclude-kind", "exclude_kinds", multiple=True, help="Not this kind (repeatable)."),
        click.option("--exclude-tag", "exclude_tags", multiple=True, help="Nothing with this tag (repeatable)."),
        click.option("--where", "where", type=JsonObject(), default=None,
                     help='Metadata conditions as JSON: \'{"team": "ops", "score": {"$gte": 3}}\''
                          " ($eq $ne $gt $gte $lt $lte $in; a.b for nested keys)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _describe(entry: Entry) -> str:
    parts = [entry.kind, entry.id, format_time(entry.created_at)[:16].replace("T", " ")]
    who = " · ".join(x for x in (entry.role, entry.session) if x)
    if who:
        parts.append(f"({who})")
    if entry.tags:
        parts.append(" ".join(f"#{t}" for t in entry.tags))
    return "  ".join(parts)


# ---- setup and inspection ----------------------------------------------------------------------


@cli.command()
@click.option("--keyword-only", is_flag=True,
              help="Keep no vectors: every later open recalls by keyword and loads no model.")
@click.pass_context
def init(ctx: click.Context, keyword_only: bool) -> None:
    """Create the database (and apply migrations); harmless when it exists.

    \b
    Example:
        harness-mem --db agent.db init
        harness-mem --db notes.db init --keyword-only
    """
    if keyword_only:
        ctx.obj["embedder"] = "none"
    with open_store(ctx, create=True) as store:
        if keyword_only and not store.keyword_only:
            raise click.ClickException(
                f"{store.path} already exists with vectors — `harness-mem reindex --keyword-only` drops them"
            )
        mode = "keyword-only" if store.keyword_only else "keyword + vectors"
        click.echo(f"Ready: {store.path} (schema {store.stats()['schema_version']:04d}, {mode})")


@cli.group()
def db() -> None:
    """About the database file."""


@db.command("path")
@click.pass_context
def db_path_command(ctx: click.Context) -> None:
    """Print the database path in use.

    \b
    Example:
        harness-mem db path
    """
    click.echo(shown_location(ctx.obj["db"]))


@cli.command()
@click.argument("source", type=StoreLocation())
@click.argument("target", type=StoreLocation())
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@json_object_option
def copy(source: Path | str, target: Path | str, quiet: bool, as_json: bool) -> None:
    """Copy a store to another (SQLite file ⇄ PostgreSQL URL): every entry that is not forgotten,
    with its history, sessions and vectors (and their model). Running it again resumes.

    \b
    Example:
        harness-mem copy memory.db postgresql://me@db.internal/team_memory
    """
    from .copying import copy_store

    lines = None if quiet else ProgressLines("copy")
    report = copy_store(source, target, progress=lines)
    if lines is not None:
        lines.close()
    if as_json:
        echo_json(vars(report))
        return
    click.echo(f"Copied {counted(report.copied, 'entry', 'entries')} ({report.already} already there) and"
               f" {counted(report.vectors, 'vector')}"
               f" ({report.model or 'keyword only'}) from {report.source} to {report.target}")


@db.command("grant")
@click.argument("role")
@click.argument("namespace", required=False)
@click.option("--read-only", is_flag=True, help="Let ROLE read NAMESPACE, never write it.")
@click.pass_context
def db_grant(ctx: click.Context, role: str, namespace: str | None, read_only: bool) -> None:
    """Let a PostgreSQL role read NAMESPACE (default: -N's), and write it unless --read-only,
    beside the namespaces granted to it before. A role granted any namespace is confined: the
    database lets it reach those alone. Run as the store's owner.

    \b
    Example:
        harness-mem --db postgresql://owner@db/memory db grant ada ada
        harness-mem --db postgresql://owner@db/memory db grant ada team --read-only
    """
    with open_store(ctx, create=True) as store:
        store.grant(role, namespace, read_only=read_only)
        granted = namespace or ctx.obj["namespace"]
        click.echo(f"{role} may now {'read' if read_only else 'read and write'} namespace {granted!r} of {store.path}")


@db.command("revoke")
@click.argument("role")
@click.argument("namespace", required=False)
@click.pass_context
def db_revoke(ctx: click.Context, role: str, namespace: str | None) -> None:
    """Take NAMESPACE (default: -N's) back from a PostgreSQL role. A role left with no namespace
    reads nothing. Run as the store's owner.

    \b
    Example:
        harness-mem --db postgresql://owner@db/memory db revoke ada team
    """
    taken = namespace or ctx.obj["namespace"]
    with open_store(ctx) as store:
        if not store.revoke(role, namespace):
            raise click.ClickException(f"{role} had not been granted namespace {taken!r} — `harness-mem db grants`"
                                       " lists what was")
    click.echo(f"{role} may no longer read or write namespace {taken!r}")


@db.command("grants")
@json_option
@click.pass_context
def db_grants(ctx: click.Context, as_json: bool) -> None:
    """List every role's namespaces (PostgreSQL): ROLE  NAMESPACE  read-write|read-only.

    \b
    Example:
        harness-mem --db postgresql://owner@db/memory db grants
    """
    with open_store(ctx) as store:
        found = store.grants()
    for role, namespace, read_only in found:
        if as_json:
            echo_json({"role": role, "namespace": namespace or None, "read_only": read_only})
        else:
            click.echo(f"{role}\t{namespace or '(none: reads nothing)'}\t{'read-only' if read_only else 'read-write'}")


@cli.command()
@click.argument("name", required=False)
def schema(name: str | None) -> None:
    """Print the JSON schema of a record (entry, hit, import-line, filters, episode,
    skill-front-matter, settings, stats, sync-op), or of all of them by name.

    \b
    Example:
        harness-mem schema import-line
    """
    from .schema import json_schema, schemas

    try:
        echo_json(json_schema(name) if name else schemas())
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None


@cli.command()
@json_object_option
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check SQLite, FTS5, sqlite-vec, the schema and the file's integrity.

    \b
    Example:
        harness-mem doctor
    """
    with open_store(ctx, rekey=False) as store:  # it says which kind the file is, and changes nothing
        report = store.diagnose()
    if as_json:
        echo_json(report)
    else:
        for check in report["checks"]:
            mark = "ok  " if check["ok"] else "FAIL"
            click.echo(f"{mark}  {check['name']}: {check['detail']}")
    if not all(check["ok"] for check in report["checks"]):
        ctx.exit(1)


@cli.command()
@click.option("--list", "list_", is_flag=True, help="List migrations and whether each is applied (read-only).")
@click.option("--set", "set_name", help="With --list: only this migration set (harness_mem, harness_loop, …).")
@json_option
@click.pass_context
def migrate(ctx: click.Context, list_: bool, set_name: str | None, as_json: bool) -> None:
    """Apply pending schema migrations (opening the store does this too), and key an older store's
    pseudonyms outside the file, with its identity key (a progress bar shows how far it is).

    --list shows harness_mem's migrations, applied, skipped (retired ones a file does not need) or
    pending, then what the file records for other sets, such as harness_loop's runs tables (opening
    a run store applies those).

    \b
    Example:
        harness-mem migrate --list
        harness-mem migrate --list --set harness_loop --json
    """
    if not list_:
        if set_name is not None:
            raise click.UsageError("--set goes with --list: harness-mem applies only its own set")
        with open_store(ctx, create=True, rekey=False) as store:
            click.echo(f"Schema is at {store.stats()['schema_version']:04d}")
            if store.pseudonym_keying != "outside" and not store.storage.rekeys_pseudonyms:
                click.echo(f"Pseudonyms stay keyed inside the store: rekeying an older {store.storage.engine}"
                           " store is not supported yet", err=True)
            elif store.pseudonym_keying != "outside":
                with click.progressbar(length=1, label="Rekeying pseudonyms", file=sys.stderr) as bar:
                    def advance(done: int, total: int) -> None:
                        bar.length = max(total, 1)
                        bar.update(done - bar.pos)

                    changed = store.rekey_pseudonyms(progress=advance)
                click.echo(f"Pseudonyms keyed outside the store ({counted(changed, 'row')} rewritten)")
        return
    found = _migration_overview(ctx.obj["db"])
    present = sorted({status.set_name for status in found})
    if set_name is not None:
        found = [status for status in found if status.set_name == set_name]
        if not found:
            raise click.ClickException(
                f"no migration set {set_name!r} in {shown_location(ctx.obj['db'])} — it has: {', '.join(present) or 'none'}"
            )
    for status in found:
        if as_json:
            echo_json(status.to_dict())
            continue
        when = f"{status.state} {status.applied_at}" if status.applied_at else status.state
        note = f"  (retired: {status.retired})" if status.retired else ""
        if not status.known and status.set_name == migrations.HARNESS_MEM.name:
            note += "  (newer than this harness-mem)"
        click.echo(f"{status.set_name:<12}  {when:<33}  {status.name}{note}")


def _migration_overview(target: Path | str) -> list[migrations.MigrationStatus]:
    """Every migration the store records or this code ships, without changing anything: a file
    that does not exist yet is listed as an empty one, and not created."""
    if is_url(target):
        storage = open_storage(target, read_only=True)
        try:
            return storage.migration_status()
        finally:
            storage.close()
    exists = str(target) == ":memory:" or Path(target).exists()
    conn = connect(target if exists else ":memory:").conn
    try:
        return migrations.overview(conn)
    finally:
        conn.close()


# ---- writing -----------------------------------------------------------------------------------


@cli.command()
@click.argument("text")
@click.option("--kind", help="note (default), turn (default with --role), episode, fact, summary.")
@click.option("--role", help="Who said it: user, assistant, tool, or a speaker's name.")
@click.option("--session", help="Session (conversation) id.")
@click.option("--tag", "tags", multiple=True, help="Tag (repeatable).")
@click.option("--source", help="Where it came from.")
@click.option("--ttl-days", type=float, help="Forget it after this many days.")
@click.option("--id", "entry_id", help="Your own id (unique per namespace).")
@json_option
@click.pass_context
def add(ctx: click.Context, text: str, kind: str | None, role: str | None, session: str | None,
        tags: tuple[str, ...], source: str | None, ttl_days: float | None, entry_id: str | None,
        as_json: bool) -> None:
    """Remember TEXT (use - to read it from stdin).

    \b
    Example:
        harness-mem add "deploys happen on Tuesdays" --tag ops
        echo "the build needs node 20" | harness-mem add - --kind fact
    """
    if text == "-":
        text = _read_stdin_text("split it into several entries")
    with open_store(ctx, create=True) as store:
        entry = store.add(text, kind=kind, role=role, session=session, tags=tags, source=source,
                          ttl_days=ttl_days, id=entry_id)
    if as_json:
        echo_json(entry.to_dict())
    else:
        click.echo(entry.id)


def _read_stdin_text(fix: str) -> str:
    """stdin as UTF-8 text, read no further than :data:`MAX_STDIN_BYTES`; ``fix`` says what to do
    about a longer input."""
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise click.ClickException(f"stdin holds more than {MAX_STDIN_BYTES:,} bytes, more than an entry may"
                                   f" ({MAX_CONTENT_CHARS:,} characters) — {fix}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"stdin is not valid UTF-8 (byte {exc.start}) — convert it to UTF-8") from None


@cli.command("import")
@click.argument("sources", metavar="[SOURCE]...", nargs=-1)
@click.option("--format", "format_", type=click.Choice(["jsonl", "claude-code", "codex"]), default="jsonl",
              show_default=True,
              help="jsonl: harness-mem's own lines (one FILE or -); claude-code: Claude Code's transcripts"
                   " (files or folders, default ~/.claude/projects); codex: Codex CLI's session files"
                   " (default ~/.codex/sessions).")
@click.option("--replace", is_flag=True, help="Replace entries whose id is already stored (default: skip them).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--workers", type=count_type(0, MAX_IMPORT_WORKERS), default=None,
              help="Processes that parse and redact while this one writes (default: 1 for a large input"
                   " on a machine with two cores or more, else 0).")
@json_option
@click.pass_context
def import_(ctx: click.Context, sources: tuple[str, ...], format_: str, replace: bool, quiet: bool,
            workers: int | None, as_json: bool) -> None:
    """Import entries from a JSON Lines FILE (or - for stdin), or a coding agent's transcripts.

    One object a line: {"id"?, "text"|"content", "kind"?, "role"?, "session"?, "tags"?,
    "timestamp"?, "metadata"?}. Good lines are kept; every bad line is reported with its number,
    and the exit status is 1 if any line was rejected. Re-importing is harmless: known ids are skipped.

    With --format claude-code or codex, each SOURCE is a transcript or a folder of them (none: the
    tool's own folder). Sessions, roles, times, tool calls and the project are kept; what the host
    injected is left out; each file is read from where the last run stopped (an unchanged one not at
    all), so running it again reads and imports only what is new. A file that is not such a
    transcript is refused and nothing is stored.

    \b
    Example:
        harness-mem import turns.jsonl
        cat turns.jsonl | harness-mem import - --json
        harness-mem import --format claude-code
        harness-mem import --format codex ~/.codex/sessions/2025/06
    """
    if format_ != "jsonl":
        if replace or workers is not None:
            raise click.UsageError(f"--{'replace' if replace else 'workers'} works with --format jsonl only")
        _import_transcripts(ctx, [Path(s).expanduser() for s in sources], format_, quiet, as_json)
        return
    if len(sources) != 1:
        raise click.UsageError("--format jsonl takes one SOURCE: a FILE, or - for stdin"
                               if sources else "Missing argument 'SOURCE'.")
    param = next(p for p in ctx.command.params if p.name == "sources")
    source = click.File("rb").convert(sources[0], param, ctx)
    if sources[0] != "-" and Path(sources[0]).is_file():
        from .importers import format_of

        # A transcript's records are no entries: every line would be rejected (or, for a record
        # with a "content" of its own, stored as a note).
        transcript = format_of(Path(sources[0]))
        if transcript is not None:
            raise click.ClickException(shown(
                f"{sources[0]} is a {transcript.title}, not harness-mem's JSON Lines — import it with"
                f" --format {transcript.name}; nothing was imported"))
    from .jsonl import import_jsonl, read_lines

    size = _file_size(source)
    on_conflict: OnConflict = "replace" if replace else "ignore"
    show_bar = not quiet and size is not None and size >= PROGRESS_MIN_BYTES
    with open_store(ctx, create=True) as store:
        if show_bar:
            # The bar follows what is stored (read, redacted, embedded and written), not what is read.
            bar: ProgressBar[int]
            with click.progressbar(length=size, label="Importing", file=sys.stderr,
                                   item_show_func=lambda added: None if added is None else f"{added:,} entries stored"
                                   ) as bar:
                report = import_jsonl(store, read_lines(source), on_conflict=on_conflict, workers=workers,
                                      written=lambda done, added: bar.update(done, added))  # type: ignore[arg-type]  # click types the item as None for a bar over a length
        else:
            report = import_jsonl(store, source, on_conflict=on_conflict, workers=workers)
    if as_json:  # the report on stdout, for a script; the bad lines are in it, redacted
        echo_json({"lines": report.lines, "added": report.added, "skipped": report.skipped,
                   "rejected": [{"line": e.line, "reason": shown(e.reason)} for e in report.errors]})
        ctx.exit(1 if report.errors else 0)
    for error in report.errors:
        click.echo(f"Error: {shown(str(error))}", err=True)  # a reason may quote the line
    click.echo(
        f"Imported {counted(report.added, 'entry', 'entries')} from {counted(report.lines, 'line')}"
        f" ({report.skipped} already stored, {len(report.errors)} rejected)",
        err=True,
    )
    if report.errors:
        ctx.exit(1)


def _import_transcripts(ctx: click.Context, paths: list[Path], format_: str, quiet: bool, as_json: bool) -> None:
    """``import --format claude-code|codex``: find the transcripts, import what is new, say what was skipped."""
    from .importers import find_transcripts, import_transcripts

    files, passed = find_transcripts(paths, format_)  # refuses a file that is not one before the store opens
    size = sum(_size_of(f) for f in files)
    with open_store(ctx, create=True) as store:
        told = not quiet and size >= PROGRESS_MIN_BYTES
        lines = ProgressLines("import", size, unit="bytes", noun="turns") if told else None
        report = import_transcripts(store, files, format_, progress=lines)
    report.files_skipped.update(passed)
    if as_json:
        echo_json({**report.to_dict(), "skipped": {shown(k): v for k, v in report.skipped.most_common()},
                   "files_skipped": {shown(k): v for k, v in report.files_skipped.most_common()}})
        return
    click.echo(
        f"Imported {counted(report.turns, 'turn')} from {counted(report.files, 'file')}"
        f" ({counted(report.sessions, 'session')}, {report.new_sessions} with new turns;"
        f" {counted(report.already_stored, 'turn')} already stored)", err=True)
    if report.unchanged:
        click.echo(f"{counted(report.unchanged, 'file')} unchanged since the last import: not read", err=True)
    for noun, reasons in (("record", report.skipped), ("file", report.files_skipped)):
        if reasons:
            click.echo(f"Skipped {counted(sum(reasons.values()), noun)}: "
                       + ", ".join(f"{n} {shown(reason)}" for reason, n in reasons.most_common()), err=True)


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _file_size(stream: Any) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size or None
    except (OSError, ValueError, AttributeError):
        return None


@cli.command()
@click.argument("entry_id")
@click.pass_context
def delete(ctx: click.Context, entry_id: str) -> None:
    """Forget the entry ENTRY_ID (its index rows go too).

    \b
    Example:
        harness-mem delete 01J0Z3V6Q4XK8M2N5P7R9S1T3V
    """
    with open_store(ctx) as store:
        if not store.delete(entry_id):
            raise click.ClickException(
                f"no entry with id {entry_id!r} in namespace {store.namespace!r} — `harness-mem list` shows ids"
            )
    click.echo(f"Deleted {entry_id}", err=True)


@cli.command()
@click.argument("old_id")
@click.argument("text")
@json_object_option
@click.pass_context
def supersede(ctx: click.Context, old_id: str, text: str, as_json: bool) -> None:
    """Correct the entry OLD_ID with TEXT: a new entry replaces it, and the old one is kept, marked.

    Recall then shows the new text only (`--all-versions` shows both); `get` shows the chain.

    \b
    Example:
        harness-mem supersede 01J0Z3V6Q4XK8M2N5P7R9S1T3V "the deploy target is staging-eu"
    """
    with open_store(ctx) as store:
        done = store.supersede(old_id, text)
    if as_json:
        echo_json(done.to_dict())
    else:
        click.echo(done.id)


@cli.command()
@click.argument("entry_id", required=False)
@click.option("--session", help="Every entry of this session.")
@click.option("--tag", "tags", multiple=True, help="Every entry carrying this tag (repeatable: all of them).")
@click.option("--kind", help="Every entry of this kind.")
@click.option("--since", help="Created at or after: ISO-8601 or an age like 7d.")
@click.option("--until", help="Created at or before: ISO-8601 or an age.")
@click.pass_context
def forget(ctx: click.Context, entry_id: str | None, session: str | None, tags: tuple[str, ...], kind: str | None,
           since: str | None, until: str | None) -> None:
    """Forget ENTRY_ID, or every entry the options select: recall never returns it again.

    The content stays in the file until `harness-mem purge`.

    \b
    Example:
        harness-mem forget --session s-42
    """
    with open_store(ctx) as store:
        n = store.forget(entry_id, session=session, tags=tags, kind=kind, since=since, until=until)
    click.echo(f"Forgot {counted(n, 'entry', 'entries')} (`harness-mem purge` removes their content from the file)", err=True)


@cli.command()
@click.pass_context
def purge(ctx: click.Context) -> None:
    """Remove forgotten and expired entries from the file: content, index rows and vectors.

    The file is rewritten after (free disk space as large as the file is needed); when that fails,
    the entries are gone from every table and the next `harness-mem gc` finishes the purge.

    \b
    Example:
        harness-mem purge
    """
    with open_store(ctx) as store:
        n = store.purge()
    click.echo(f"Purged {counted(n, 'entry', 'entries')} (forgotten or expired) from the file", err=True)


# ---- reading -----------------------------------------------------------------------------------


@cli.command()
@click.argument("query", type=Query())
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(1, 1000), help="How many hits.")
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "semantic"]),
              help="How to rank [default: hybrid when an embedder is available, else keyword].")
@filter_options
@click.option("--explain", is_flag=True, help="Show each retriever's rank and score for every hit.")
@click.option("--strict", is_flag=True,
              help="Refuse semantic or hybrid recall while some entries have no vector (default: warn).")
@click.option("--context", type=click.IntRange(0, 20), default=0, help="Show N turns before and after each turn hit.")
@click.option("--min-score", type=FiniteFloat(0, 1), help="Leave out hits scoring below this (scores are 0 to 1 in every mode).")
@click.option("--all-versions", is_flag=True, help="Include entries that a correction replaced.")
@click.option("--as-of", help="What was true then (ISO-8601 or an age like 30d): before later corrections.")
@click.option("--derived", is_flag=True, help="Only what consolidation derived (segments and facts).")
@click.option("--all-lanes", is_flag=True,
              help="As an agent's recall: what consolidation derived ranked with the rest, each with its source turns.")
@click.option("--offset", type=count_type(0), default=0, help="Skip this many best hits first (the next page).")
@click.option("--exact", is_flag=True,
              help="Rank keywords by BM25 over every word on every match (slower on a large file).")
@click.option("--rerank", is_flag=True,
              help="Order the top 30 again by matching the query's word pieces against each hit's (loads the model).")
@json_option
@click.pass_context
def recall(ctx: click.Context, query: str, k: int, mode: str | None, kind: str | None, role: str | None,
           session: str | None, session_prefix: str | None, tags: tuple[str, ...], since: str | None,
           until: str | None, explain: bool, strict: bool, context: int, min_score: float | None,
           all_versions: bool, as_of: str | None, derived: bool, all_lanes: bool, offset: int, exact: bool, rerank: bool,
           as_json: bool,
           exclude_sessions: tuple[str, ...], exclude_kinds: tuple[str, ...], exclude_tags: tuple[str, ...],
           where: dict[str, Any] | None) -> None:
    """Find the entries most relevant to QUERY, best first.

    What consolidation derived (topic segments, facts) is left out unless --kind names its kind
    (fact, summary) or --derived asks for it alone; --all-lanes ranks it with the rest, each derived
    hit with the turns it came from, as the MCP server's and the agent tools' recall do.

    \b
    Example:
        harness-mem recall "what did we decide about the auth refactor"
        harness-mem recall "deploy" --tag ops --since 7d --json
        harness-mem recall "where does Ada live" --kind fact --as-of 2023-06-01
        harness-mem recall "what did the doctor say about my knee" --rerank
        harness-mem recall "incident" --where '{"severity": {"$gte": 3}}'
    """
    if derived and all_lanes:
        raise click.UsageError("--derived searches only what consolidation derived, --all-lanes everything: choose one")
    with open_store(ctx) as store:
        hits = store.recall(query, k=k, mode=mode, kind=kind, role=role, session=session,  # type: ignore[arg-type]
                            session_prefix=session_prefix, tags=tags, since=since, until=until,
                            explain=explain, strict=strict, context=context, min_score=min_score,
                            include_superseded=all_versions, exact=exact, as_of=as_of,
                            derived=True if derived else "both" if all_lanes else None,
                            exclude_sessions=exclude_sessions, exclude_kinds=exclude_kinds, exclude_tags=exclude_tags,
                            metadata=where, offset=offset, rerank=rerank, sources=all_lanes)
    if as_json:
        for hit in hits:
            echo_json(hit.model_dump(mode="json"))  # the one hit shape: `harness-mem schema hit`, MCP's recall
        return
    if not hits:
        click.echo("No matches.", err=True)
    several = len(ctx.obj["namespaces"]) > 1  # then each hit says where it lives
    for rank, hit in enumerate(hits, start=1):
        _print_hit(rank, hit, namespace=several)


def _print_hit(rank: int, hit: Hit, *, namespace: bool = False) -> None:
    where = f"[{hit.entry.namespace}] " if namespace else ""
    click.echo(f"{rank:>2}. [{hit.score:.4g}] {where}{_describe(hit.entry)}")
    if hit.entry.superseded_by:
        click.echo(f"    (replaced by {hit.entry.superseded_by})")
    click.echo(f"    {hit.snippet}")
    for turn in hit.context or ():
        click.echo(f"      · {turn.role or turn.kind}: {turn.content}")
    for turn in hit.sources or ():
        click.echo(f"      ← {turn.role or turn.kind}: {turn.content}")
    if hit.components:
        detail = ", ".join(
            f"{name} {'#' + str(c['rank']) if c['rank'] else '-'} ({c['score']:.4g})"
            for name, c in hit.components.items()
        )
        click.echo(f"    ↳ {detail}")


@cli.command()
@click.argument("entry_id")
@json_option
@click.pass_context
def get(ctx: click.Context, entry_id: str, as_json: bool) -> None:
    """Show the entry ENTRY_ID.

    \b
    Example:
        harness-mem get 01J0Z3V6Q4XK8M2N5P7R9S1T3V --json
    """
    with open_store(ctx) as store:
        entry = store.get(entry_id)
        chain = store.history(entry_id)
        cited = cited_turns(store, entry)
        forked = store.forks(entry_id)
    if as_json:
        echo_json({**entry.to_dict(), "history": [e.id for e in chain],
                   "forks": [{"id": f.entry_id, "current": f.versions[0], "others": f.versions[1:], "added": f.added}
                             for f in forked]})
        return
    click.echo(_describe(entry))
    if len(chain) > 1:
        click.echo("history: " + " → ".join(e.id + (" (this)" if e.id == entry.id else "") for e in chain))
    for fork in forked:
        click.echo(f"fork: {_fork_line(fork)}")
    if entry.source:
        click.echo(f"source: {entry.source}")
    if entry.expires_at:
        click.echo(f"expires: {format_time(entry.expires_at)}")
    if entry.metadata:
        click.echo(f"metadata: {dumps(entry.metadata)}")
    click.echo("")
    click.echo(entry.content)
    if cited:  # what it was derived from, in the words said: how it learnt this
        click.echo("")
        click.echo("from:")
        for turn in cited:
            when = format_time(turn.created_at)[:16].replace("T", " ")
            click.echo(f"  {turn.role or turn.kind} · {when}  {turn.id}")
            click.echo(f"    {turn.content}")


@cli.command()
@click.argument("entry_id", metavar="ID")
@click.option("--to", "target", required=True, metavar="NAMESPACE", help="The namespace it moves to (a shared one).")
@click.pass_context
def promote(ctx: click.Context, entry_id: str, target: str) -> None:
    """Move the entry ID from this namespace (-N) into NAMESPACE, a team's shared space, with its
    history (the versions it corrected, its corrections) and its sources (the turns it was derived
    from). Nothing is moved when an id is taken there.

    \b
    Example:
        harness-mem -N ada promote 01J0Z3V6Q4XK8M2N5P7R9S1T3V --to team
    """
    with open_store(ctx) as store:
        moved = store.promote(entry_id, to=target)
    click.echo(f"Moved {counted(len(moved), 'entry', 'entries')} to namespace {target!r}: {', '.join(moved)}")


@cli.command("list")
@filter_options
@click.option("--limit", "-n", type=count_type(), help="At most this many.")
@click.option("--offset", type=count_type(0), default=0, help="Skip this many first (the next page).")
@click.option("--newest-first", is_flag=True, help="Newest entries first.")
@json_option
@click.pass_context
def list_(ctx: click.Context, kind: str | None, role: str | None, session: str | None,
          session_prefix: str | None, tags: tuple[str, ...], since: str | None, until: str | None,
          limit: int | None, offset: int, newest_first: bool, as_json: bool, exclude_sessions: tuple[str, ...],
          exclude_kinds: tuple[str, ...], exclude_tags: tuple[str, ...], where: dict[str, Any] | None) -> None:
    """List entries, oldest first.

    \b
    Example:
        harness-mem list --kind turn --session s-42 --limit 20
    """
    with open_store(ctx) as store:
        for entry in store.list(kind=kind, role=role, session=session, session_prefix=session_prefix,
                                tags=tags, since=since, until=until, limit=limit, offset=offset,
                                newest_first=newest_first, exclude_sessions=exclude_sessions, exclude_kinds=exclude_kinds,
                                exclude_tags=exclude_tags, metadata=where):
            if as_json:
                echo_json(entry.to_dict())
            else:
                _print_entry_line(entry)


def _print_entry_line(entry: Entry) -> None:
    content = " ".join(entry.content.split())
    click.echo(f"{_describe(entry)}\n    {content[:160]}{'…' if len(content) > 160 else ''}")


@cli.command()
@click.argument("count", required=False, type=click.IntRange(1, 1000))
@click.option("-n", "n", type=click.IntRange(1, 1000), default=20, show_default=True, help="How many (or COUNT).")
@click.option("--kind", help="Only this kind.")
@json_option
@click.pass_context
def recent(ctx: click.Context, count: int | None, n: int, kind: str | None, as_json: bool) -> None:
    """The latest entries, newest first: what was I doing?

    \b
    Example:
        harness-mem recent 5
        harness-mem recent -n 5 --kind note
    """
    with open_store(ctx) as store:
        entries = store.recent(count or n, kind=kind)
    for entry in entries:
        if as_json:
            echo_json(entry.to_dict())
        else:
            _print_entry_line(entry)


@cli.group("sessions")
def sessions_group() -> None:
    """Sessions (conversations) as units: list them, read one, find the ones that answer a query."""


@sessions_group.command("list")
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--offset", type=count_type(0), default=0)
@json_option
@click.pass_context
def sessions_list(ctx: click.Context, limit: int, offset: int, as_json: bool) -> None:
    """Sessions, most recently active first, with their sizes and dates.

    \b
    Example:
        harness-mem sessions list -n 10
    """
    with open_store(ctx) as store:
        found = store.sessions(limit, offset)
    for summary in found:
        if as_json:
            echo_json(summary.model_dump(mode="json"))
        else:
            click.echo(f"{summary.session}  {counted(summary.turns, 'entry', 'entries')}  {format_time(summary.started_at)[:16]}"
                       f" → {format_time(summary.ended_at)[:16]}".replace("T", " "))


@sessions_group.command("show")
@click.argument("session")
@click.option("--offset", type=count_type(0), default=0)
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=50, show_default=True)
@json_option
@click.pass_context
def sessions_show(ctx: click.Context, session: str, offset: int, limit: int, as_json: bool) -> None:
    """The entries of SESSION in order, a page at a time (--offset, --limit).

    \b
    Example:
        harness-mem sessions show proj:2026-03-02 --limit 20
    """
    with open_store(ctx) as store:
        turns = store.session_turns(session, offset, limit)
    if not turns and offset == 0:
        raise click.ClickException(f"no session {session!r} — `harness-mem sessions list` shows them")
    for entry in turns:
        if as_json:
            echo_json(entry.to_dict())
        else:
            click.echo(f"[{format_time(entry.created_at)[:16].replace('T', ' ')}] {entry.role or entry.kind}: {entry.content}")


@sessions_group.command("recall")
@click.argument("query", type=Query())
@click.option("-k", "k", type=click.IntRange(1, 100), default=5, show_default=True, help="How many sessions.")
@click.option("--context", type=click.IntRange(0, 20), default=1, show_default=True,
              help="Turns shown around each session's best hit.")
@json_option
@click.pass_context
def sessions_recall(ctx: click.Context, query: str, k: int, context: int, as_json: bool) -> None:
    """The sessions that best answer QUERY: each with its best hit, the turns around it, its size and dates.

    \b
    Example:
        harness-mem sessions recall "when did we pick the auth library" -k 3
    """
    with open_store(ctx) as store:
        found = store.recall_sessions(query, k, context=context)
    if not found and not as_json:
        click.echo("No matches.", err=True)
    for rank, hit in enumerate(found, start=1):
        if as_json:
            echo_json(hit.to_dict())
            continue
        click.echo(f"{rank:>2}. [{hit.score:.4g}] {hit.session}  {counted(hit.turns, 'entry', 'entries')}"
                   f"  {format_time(hit.started_at)[:10]} → {format_time(hit.ended_at)[:10]}")
        for turn in hit.around:
            marker = "»" if turn.id == hit.anchor.entry.id else "·"
            click.echo(f"    {marker} {turn.role or turn.kind}: {turn.content}")


@cli.command()
@json_object_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts by kind and role, sessions, the largest sessions, and the file's size by table and index.

    With --json: one object (`harness-mem schema stats` describes it).

    \b
    Example:
        harness-mem stats
    """
    with open_store(ctx) as store:
        report = store.stats()
    if as_json:
        echo_json(report)
        return
    for line in stats_lines(report):
        click.echo(line)


@cli.command()
@click.option("--output", "-o", type=click.File("w", encoding="utf-8"), default="-",
              help="Write here instead of stdout.")
@click.pass_context
def export(ctx: click.Context, output: Any) -> None:
    """Write every entry as JSON Lines; `import` reads it back into an identical store.

    \b
    Example:
        harness-mem export > backup.jsonl
        harness-mem --db copy.db import backup.jsonl
    """
    from .jsonl import export_jsonl

    with open_store(ctx) as store:
        count = export_jsonl(store, output)
    click.echo(f"Exported {counted(count, 'entry', 'entries')}", err=True)


@cli.command()
@click.argument("text", required=False)
@click.option("--policy", type=click.Choice(["default", "hygiene"]), default="default", show_default=True,
              help="default: label PII, mask cards, keep money; hygiene: also refuse money and secrets.")
@json_object_option
def redact(text: str | None, policy: str, as_json: bool) -> None:
    """Redact TEXT (or stdin) the way the store does before writing, and print it.

    Exit status 1 under --policy hygiene when the text would be refused. With --json: one object
    with the text, the counts per kind, and whether it is blocked.

    \b
    Example:
        harness-mem redact "mail me at ada@example.com"
        cat transcript.txt | harness-mem redact > clean.txt
    """
    from .redaction import Redactor

    source = text if text is not None else _read_stdin_text("redact a longer text in parts")
    result = (Redactor.hygiene() if policy == "hygiene" else Redactor.default()).scrub(source)
    if as_json:
        echo_json({"text": result.text, "counts": result.counts, "blocked": result.blocked})
    else:
        click.echo(result.text, nl=text is not None)
    if result.blocked:
        raise click.exceptions.Exit(1)


@cli.command()
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--keyword-only", is_flag=True, help="Drop every vector and keep none from now on.")
@click.pass_context
def reindex(ctx: click.Context, quiet: bool, keyword_only: bool) -> None:
    """Rebuild the keyword index and embed every entry that has no vector (resumable).

    Run it after changing the embedding model, or on a file written without one. It is also how a
    file switches: `--embedder NAME reindex` to another model (or from keyword-only to vectors),
    `reindex --keyword-only` to none.

    \b
    Example:
        harness-mem reindex
        harness-mem --embedder minilm-int8 reindex
    """
    with open_store(ctx) as store:
        missing = 0 if keyword_only else store.count_missing_vectors()
        if quiet or not missing:
            report = store.reindex(keyword_only=keyword_only)
        else:
            lines = ProgressLines("reindex", missing)
            report = store.reindex(progress=lambda n: lines.advance(n, n), phase=lines.phase)
        stays_keyword_only = store.keyword_only and not keyword_only
    click.echo(
        f"Reindexed {counted(report['entries'], 'entry', 'entries')}: keyword index rebuilt,"
        f" {counted(report['vectors_written'], 'vector')} written,"
        f" {counted(report['vectors_dropped'], 'stale vector')} dropped",
        err=True,
    )
    if stays_keyword_only:
        click.echo(f"This store is keyword-only; {giving_vectors()} gives it vectors.", err=True)


@cli.command()
@click.option("--vacuum", is_flag=True,
              help="Also rewrite the whole file (VACUUM): needs free disk space as large as the file.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@json_object_option
@click.pass_context
def gc(ctx: click.Context, vacuum: bool, quiet: bool, as_json: bool) -> None:
    """Purge expired entries and give deleted data's space back; print sizes by table.

    Expired and forgotten entries go with their index rows and vectors (opening a store also
    purges expired ones, once a day); the keyword index drops deleted entries' words; when an entry
    was purged (here, on open, or by a purge that could not finish), the file is rewritten, so no
    old copy of it survives in a page (this needs free disk space as large as the file); the
    write-ahead log is checkpointed and truncated; free pages go back to the file system (a file
    made before harness-mem did this on its own keeps them until --vacuum). Run events:
    `harness-loop runs gc`.

    Writers in other processes keep writing: every step is a short transaction, except --vacuum's,
    which holds them for about 6 s per GB of file. A rewrite cut short (a crash, a full disk) is
    finished or undone here, and said so; only one gc or purge rewrites a file at a time.

    \b
    Example:
        harness-mem gc
        harness-mem gc --vacuum --json
    """
    with open_store(ctx) as store:
        report = store.gc(vacuum=vacuum, progress=None if quiet else ProgressLines("gc", unit="purged", written=None))
    if as_json:
        echo_json(report)
        return
    for line in gc_report_lines(report):
        click.echo(line)


@cli.command("sync")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--status", "show_status", is_flag=True,
              help="Show the folder's devices and how far this store has read each; change nothing.")
@click.option("--dry-run", is_flag=True, help="Say what a sync would write and read; change nothing.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_object_option
@click.pass_context
def sync_command(ctx: click.Context, folder: Path, show_status: bool, dry_run: bool, quiet: bool,
                 as_json: bool) -> None:
    """Exchange memory with a folder carried between machines: git, Syncthing, Dropbox, rsync, a USB stick.

    Writes what this store did since its last sync into FOLDER (its own files only, so the folder
    never conflicts) and applies what every other device wrote there. Corrections, forgets and
    renewals travel; indexes, vectors and consolidation's output are rebuilt on each machine. The
    first sync starts this store's log (it logs what the store holds, once).

    \b
    Example:
        harness-mem sync ~/Sync/harness-mem
        harness-mem sync ~/Sync/harness-mem --status
        harness-mem sync ~/Sync/harness-mem --dry-run
    """
    if show_status or dry_run:
        with open_store(ctx) as store:
            devices = store.sync_status(folder)
        if dry_run:
            to_write = sum(d.waiting for d in devices if d.this_store)
            others = [d for d in devices if not d.this_store and d.unread]
            click.echo(f"Would write {counted(to_write, 'operation')} and read"
                       f" {counted(sum(d.unread for d in others), 'operation')} from {counted(len(others), 'device')}",
                       err=True)
            return
        if as_json:
            echo_json({"devices": [d.__dict__ for d in devices]})
            return
        for d in devices:
            if d.this_store:
                click.echo(f"{d.device}  this store   {counted(d.chunks, 'chunk')} written,"
                           f" {counted(d.waiting, 'operation')} to write")
            else:
                click.echo(f"{d.device}  {d.read} of {counted(d.chunks, 'chunk')} applied"
                           + (f", {d.quarantined} quarantined" if d.quarantined else ""))
        return
    with open_store(ctx, create=True) as store:
        if quiet or not sys.stderr.isatty():
            report = store.sync(folder)
        else:
            total = sum(d.unread for d in store.sync_status(folder)) if (folder / "harness-mem").exists() else 0
            with click.progressbar(length=max(total, 1), label="Applying", file=sys.stderr) as bar:
                report = store.sync(folder, progress=bar.update)
    if as_json:
        echo_json({"device": report.device, "written": report.written, "applied": report.applied.applied,
                   "skipped": report.applied.skipped, "forks": report.applied.forks,
                   "forgotten": report.applied.forgotten, "waiting": report.waiting,
                   "quarantined": report.quarantined})
        return
    for line in report.quarantined:
        click.echo(f"Quarantined: {line}", err=True)
    click.echo(f"Synced with {folder}: {report.summary()}", err=True)


@cli.command()
@json_object_option
@click.pass_context
def conflicts(ctx: click.Context, as_json: bool) -> None:
    """List entries changed on two machines apart (a fork): corrected apart, or one id added with other
    words. Every machine keeps the same version current (the latest); the others stay in the entry's
    history. Correct the current one to settle it.

    \b
    Example:
        harness-mem conflicts
    """
    with open_store(ctx) as store:
        found = store.conflicts()
    if as_json:
        echo_json({"conflicts": [{"namespace": f.namespace, "id": f.entry_id, "current": f.versions[0],
                                  "others": f.versions[1:], "added": f.added} for f in found]})
        return
    for fork in found:
        click.echo(f"{fork.entry_id}: {_fork_line(fork)}")
    click.echo(f"{counted(len(found), 'conflict')}", err=True)


def _fork_line(fork: Fork) -> str:
    """A fork in one line: how it came, its versions, which one is current everywhere."""
    if fork.added:
        return (f"added apart with other words, kept as {', '.join(fork.versions[1:])} — {fork.versions[0]}"
                " holds the latest")
    return f"corrected apart as {', '.join(fork.versions)} — {fork.versions[0]} is current"


@cli.command("eval")
@click.argument("queries", type=click.File("rb"))
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "semantic"]), help="Ranking to measure.")
@json_object_option
@click.pass_context
def eval_(ctx: click.Context, queries: Any, mode: str | None, as_json: bool) -> None:
    """Measure recall@5, recall@10 and MRR@10 of a labelled QUERIES file on this database.

    Each line: {"question", "evidence": [entry ids], "conversation"?, "category"?}.

    \b
    Example:
        harness-mem eval locomo_queries.jsonl --mode keyword
    """
    from .evaluate import evaluate, parse_queries

    parsed = parse_queries(queries)
    with open_store(ctx) as store:
        report = evaluate(store, parsed, mode=mode)  # type: ignore[arg-type]
    if as_json:
        echo_json(report.to_dict())
        return
    click.echo(f"mode: {report.mode}   queries: {report.overall.queries}   skipped: {report.skipped}")
    click.echo(f"{'category':<14} {'n':>5} {'R@5':>7} {'R@10':>7} {'MRR@10':>7}")
    for name, metrics in [("overall", report.overall), *report.by_category.items()]:
        click.echo(f"{name:<14} {metrics.queries:>5} {metrics.recall_at_5:>7.3f} {metrics.recall_at_10:>7.3f}"
                   f" {metrics.mrr_at_10:>7.3f}")
    click.echo(f"latency p50 {report.latency_ms_p50:.2f} ms, p95 {report.latency_ms_p95:.2f} ms")


# ---- experience: episodes, skills, consolidation -------------------------------------------------


model_options = cliutils.model_options(MEM_HINTS)


def _experience(store: MemoryStore) -> ExperienceStore:
    from .experience.store import ExperienceStore  # YAML and the skill rules: only experience commands pay

    return ExperienceStore(store)


def _result_word(success: bool | None) -> str:
    return {True: "success", False: "failure", None: "unknown"}[success]


def _one_line(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _print_episode_line(episode_id: str, episode: Episode, created_at: Any, score: float | None = None) -> None:
    lead = f"[{score:.4g}] " if score is not None else ""
    when = format_time(created_at)[:16].replace("T", " ")
    click.echo(f"{lead}{episode_id}  {when}  {_result_word(episode.success):<7}  {_one_line(episode.situation, 80)}")
    click.echo(f"    tools: {', '.join(episode.tools) or '(none)'}")
    if episode.outcome:
        click.echo(f"    outcome: {_one_line(episode.outcome)}")


@cli.group()
def episodes() -> None:
    """Episodes: what an agent faced, the tools it used, and how it went.

    \b
    Example:
        harness-mem episodes list --success
        harness-mem episodes recall "deploy the marketing site"
    """


@episodes.command("list")
@click.option("--tool", help="Only episodes that called this tool.")
@click.option("--skill", help="Only episodes that followed this skill.")
@click.option("--success/--failure", "success", default=None, help="Only successes, or only failures.")
@click.option("--limit", "-n", type=count_type(), default=50, show_default=True, help="At most this many.")
@json_option
@click.pass_context
def episodes_list(ctx: click.Context, tool: str | None, skill: str | None, success: bool | None, limit: int,
                  as_json: bool) -> None:
    """List recorded episodes, newest first.

    \b
    Example:
        harness-mem episodes list --tool shell --failure -n 10
    """
    with open_store(ctx) as store:
        found = _experience(store).list(limit=limit, tool=tool, skill=skill, success=success)
    if not found and not as_json:
        click.echo("No episodes.", err=True)
    for stored in found:
        if as_json:
            echo_json(stored.to_dict())
        else:
            _print_episode_line(stored.id, stored.episode, stored.created_at)


@episodes.command("show")
@click.argument("episode_id")
@json_option
@click.pass_context
def episodes_show(ctx: click.Context, episode_id: str, as_json: bool) -> None:
    """Show the episode EPISODE_ID in the episode text format.

    \b
    Example:
        harness-mem episodes show session:s-42
    """
    with open_store(ctx) as store:
        stored = _experience(store).get(episode_id)
    if as_json:
        echo_json(stored.to_dict())
        return
    click.echo(f"episode {stored.id}  {format_time(stored.created_at)}")
    if stored.episode.tags:
        click.echo("tags: " + " ".join(f"#{t}" for t in stored.episode.tags))
    click.echo("")
    click.echo(stored.episode.render())


@episodes.command("recall")
@click.argument("situation")
@click.option("-k", "k", default=3, show_default=True, type=click.IntRange(1, 100), help="How many episodes.")
@click.option("--tool", help="Only episodes that called this tool.")
@click.option("--skill", help="Only episodes that followed this skill.")
@click.option("--success/--failure", "success", default=None, help="Only successes, or only failures.")
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "semantic"]),
              help="How to rank [default: hybrid when an embedder is available, else keyword].")
@json_option
@click.pass_context
def episodes_recall(ctx: click.Context, situation: str, k: int, tool: str | None, skill: str | None,
                    success: bool | None, mode: str | None, as_json: bool) -> None:
    """Find the past episodes most like SITUATION (successes first at equal relevance).

    \b
    Example:
        harness-mem episodes recall "rotate the TLS certificates" -k 5 --json
    """
    with open_store(ctx) as store:
        found = _experience(store).recall(situation, k, tool=tool, skill=skill, success=success, mode=mode)
    if not found and not as_json:
        click.echo("No matches.", err=True)
    for recalled in found:
        if as_json:
            echo_json(recalled.to_dict())
        else:
            _print_episode_line(recalled.id, recalled.episode, recalled.created_at, recalled.score)


@cli.group()
def skills() -> None:
    """Skills: SKILL.md procedures distilled from runs that worked, with their history.

    \b
    Example:
        harness-mem skills list
        harness-mem skills distill session:s-42 --save --model-url http://127.0.0.1:8000/v1 --model qwen3
    """


@skills.command("list")
@json_option
@click.pass_context
def skills_list(ctx: click.Context, as_json: bool) -> None:
    """List saved skills by name.

    \b
    Example:
        harness-mem skills list --json
    """
    with open_store(ctx) as store:
        records = _experience(store).list_skills()
    if not records and not as_json:
        click.echo("No skills.", err=True)
    for record in records:
        if as_json:
            echo_json(record.to_dict())
        else:
            click.echo(f"{record.name}  v{record.version}  revision {record.skill.ledger.revision}"
                       f"  {_one_line(record.skill.description, 80)}")


@skills.command("show")
@click.argument("name")
@click.option("--history", is_flag=True, help="List every saved version with its origin and rationale.")
@json_option
@click.pass_context
def skills_show(ctx: click.Context, name: str, history: bool, as_json: bool) -> None:
    """Print the SKILL.md of skill NAME (or its history).

    \b
    Example:
        harness-mem skills show deploy-static-site
        harness-mem skills show deploy-static-site --history
    """
    with open_store(ctx) as store:
        experience = _experience(store)
        record = experience.get_skill(name)
        versions = experience.skill_history(name) if history else []
    if as_json:
        data = record.to_dict()
        if history:
            data["history"] = [v.to_dict() for v in versions]
        echo_json(data)
    elif history:
        for version in versions:
            when = format_time(version.created_at)[:16].replace("T", " ")
            episode = f"  episode {version.episode_id}" if version.episode_id else ""
            click.echo(f"v{version.version}  {when}  {version.origin:<9}{episode}  {_one_line(version.rationale, 80)}")
    else:
        click.echo(record.skill.render(), nl=False)


@skills.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", "names", multiple=True, help="Only this skill (repeatable) [default: all].")
@json_option
@click.pass_context
def skills_export(ctx: click.Context, directory: Path, names: tuple[str, ...], as_json: bool) -> None:
    """Write skills to DIRECTORY/<name>/SKILL.md (prints each path).

    \b
    Example:
        harness-mem skills export ~/.agent/skills
    """
    with open_store(ctx) as store:
        paths = _experience(store).export_skills(directory, names or None)
    for path in paths:
        if as_json:
            echo_json({"name": path.parent.name, "path": str(path)})
        else:
            click.echo(str(path))
    click.echo(f"Exported {counted(len(paths), 'skill')} to {directory}", err=True)


@skills.command("import")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@json_option
@click.pass_context
def skills_import(ctx: click.Context, directory: Path, as_json: bool) -> None:
    """Save every valid DIRECTORY/<name>/SKILL.md; invalid ones are reported (exit status 1).

    Re-importing is harmless: an identical skill adds no version.

    \b
    Example:
        harness-mem skills import ~/.agent/skills
    """
    with open_store(ctx, create=True) as store:
        report = _experience(store).import_skills(directory)
    if as_json:
        echo_json(report.to_dict())
    else:
        for name in report.saved:
            click.echo(f"saved      {name}")
        for name in report.unchanged:
            click.echo(f"unchanged  {name}")
    for path, error in report.invalid:
        click.echo(f"Error: {shown(f'{path}: {error}')}", err=True)
    click.echo(f"Imported {counted(len(report.saved), 'skill')} ({len(report.unchanged)} unchanged,"
               f" {len(report.invalid)} invalid)", err=True)
    if report.invalid:
        ctx.exit(1)


@skills.command("distill")
@click.argument("episode_id")
@click.option("--save", is_flag=True, help="Save the draft as a new skill (default: only print it).")
@model_options
@json_option
@click.pass_context
def skills_distill(ctx: click.Context, episode_id: str, save: bool, model_settings: ModelSettings,
                   as_json: bool) -> None:
    """Draft a skill from the successful episode EPISODE_ID (one model call).

    Episodes that should not become skills (failed, too few tools, a duplicate of a saved skill)
    are refused without calling the model; the reason is printed and the exit status is 0.

    \b
    Example:
        harness-mem skills distill session:s-42 --save --model-url http://127.0.0.1:8000/v1 --model qwen3
    """
    from .experience.distill import Draft, distill_episode

    model = model_settings.text_model(required=True)
    assert model is not None
    with model, open_store(ctx) as store:
        experience = _experience(store)
        result = distill_episode(experience, episode_id, model, save=save)
        version = experience.get_skill(result.skill.name).version if save and isinstance(result, Draft) else None
    if as_json:
        echo_json({**result.to_dict(), "saved_version": version})
    elif isinstance(result, Draft):
        click.echo(result.skill.render(), nl=False)
        saved = f"saved as version {version}" if version is not None else "not saved; pass --save to keep it"
        click.echo(f"Drafted skill {result.skill.name} ({saved})", err=True)
    else:
        click.echo(f"Not distilled: {result.message}", err=True)


@skills.command("revise")
@click.argument("name")
@click.argument("episode_id")
@click.option("--complaint", default="", help="What went wrong, in your words [default: inferred from the outcome].")
@click.option("--save", is_flag=True, help="Save the revision as the skill's next version (default: only print it).")
@model_options
@json_option
@click.pass_context
def skills_revise(ctx: click.Context, name: str, episode_id: str, complaint: str, save: bool,
                  model_settings: ModelSettings, as_json: bool) -> None:
    """Revise skill NAME after the failed episode EPISODE_ID that followed it (one model call).

    Refusals (the run succeeded, did not use the skill, or a revision cap is reached) cost no model
    call; the reason is printed and the exit status is 0.

    \b
    Example:
        harness-mem skills revise deploy-static-site session:s-43 --complaint "forgot the cache purge" --save
    """
    from .experience.distill import Revision, revise_skill

    model = model_settings.text_model(required=True)
    assert model is not None
    with model, open_store(ctx) as store:
        experience = _experience(store)
        result = revise_skill(experience, name, episode_id, model, complaint=complaint, save=save)
        version = experience.get_skill(name).version if save and isinstance(result, Revision) else None
    if as_json:
        echo_json({**result.to_dict(), "saved_version": version})
    elif isinstance(result, Revision):
        click.echo(result.skill.render(), nl=False)
        saved = f"saved as version {version}" if version is not None else "not saved; pass --save to keep it"
        click.echo(f"Revised skill {name}: {result.rationale} ({saved})", err=True)
    else:
        click.echo(f"Not revised: {result.message}", err=True)


@cli.command()
@click.option("--session", help="Only this session (consolidated even if still active).")
@click.option("--since", help="Only sessions with a turn at or after this time: ISO-8601 or an age like 7d.")
@click.option("--idle", default="0", show_default=True,
              help="A session is finished once quiet this long (an age like 10m; 0: every session).")
@click.option("--dry-run", is_flag=True, help="Derive and report what would be written; write nothing.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@model_options
@json_option
@click.pass_context
def consolidate(ctx: click.Context, session: str | None, since: str | None, idle: str, dry_run: bool, quiet: bool,
                model_settings: ModelSettings, as_json: bool) -> None:
    """Turn finished sessions' transcripts into topic segments, facts and (for agent runs) episodes.

    Each session, whatever its roles, is cut where its subject changes; each segment is stored as
    one "summary" entry that reads on its own (who, when, what was said, in the third person with
    dates resolved), and the durable things people said as "fact" entries. Both cite the turns
    they came from (metadata.source_turns), are recalled with --kind fact/summary, and are forgotten
    with those turns. A session that used tools or states a result also gets an episode, which
    cites and is forgotten with its turns the same way. Running it again adds nothing; new turns
    are consolidated on the next run. With --model-url and --model, up to 3 facts per session are
    written by the model instead.

    \b
    Example:
        harness-mem consolidate --idle 10m
        harness-mem consolidate --session s-42 --dry-run
    """
    from .experience.consolidate import consolidate as run_consolidation

    model = model_settings.text_model(required=False)
    idle_value: float | str = float(idle) if _is_number(idle) else idle
    with contextlib.ExitStack() as stack:
        if model is not None:
            stack.enter_context(model)
        store = stack.enter_context(open_store(ctx))
        report = run_consolidation(store, session=session, since=since, model=model, idle=idle_value, dry_run=dry_run,
                                   progress=None if quiet else SessionLines("consolidated"))
    for result in report.sessions:
        if as_json:
            echo_json(result.to_dict())
        else:
            click.echo(result.describe())
            if dry_run:  # what would be written, to judge before writing it
                for kind, text in result.written():
                    click.echo(f"    {kind:<8} {text}")
    click.echo(f"{'Would consolidate' if dry_run else 'Consolidated'} {report.summary()}", err=True)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---- serving ------------------------------------------------------------------------------------


@cli.command()
@click.option("--db", "db_path", type=StoreLocation(),
              help="Database file or postgresql:// URL (the same as harness-mem --db, given after the command).")
@click.option("--namespace", "-N", "namespaces", multiple=True,
              help="Namespace the tools write and read; repeat it to read shared ones beside it (the same as"
                   " harness-mem --namespace, given after the command).")
@click.option("--http", "address", default=None, metavar="HOST:PORT",
              help="Serve over Streamable HTTP at http://HOST:PORT/mcp instead of stdio.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --http: the bearer token every request must carry (or $HARNESS_MEM_MCP_TOKEN);"
                   " required off loopback.")
@click.option("--project/--no-project", default=True, show_default=True,
              help="Over stdio: tag what the tools write with the git repository the server runs in, so the"
                   " coding agent's hooks give it to that project's next sessions.")
@click.pass_context
def mcp(ctx: click.Context, db_path: Path | None, namespaces: tuple[str, ...], address: str | None,
        token_file: Path | None, project: bool) -> None:
    """Serve the store to an MCP host over stdio, or over HTTP with --http.

    For Claude Desktop, Claude Code, Cursor and other MCP hosts, which start this command
    themselves (the README has the configuration block), or connect to its URL. Eight tools:
    remember, recall, recall_sessions, get_memory, update_memory, forget, recent_activity,
    find_skills.

    \b
    Example:
        harness-mem mcp --db ~/agent-memory.db --namespace work
        harness-mem mcp --db postgresql://ada@db/memory -N ada -N team
        HARNESS_MEM_MCP_TOKEN=... harness-mem mcp --db team.db --http 0.0.0.0:8765
    """
    if token_file is not None and address is None:
        raise click.UsageError("--token-file goes with --http")
    if db_path is not None:
        ctx.obj["db"] = db_path
    if namespaces:
        ctx.obj["namespace"], ctx.obj["namespaces"] = namespaces[0], namespaces
    if address is not None:
        from .access import parse_address, read_token, token_required
        from .mcp_http import serve_http

        # A bad address or token is refused before the store is opened (or made).
        host, port = parse_address(address)
        token = read_token(token_file)
        token_required(host, token)
        with open_store(ctx, create=True) as store:
            serve_http(store, host, port, token)
        return
    from .integrations.projects import find_repository
    from .mcp_server import serve  # the MCP SDK loads only for this command

    repository = find_repository(os.getcwd()) if project else None
    with open_store(ctx, create=True) as store:
        serve(store, tags=[repository.tag] if repository is not None else [])


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any address that is not loopback needs a token.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port (0: a free one).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The token a browser must bring (or $HARNESS_MEM_UI_TOKEN); required off loopback.")
@click.option("--read-only", is_flag=True, help="Browse only: no forms, and every POST is refused.")
@click.option("--no-open", is_flag=True, help="Print the address; do not open a browser.")
@click.pass_context
def ui(ctx: click.Context, host: str, port: int, token_file: Path | None, read_only: bool, no_open: bool) -> None:
    """Browse the memory in a web browser: search, sessions, facts, and forget what it should not keep.

    Serves on 127.0.0.1 at a free port and opens the printed address, which carries a one-run
    access token. Host, Origin and a CSRF token are checked on every request that changes anything.

    \b
    Example:
        harness-mem ui
        harness-mem --db team.db ui --no-open --read-only
    """
    from .ui.security import Guard  # the web stack loads only for this command
    from .ui.server import bind, serve, token_for

    token = token_for(host, token_file)  # refused before the store is opened
    with open_store(ctx, serving=True) as store:
        sock = bind(host, port)
        guard = Guard(host, sock.getsockname()[1], given_token=token, read_only=read_only)
        serve(store, sock, guard, open_browser=not no_open, say=lambda line: click.echo(line))


cli.add_command(hook_cli.hooks)
cli.add_command(hook_cli.hook)
cli.add_command(key_cli.key)


def main() -> None:
    cli(prog_name="harness-mem")

