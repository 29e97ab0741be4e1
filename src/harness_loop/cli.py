"""``harness-loop``: run a task against an OpenAI-compatible server, replay a recording, show its
trace, and read the orchestrator's runs.

A thin layer: each command parses options, calls one library function, and formats the result.
What it shares with ``harness-mem`` comes from :mod:`harness_mem.cliutils`: ``-h``, ``--version``,
``--json``, ``--db``/``--namespace``, the model flags, and the error mapper (known errors become one
line ``Error: what — how to fix`` and exit 1; unexpected ones too, unless
``HARNESS_LOOP_RAISE_ERRORS`` is set).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import anyio
import click

from harness_mem import MemoryStore
from harness_mem.cliutils import (
    ModelSettings,
    StoreLocation,
    command_group,
    db_option,
    echo_json,
    gc_report_lines,
    json_object_option,
    json_option,
    model_options,
    namespace_option,
    namespaces_option,
)
from harness_mem.db import default_path
from harness_mem.engines import is_url
from harness_mem.models import parse_time, to_ms
from harness_mem.providers import DEFAULT_TIMEOUT

from .builtin_tools import WORKSPACE_SYSTEM, workspace_tools
from .loop import AgentLoop, LoopConfig, Outcome
from .memory import attach_memory
from .openai_client import LOOP_HINTS, OpenAIChatModel
from .record import SessionRecorder, format_trace, read_session, replay
from .runstore import RunStore, render, render_events, render_list

# The model flags are harness-mem's, with HARNESS_LOOP_ variables.
loop_model_options = model_options(LOOP_HINTS)

# The largest values the options take: past them a number is a mistake, refused in one line before
# anything runs (not an overflow deep in the store).
MAX_ITERS = 100_000
MAX_RETRIES = 100
MAX_SECONDS = 30 * 86_400.0
MAX_LISTED = 1_000_000
MAX_SEQUENCE = 2**63 - 1


@command_group(prog_name="harness-loop", raise_errors_env="HARNESS_LOOP_RAISE_ERRORS")
def main() -> None:
    """Run an agent loop against an OpenAI-compatible server; replay and trace its recordings; read
    the orchestrator's runs.

    \b
    Example:
        harness-loop run --model-url http://127.0.0.1:8000/v1 --model qwen3 "What does setup.py install?"
        harness-loop runs list --state failed
    """


def _describe(outcome: Outcome) -> str:
    detail = ""
    if reason := getattr(outcome, "reason", None):
        detail = f": {reason}"
    elif verdict := getattr(outcome, "verdict", None):
        detail = f": {verdict.reason}" if verdict.reason else ""
    elif getattr(outcome, "deadline_reached", False):
        detail = ": time limit reached"
    return f"{outcome.kind} after {outcome.iters} iterations and {outcome.tools_called} tool calls{detail}"


@main.command()
@click.argument("task")
@loop_model_options
@click.option(
    "-w",
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Directory the tools may read",
)
@click.option("--max-iters", type=click.IntRange(1, MAX_ITERS), default=50, show_default=True)
@click.option(
    "--retries",
    type=click.IntRange(0, MAX_RETRIES),
    default=3,
    show_default=True,
    help="Retries on 429/5xx/connection failures",
)
@click.option(
    "--time-limit", type=click.FloatRange(0.1, MAX_SECONDS), default=None, help="Wall-clock seconds for the whole run"
)
@click.option("--system", default=WORKSPACE_SYSTEM, help="System prompt")
@click.option(
    "--record-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write the recording [default: WORKSPACE/.harness/sessions]",
)
@click.option("--db", "db_path", type=StoreLocation(), default=None,
              help="Give the agent memory in this store (a file or postgresql:// URL): recall before each model"
                   " call, the memory tools, its turns and an episode written as it runs.")
@namespaces_option
@click.option("--no-record", is_flag=True, help="Do not record the run")
@click.option("--no-redact", is_flag=True,
              help="Write the recording and spilled results as given, without redacting PII and secrets")
def run(
    task: str,
    model_settings: ModelSettings,
    workspace: Path,
    max_iters: int,
    retries: int,
    time_limit: float | None,
    system: str,
    record_dir: Path | None,
    db_path: Path | str | None,
    namespaces: tuple[str, ...],
    no_record: bool,
    no_redact: bool,
) -> None:
    """Run TASK with read-only workspace tools (read_file, list_dir, grep); print the answer.

    With --db, the agent has a memory: what is relevant to the task is recalled before each model
    call, it gets the memory tools (remember, recall, update_memory, forget and the rest), and its
    turns and an episode of the run are written to the store as it goes.

    \b
    Example:
        harness-loop run --model-url http://127.0.0.1:8000/v1 --model qwen3 "What does setup.py install?"
        harness-loop run --db agent.db "Where do we deploy, and since when?"
        harness-loop run --db postgresql://ada@db/memory -N ada -N team "Where do we deploy?"
    """
    model_settings.configured(required=True)
    if not workspace.is_dir():
        raise click.ClickException(f"workspace {workspace} is not a directory — pass an existing one with -w")
    base_url, model_name = model_settings.url, model_settings.name
    assert base_url and model_name
    timeout = model_settings.timeout if model_settings.timeout is not None else DEFAULT_TIMEOUT
    redactor: Literal["default"] | None = None if no_redact else "default"
    recorder = (None if no_record else
                SessionRecorder.create(record_dir or workspace / ".harness" / "sessions", redactor=redactor))

    async def go() -> Outcome:
        async with OpenAIChatModel(
            base_url, model_name, api_key=model_settings.api_key, timeout=timeout, max_retries=retries
        ) as model:
            loop = AgentLoop(
                model,
                workspace_tools(),
                system=system,
                workspace=workspace,
                config=LoopConfig(max_iters=max_iters, time_limit=time_limit),
                recorder=recorder,
                redactor=redactor,
            )
            if store is None:
                return await loop.run(task)
            with attach_memory(loop, store, tools=True):
                return await loop.run(task)

    if namespaces and db_path is None:
        raise click.UsageError("--namespace goes with --db (the store whose namespaces the agent reads)")
    # Written into the first namespace; recalled from every one (a private one and a team's, say).
    store = None if db_path is None else MemoryStore(db_path, namespaces=namespaces or None)
    try:
        outcome = anyio.run(go)
    finally:
        if store is not None:
            store.close()
        if recorder is not None:
            recorder.close()
            click.echo(f"recording: {recorder.path}", err=True)
    text = getattr(outcome, "text", None) or outcome.last_text
    if text:
        click.echo(text)
    click.echo(_describe(outcome), err=True)
    if not outcome.ok:
        sys.exit(1)


@main.command(name="replay")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def replay_cmd(file: Path) -> None:
    """Re-run a recording offline (no model, no tools) and report any divergence.

    Exits 0 when the replay reproduced the recorded outcome, 1 when it diverged.

    \b
    Example:
        harness-loop replay .harness/sessions/session-20260101T120000Z-1a2b3c4d.jsonl
    """
    report = anyio.run(replay, read_session(file))
    if report.reproduced:
        ending = _describe(report.outcome) if report.outcome else f"failed with {report.error}"
        click.echo(
            f"reproduced: {ending} "
            f"({report.model_turns} model turns and {report.tool_results} tool results from the recording)"
        )
        return
    click.echo(f"diverged ({len(report.divergences)}):")
    for d in report.divergences:
        click.echo(f"  {d}")
    sys.exit(1)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def trace(file: Path) -> None:
    """Show a recording's timeline: model turns, tool calls, guards, verdicts, totals.

    Malformed lines are skipped with a warning naming their line numbers.

    \b
    Example:
        harness-loop trace .harness/sessions/session-20260101T120000Z-1a2b3c4d.jsonl
    """
    session = read_session(file, strict=False)
    for n, problem in session.bad_lines:
        click.echo(f"Warning: line {n} skipped: {problem}", err=True)
    for line in format_trace(session.records):
        click.echo(line)


@main.group()
@db_option
@namespace_option
@click.pass_context
def runs(ctx: click.Context, db_path: Path | None, namespace: str) -> None:
    """Orchestrator runs kept in the memory file: their jobs, states and event log.

    \b
    Example:
        harness-loop runs --db agent.db list
    """
    ctx.obj = {"db": db_path if db_path is not None else default_path(), "namespace": namespace}


@contextmanager
def open_runs(ctx: click.Context) -> Iterator[RunStore]:
    with RunStore.open(ctx.obj["db"], namespace=ctx.obj["namespace"]) as store:
        yield store


@runs.command("list")
@click.option("--state", help="Only runs in this state (completed, failed, executing, …).")
@click.option("--limit", "-n", type=click.IntRange(1, MAX_LISTED), help="At most this many, newest first.")
@json_option
@click.pass_context
def runs_list(ctx: click.Context, state: str | None, limit: int | None, as_json: bool) -> None:
    """List runs, newest first.

    \b
    Example:
        harness-loop runs list --state failed
    """
    with open_runs(ctx) as store:
        summaries = store.list_runs(limit=limit, state=state)
    if as_json:
        for summary in summaries:
            echo_json(summary.to_dict())
    elif summaries:
        click.echo(render_list(summaries))
    else:
        click.echo("No runs.", err=True)


@runs.command("show")
@click.argument("run_id")
@json_option
@click.pass_context
def runs_show(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Show RUN_ID: each job's state, attempts, visits, result, error and tokens.

    \b
    Example:
        harness-loop runs show run-01J0Z3V6Q4
    """
    with open_runs(ctx) as store:
        stored = store.load(run_id)
    if as_json:
        echo_json(stored.to_dict())
    else:
        click.echo(render(stored, detailed=True))


