"""The ``harness-mem`` console script: a hook's fast path, and everything else to :mod:`harness_mem.cli`.

Claude Code runs ``harness-mem hook EVENT`` as a fresh process on every prompt and tool call, and
the full CLI (click, pydantic, the store) takes half a second to import. So exactly the forms that
``harness-mem hooks install`` writes — ``harness-mem [--db X] [--namespace N] hook EVENT [--db X]
[--namespace N]`` on an existing database file — are answered here with the standard library only:
the raw hook input goes to the store's :mod:`~harness_mem.hook_writer`, which stores the turn and
acks. When no writer takes the request, one is started for the next hooks and this hook runs the
full CLI in process, the old way, with the input it already read: nothing is lost, only slower
(and within the host's time: :mod:`~harness_mem.hook_budget`). When
the writer took it but does not ack in time (held up by a write lock), the hook returns at once and
a detached copy of it waits for the ack (:func:`~harness_mem.hook_client.wait_detached`): the host
is never held past the ack timeout, and the turn is stored once, by the writer.

Every other command line, and every hook this path cannot serve as the CLI would (a server URL, a
missing file, a payload over the limit, any other flag), goes to :func:`harness_mem.cli.main` unchanged.
"""

from __future__ import annotations

import io
import os
import sys
import time
from typing import NamedTuple

from . import hook_budget, hook_client

# The options a hook takes, before ``hook`` (the CLI's) and after it (the command's); their values
# mean the same in both places.
_TOP_OPTIONS = {"--db": "db", "--namespace": "namespace", "-N": "namespace"}
_HOOK_OPTIONS = {"--db": "db", "--namespace": "namespace"}


class HookCall(NamedTuple):
    """A ``harness-mem hook EVENT`` command line: the event and the store options it gave."""

    event: str
    db: str | None = None
    namespace: str | None = None
    top_db: str | None = None
    top_namespace: str | None = None


def hook_call(argv: list[str]) -> HookCall | None:
    """The hook ``argv`` (without the program's name) asks for; None for any other command line."""
    top: dict[str, str] = {}
    own: dict[str, str] = {}
    rest = list(argv)
    if not _take_options(rest, _TOP_OPTIONS, top) or not rest or rest.pop(0) != "hook":
        return None
    event = None
    while rest:
        if not _take_options(rest, _HOOK_OPTIONS, own):
            return None
        if rest:
            if event is not None:
                return None
            event = rest.pop(0)
    if not event:
        return None
    return HookCall(event, own.get("db"), own.get("namespace"), top.get("db"), top.get("namespace"))


def _take_options(rest: list[str], known: dict[str, str], into: dict[str, str]) -> bool:
    """Move the leading options of ``rest`` into ``into`` (the last one given wins, as in click);
    False on one this path does not know (``--help``, ``--no-redact``, ``--``, …)."""
    while rest and rest[0].startswith("-"):
        word = rest.pop(0)
        name, equals, value = word.partition("=")
        if name not in known or (equals and name == "-N"):
            return False
        if not equals:
            if not rest:
                return False
            value = rest.pop(0)
        into[known[name]] = value
    return True


def store_of(call: HookCall) -> tuple[str, str] | None:
    """The resolved database file and the namespace the in-process hook would open; None when the
    fast path cannot serve it as the CLI would (a server URL, no such file, an empty name)."""
    # As click reads them: the command's --db, else the CLI's, else $HARNESS_MEM_DB (taken as it is),
    # else the default file.
    location = call.db if call.db is not None else call.top_db if call.top_db is not None else \
        os.environ.get("HARNESS_MEM_DB") or os.path.join(_home_dir(), "memory.db")
    if not location.strip() or location.startswith(("postgresql://", "postgres://")):
        return None
    resolved = os.path.realpath(location)
    if not os.path.isfile(resolved):
        return None  # missing: no context, or the CLI's "no database" error
    namespace = call.namespace if call.namespace is not None else \
        call.top_namespace or os.environ.get("HARNESS_MEM_NAMESPACE") or "default"
    return resolved, namespace or "default"


def _home_dir() -> str:
    """:meth:`harness_mem.settings.Settings.home_dir`, without importing pydantic."""
    home = os.environ.get("HARNESS_MEM_HOME")
    if home:
        return os.path.expanduser(home)
    data = os.environ.get("XDG_DATA_HOME")
    base = os.path.expanduser(data) if data else os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "harness-mem")


def answer_hook(call: HookCall) -> int:
    """Answer the hook through its store's writer, starting one when none runs; the exit status."""
    started = time.monotonic()
    raw = sys.stdin.buffer.read(hook_client.MAX_PAYLOAD_BYTES + 1)
    store = store_of(call)
    if store is not None and len(raw) <= hook_client.MAX_PAYLOAD_BYTES:
        reply = hook_client.ask(*store, call.event, raw)
        if reply is not None and reply.handed_off:
            return 0  # the writer is held up: a detached copy of this hook waits for its ack
        if reply is not None:
            for notice in reply.notices:
                sys.stderr.write(f"note: {notice}\n")
            if reply.error is not None:
                sys.stderr.write(f"Error: {reply.error}\n")
                return 1
            if reply.output is not None:
                sys.stdout.write(reply.output + "\n")
            return 0
        hook_client.start(*store)
    # In process, but never past the host's patience: the store's lock may be held for long.
    hook_budget.run_within(lambda: run_cli(stdin=raw), started + hook_budget.IN_PROCESS_BUDGET)
    return 0  # not reached: the CLI exits


def run_cli(stdin: bytes | None = None) -> None:
    """The full CLI on ``sys.argv``, reading ``stdin`` (bytes already read) when given."""
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    from .cli import main as cli_main

    cli_main()


def main() -> None:
    call = hook_call(sys.argv[1:])
    if call is None:
        run_cli()
    else:
        sys.exit(answer_hook(call))


if __name__ == "__main__":
    main()