@runs.command("events")
@click.argument("run_id")
@click.option("--after", type=click.IntRange(0, MAX_SEQUENCE), default=0, help="Only events after this sequence number.")
@json_option
@click.pass_context
def runs_events(ctx: click.Context, run_id: str, after: int, as_json: bool) -> None:
    """Print RUN_ID's append-only event log, oldest first.

    \b
    Example:
        harness-loop runs events run-01J0Z3V6Q4 --after 40
    """
    with open_runs(ctx) as store:
        events = store.events(run_id, after=after)
    if as_json:
        for event in events:
            echo_json(event.to_dict())
    elif events:
        click.echo(render_events(events))


#: How long a finished run's events are kept by ``runs gc`` unless told otherwise.
DEFAULT_EVENT_RETENTION = "30d"


@runs.command("gc")
@click.option("--events-older-than", "older_than", default=DEFAULT_EVENT_RETENTION, show_default=True,
              help="Prune finished runs' events logged before this: an age (30d, 12h) or an ISO-8601 time.")
@click.option("--vacuum", is_flag=True,
              help="Also rewrite the whole file (VACUUM): needs free disk space as large as the file.")
@json_object_option
@click.pass_context
def runs_gc(ctx: click.Context, older_than: str, vacuum: bool, as_json: bool) -> None:
    """Prune old events of finished runs, then collect the file's garbage as `harness-mem gc` does.

    A run that is still live keeps its whole log; a completed, failed or cancelled run loses the
    events older than --events-older-than (its run and job rows stay). Then expired memory entries
    are purged, the file rewritten when anything was pruned or purged (free disk space as large as
    the file is needed), the WAL truncated and free pages returned, and the sizes by table printed.

    \b
    Example:
        harness-loop runs gc
        harness-loop runs gc --events-older-than 7d --vacuum
    """
    cutoff = to_ms(parse_time(older_than))
    path = ctx.obj["db"]
    if not is_url(path) and not Path(path).exists():
        raise click.ClickException(f"no database at {path} — nothing to collect")
    # The memory store owns the file's collection; the run store prunes its own table, on the same
    # connection (on PostgreSQL, one of its own, closed here).
    with MemoryStore(path, namespace=ctx.obj["namespace"], embedder=None) as memory:
        with RunStore.on(memory) as runs:
            pruned = runs.prune_events(cutoff)
        # Pruned events leave every byte only with a rewrite of the file (SQLite keeps old copies of
        # rows in rebuilt pages, see harness_mem.maintenance), as purged entries do.
        report = {"events_pruned": pruned, **memory.gc(vacuum=vacuum or pruned > 0)}
    if as_json:
        echo_json(report)
        return
    for line in gc_report_lines(report):
        click.echo(line)
