"""What the ``harness-mem`` and ``harness-loop`` command lines share, so that both behave alike.

- :func:`command_group` makes a CLI's top-level group: ``-h`` as well as ``--help``, ``--version``,
  and one error mapper (:func:`user_error`) around every command. A known
  :class:`~harness_mem.errors.HarnessMemError` becomes one line, ``Error: what — how to fix``, and
  exit status 1. So do the faults hostile input reaches below the library's own checks (a number
  too large for SQLite, JSON nested past the parser's stack, bytes that are not UTF-8, a damaged
  database file: :func:`fault_message`). Anything else unexpected becomes one line too (with the
  exception's type), unless the CLI's ``*_RAISE_ERRORS`` variable is set or the test suite is
  running (it sets ``sys._called_from_test``): then the traceback shows, so a bug is never hidden
  from a test.
- Every error line goes through :func:`shown` on its way out: input an error quotes (an id, a
  kind, a flag's value) may be a secret pasted in the wrong place, and it is redacted like stored
  text. The MCP server's tool errors use it too.
- :func:`count_type` and :class:`FiniteFloat` are the numeric flag types: bounded on both sides,
  so no value overflows a 64-bit column, a C int or a timeout.
- :func:`db_option` and :func:`namespace_option` are ``--db`` and ``--namespace`` (:func:`namespaces_option`
  when a command reads several).
- :func:`json_option` and :func:`json_object_option` are ``--json``: one JSON object per line (or
  one object) on stdout, written by :func:`echo_json`.
- :func:`model_options` declares the model flags, ``--model-url``, ``--model``, ``--api-key`` and
  ``--model-timeout``, with the environment variables a :class:`~harness_mem.providers.hints.Hints`
  names, and hands the command one :class:`ModelSettings`.

Only click and harness_mem's light modules are imported here: the HTTP client loads when a command
actually builds a model.
"""

from __future__ import annotations

import functools
import math
import os
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import click

from .errors import HarnessMemError
from .models import dumps
from .providers.hints import MEM_HINTS, Hints, check_model_config
from .settings import is_server_url

if TYPE_CHECKING:
    from .providers.openai import OpenAITextModel
    from .redaction import Redactor

__all__ = [
    "CONTEXT_SETTINGS",
    "DISTRIBUTION",
    "MAX_COUNT",
    "MAX_ERROR_CHARS",
    "MAX_MODEL_TIMEOUT",
    "FiniteFloat",
    "MappedErrorsGroup",
    "ModelSettings",
    "Query",
    "StoreLocation",
    "command_group",
    "count_type",
    "db_option",
    "echo_json",
    "fault_message",
    "gc_report_lines",
    "json_object_option",
    "json_option",
    "model_options",
    "namespace_option",
    "namespaces_option",
    "one_line",
    "raise_errors",
    "shown",
    "stats_lines",
    "user_error",
]

#: The installed distribution both command lines belong to (``--version`` reports its version).
DISTRIBUTION = "harness-mem"
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# ---- errors --------------------------------------------------------------------------------------


def one_line(text: str) -> str:
    """``text`` with its line breaks (and the blanks around them) folded into single spaces."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


#: An error line is cut to this many characters: one that quotes a whole argument is still short
#: enough to read. The cut comes after redaction, so it never leaves half a secret readable.
MAX_ERROR_CHARS = 500


@functools.cache
def _display_redactor() -> Redactor:
    from .redaction import Action, Redactor  # only when an error is shown: building it takes a while

    # Addresses stay: an error names the server it could not reach (`--model-url`, a PostgreSQL
    # host), and an address is not a credential; a password in a URL is still found.
    return Redactor.default().set_action("IP_ADDRESS", Action.KEEP)


def shown(text: str) -> str:
    """``text`` as an error line a user (or, over MCP, a model) may see: on one line, with the PII
    and secrets the default detectors find redacted (IP addresses excepted), and at most
    :data:`MAX_ERROR_CHARS` long.

    An error that names what it was given (``unknown kind 'password=…'``, ``no entry with id
    'AKIA…'``) would otherwise copy a secret pasted in the wrong place to a terminal, a log or a
    model's context: the store would have redacted it, so its errors do too (#24).
    """
    text = _display_redactor().scrub(one_line(text)).text
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def raise_errors(env: str) -> bool:
    """True when unexpected errors should keep their traceback: ``env`` is set, or tests are running."""
    return bool(os.environ.get(env)) or hasattr(sys, "_called_from_test")


def fault_message(exc: Exception) -> str | None:
    """A clear line (what, and how to fix it) for a fault that hostile input causes below the
    library's own checks; None for anything else, which stays unexpected.

    These are classes, not cases: an integer too large for SQLite or a C int, JSON nested past the
    parser's stack, text with bytes that are not UTF-8 (the command line keeps them as lone
    surrogates) or a character the output's encoding lacks, a database file that is damaged or
    unusable. Each leaves what is stored as it was: SQLite rolls the transaction back.
    """
    if isinstance(exc, UnicodeEncodeError):
        bad = str(exc.object[exc.start:exc.end])
        undecoded = bytes(ord(c) - 0xDC00 for c in bad if 0xDC80 <= ord(c) <= 0xDCFF)
        if undecoded:  # what os.fsdecode made of bytes that are not UTF-8 (surrogateescape)
            return (f"an argument or environment variable is not valid UTF-8 (byte {undecoded.hex(' ')})"
                    " — pass text as UTF-8")
        if "surrogate" in exc.reason:
            return f"the text holds {bad!r}, a lone surrogate, which is not valid Unicode — remove it"
        return (f"cannot write {bad!r} in {exc.encoding}, the output's encoding — set PYTHONIOENCODING=utf-8"
                " or use a UTF-8 locale")
    if isinstance(exc, OverflowError):
        return f"a number is too large ({one_line(str(exc))}) — use a smaller value"
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to read — flatten it"
    for sqlite in _sqlite_drivers():
        if isinstance(exc, sqlite.OperationalError | sqlite.DataError):
            # The file opened but refused this operation: locked, read-only, an I/O error, a value too big.
            return (f"the database refused the operation ({one_line(str(exc))}) — check that the file is"
                    " writable and not held by another program, then retry")
        if type(exc) is sqlite.DatabaseError:  # malformed pages met mid-query; not IntegrityError (a bug)
            return (f"the database file is damaged ({one_line(str(exc))}) — `harness-mem doctor` checks it;"
                    " restore a backup, or salvage it with `sqlite3 FILE .recover`")
    return None


def _sqlite_drivers() -> list[ModuleType]:
    """The SQLite modules whose errors may reach the CLI: the store's driver (pysqlite3 when it is
    installed) and the standard library's."""
    from .db import driver  # sqlite-utils: only when an error is being mapped

    try:
        return [driver(), sqlite3]
    except HarnessMemError:  # no driver can load extensions: no store was opened with one
        return [sqlite3]


def user_error(exc: BaseException, raise_errors_env: str) -> click.ClickException | None:
    """The one-line error a user sees for ``exc``; None when it should propagate unchanged.

    click's own exceptions (usage errors, ``Exit``, ``Abort``) and ``KeyboardInterrupt`` pass
    through; so does an unexpected exception when :func:`raise_errors` says so. Every message goes
    through :func:`shown`.
    """
    if isinstance(exc, click.ClickException | click.exceptions.Exit | click.Abort) or not isinstance(exc, Exception):
        return None
    if isinstance(exc, HarnessMemError):
        return click.ClickException(shown(str(exc)))
    if raise_errors(raise_errors_env):
        return None
    fault = fault_message(exc)
    if fault is not None:
        return click.ClickException(shown(fault))
    return click.ClickException(
        shown(f"unexpected {type(exc).__name__}: {one_line(str(exc))[:300]} — set {raise_errors_env}=1"
              " for a traceback and report it")
    )


def _redact_click_error(exc: click.ClickException) -> None:
    """Redact what click's own errors echo (``No such command 'AKIA…'``, a bad choice, a file name)."""
    # click types both attributes Final; they are plain attributes, read again only by show().
    setattr(exc, "message", shown(exc.message))  # noqa: B010
    if isinstance(exc, click.FileError):
        setattr(exc, "ui_filename", shown(exc.ui_filename))  # noqa: B010


class MappedErrorsGroup(click.Group):
    """A group whose commands' errors go through :func:`user_error` (subcommands included), and
    whose usage errors are redacted like every other error line."""

    def __init__(self, *args: Any, raise_errors_env: str = "HARNESS_MEM_RAISE_ERRORS", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raise_errors_env = raise_errors_env

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:  # the top level's own flags are parsed here, before invoke
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            _redact_click_error(exc)
            raise

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:
            args = hoist_shared_options(self, ctx, args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # `harness-mem list | head` closes our stdout early: that is not an error, and Python's
            # complaint about the unflushed stdout would only be noise.
            sys.stderr.close()
            raise click.exceptions.Exit(0) from None
        except click.ClickException as exc:
            _redact_click_error(exc)
            raise
        except Exception as exc:
            mapped = user_error(exc, self.raise_errors_env)
            if mapped is None:
                raise
            raise mapped from None


def hoist_shared_options(top: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """``args`` with a group's own options, given after a subcommand, moved before it.

    ``harness-mem recall --db x.db "q"`` is what people type: ``--db`` (or ``-N``, ``--embedder``…)
    belongs to the group, and click would refuse it after the subcommand. An option the command
    itself (or a command below it) declares keeps its place, and nothing after ``--`` moves.
    """
    args = list(args)
    levels: list[tuple[click.Group, int]] = []  # each group on the way, and where its subcommand sits
    group: click.Group = top
    position = 0
    command: click.Command | None = None
    while command is None or isinstance(command, click.Group):
        if command is not None:
            group = command
        takes_value = {name for p in group.params if isinstance(p, click.Option) and not p.is_flag
                       for name in (*p.opts, *p.secondary_opts)}
        while position < len(args) and args[position].startswith("-") and args[position] != "--":
            position += 2 if args[position] in takes_value else 1
        if position >= len(args) or args[position] == "--":
            return args
        command = group.get_command(ctx, args[position])
        if command is None:
            return args  # click says what is wrong with it
        levels.append((group, position))
        position += 1
    declared_below = _option_names(command)
    end = args.index("--") if "--" in args[position:] else len(args)
    for group, at in reversed(levels):
        options = {name: p for p in group.params if isinstance(p, click.Option)
                   for name in (*p.opts, *p.secondary_opts) if name not in declared_below}
        index = position
        inserted = 0  # tokens moved before this group's subcommand so far: the next go after them, in order
        while index < end:
            name = args[index].split("=", 1)[0]
            option = options.get(name)
            if option is None:
                index += 1
                continue
            width = 1 if option.is_flag or "=" in args[index] else 2
            if index + width > end:  # a value-taking option with no value: click will say so where it is
                break
            moved = args[index:index + width]
            del args[index:index + width]
            # Where the earlier ones went, after them (a repeated -N keeps its order); what lies after
            # the moved tokens keeps its index, the command's name shifts.
            args[at + inserted:at + inserted] = moved
            inserted += width
            position += width
            index += width
        declared_below |= set(options)
    return args


def _option_names(command: click.Command) -> set[str]:
    """Every option name ``command`` and the commands below it declare."""
    names = {name for p in command.params if isinstance(p, click.Option) for name in (*p.opts, *p.secondary_opts)}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _option_names(sub)
    return names


def command_group(*, prog_name: str, raise_errors_env: str) -> Callable[[Callable[..., Any]], click.Group]:
    """``@click.group`` for a CLI's top level: ``-h``, ``--version`` and the shared error mapper."""

    def decorate(f: Callable[..., Any]) -> click.Group:
        f = click.version_option(package_name=DISTRIBUTION, prog_name=prog_name)(f)
        return click.group(cls=MappedErrorsGroup, context_settings=CONTEXT_SETTINGS,
                           raise_errors_env=raise_errors_env)(f)

    return decorate


# ---- numbers -------------------------------------------------------------------------------------

#: The largest count, limit or offset a flag takes. SQLite's integers stop at 2**63 - 1 (past it,
#: binding fails with OverflowError), and no store comes near a trillion entries.
MAX_COUNT = 10**12
#: The longest a model reply may be waited for (seconds): a day. Far longer overflows the clocks a
#: timeout is turned into (time_t, poll's milliseconds in a C int).
MAX_MODEL_TIMEOUT = 86_400.0


def count_type(minimum: int = 1, maximum: int = MAX_COUNT) -> click.IntRange:
    """The type of a count, limit or offset flag: bounded on both sides, so that no value overflows
    a 64-bit column or a C int and the error names the range."""
    return click.IntRange(minimum, maximum)


class Query(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """What to search for: an empty or blank query would silently find nothing."""

    name = "query"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not str(value).strip():
            self.fail("the query is empty — say what to look for", param, ctx)
        return value


class FiniteFloat(click.FloatRange):
    """A float flag that refuses nan and ±inf: click's FloatRange lets nan past every bound (each
    comparison with it is false), and an infinite value overflows what it is turned into."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number

    def _describe_range(self) -> str:
        # click's own, with no bound on either side, reads "x<=None" in the help.
        return "finite" if self.min is None and self.max is None else super()._describe_range()


# ---- the database --------------------------------------------------------------------------------


class StoreLocation(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A store's location: a file's path (a ``Path``), or a ``postgresql://`` URL (kept as text)."""

    name = "PATH|URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path | str:
        if isinstance(value, Path) or not is_server_url(value):
            if not str(value).strip():  # Path("") is ".", which would only be called a directory
                self.fail("is empty — name a database file (or a postgresql:// URL)", param, ctx)
            path = Path(value)
            if path.is_dir():
                self.fail(f"{str(path)!r} is a directory, not a database file — name a file in it", param, ctx)
            return path
        return str(value)


def db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--db`` (``db_path``): the store; None means :func:`harness_mem.db.default_path`."""
    return click.option(
        "--db", "db_path", type=StoreLocation(), envvar="HARNESS_MEM_DB",
        help="Database file, or a postgresql:// URL [env: HARNESS_MEM_DB; default: memory.db in the user data dir].",
    )(f)


def namespace_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--namespace``/``-N``: the tenant to read and write."""
    return click.option("--namespace", "-N", default="default", show_default=True, envvar="HARNESS_MEM_NAMESPACE",
                        help="Tenant to read and write [env: HARNESS_MEM_NAMESPACE].")(f)


class _Namespaces(click.types.StringParamType):
    """Namespace names; from the environment, several separated by commas (a name may hold a space)."""

    envvar_list_splitter = ","


def namespaces_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--namespace``/``-N``, repeatable (``namespaces``, a tuple; empty when not given): the first
    is the namespace written and read, each later one is read beside it (a team's shared space)."""
    return click.option("--namespace", "-N", "namespaces", type=_Namespaces(), multiple=True,
                        envvar="HARNESS_MEM_NAMESPACE",
                        help="Namespace to write and read [default: default]; repeat it to read more namespaces"
                             " beside the first, in one recall [env: HARNESS_MEM_NAMESPACE, comma-separated].")(f)


# ---- output --------------------------------------------------------------------------------------


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` (``as_json``) for commands that print a list: one JSON object per line."""
    return click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")(f)


def json_object_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` (``as_json``) for commands that print one report: one JSON object."""
    return click.option("--json", "as_json", is_flag=True, help="One JSON object.")(f)


def echo_json(data: Any) -> None:
    """``data`` as one line of compact JSON on stdout."""
    click.echo(dumps(data))


# ---- model flags ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSettings:
    """The model flags as given; :meth:`configured` checks them, :meth:`text_model` builds a model."""

    url: str | None
    name: str | None
    api_key: str | None = None
    timeout: float | None = None
    hints: Hints = MEM_HINTS

    def configured(self, *, required: bool) -> bool:
        """True when a model is given, False when none is; half a configuration (or none, when
        ``required``) is a :class:`~harness_mem.errors.ModelError` naming the missing flag."""
        return check_model_config(self.url, self.name, required=required, hints=self.hints)

    def text_model(self, *, required: bool) -> OpenAITextModel | None:
        """harness_mem's text model for these settings, or None when no model is given."""
        from .providers.openai import configured_text_model  # httpx: only when a model is used

        return configured_text_model(self.url, self.name, api_key=self.api_key, timeout=self.timeout,
                                     required=required, hints=self.hints)


def model_options(hints: Hints = MEM_HINTS) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The model flags, passed on to the command as one ``model_settings`` (:class:`ModelSettings`)."""
    # (flag, parameter name, environment variable, type, help)
    specs: list[tuple[str, str, str | None, Any, str]] = [
        (hints.url_option, "model_url", hints.url_env,
         None, f"OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 [env: {hints.url_env}]."),
        (hints.model_option, "model_name", hints.model_env, None, f"Model name [env: {hints.model_env}]."),
        (hints.key_option, "api_key", hints.key_env,
         None, f"Bearer token, if the server wants one [env: {hints.key_env}]."),
        (hints.timeout_option, "model_timeout", None, FiniteFloat(min=0, min_open=True, max=MAX_MODEL_TIMEOUT),
         "Seconds to wait for each model reply [default: 120]."),
    ]

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for _, name, _, _, _ in specs}
            settings = ModelSettings(values["model_url"], values["model_name"], values["api_key"],
                                     values["model_timeout"], hints)
            return f(*args, model_settings=settings, **kwargs)

        command: Callable[..., Any] = wrapper
        for flag, name, envvar, kind, help_text in reversed(specs):
            command = click.option(flag, name, envvar=envvar, type=kind, help=help_text)(command)
        return command

    return decorate


# ---- reports -------------------------------------------------------------------------------------


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def gc_report_lines(report: dict[str, Any]) -> list[str]:
    """What ``harness-mem gc`` (and ``harness-loop runs gc``) print: what was done, then sizes by table."""
    done = [f"{report['expired_purged']} expired and {report['forgotten_purged']} forgotten entries purged",
            "keyword index merged"]
    if "events_pruned" in report:
        done.insert(0, f"{report['events_pruned']} run events pruned")
    done.append("WAL checkpointed and truncated" if report["wal_truncated"]
                else "WAL checkpointed (another reader kept it from being truncated)")
    freed = report["free_pages_before"] - report["free_pages_after"]
    if report["vacuum"] == "full":
        done.append("file rewritten (VACUUM)")
    elif report["vacuum"] == "tables":
        done.append(f"tables holding entries' text rewritten, {max(freed, 0)} free pages returned")
    elif report["vacuum"] == "incremental":
        done.append(f"{freed} free pages returned")
    elif report["free_pages_after"] and report["auto_vacuum"] == "none":
        done.append(f"{report['free_pages_after']} free pages kept (this file does not vacuum itself;"
                    " --vacuum rewrites it once)")
    sizes = report["tables"]
    lines = ["; ".join(done), *report.get("rewrite_recovered", []),
             f"file: {_size(report['bytes_before'])} -> {_size(report['bytes_after'])}"]
    if report.get("log_remains") and (report["expired_purged"] or report["forgotten_purged"]):
        lines.insert(1, f"note: {report['log_remains']}")
    lines.append(f"{'table':<32} {'rows':>10} {'bytes':>10}")
    for table, row in sizes["by_table"].items():
        rows = "-" if row["rows"] is None else str(row["rows"])
        lines.append(f"{table:<32} {rows:>10} {_size(row['bytes']):>10}")
    if sizes["source"] == "pages":
        lines.append(_NO_SIZES.format(**sizes))
    return lines


_NO_SIZES = ("(bytes by table need a file with a pointer map (`gc --vacuum` adds one) or SQLite's dbstat, which"
             " this build lacks: {pages} pages of {page_size} bytes, {free_pages} free)")
#: ``stats`` lists at most this many parts of the file one by one, each at least 1% of it.
_PARTS_SHOWN, _PART_SHARE = 8, 0.01


def stats_lines(report: dict[str, Any]) -> list[str]:
    """What ``harness-mem stats`` prints: one line per count, then the largest sessions and the
    file's bytes by table and index (the largest parts; the others, and any under 1%, summed on one line)."""
    lines = []
    for key, value in report.items():
        if key in ("largest_sessions", "sizes"):
            continue
        if key in ("file_bytes", "bytes_per_entry") and value is not None:
            value = f"{_size(value)} ({value:,} B)" if key == "file_bytes" else f"{value:,.0f} B"
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(map(str, value)) or "-"
        lines.append(f"{key:<26} {value}")
    if report["largest_sessions"]:
        lines += ["", f"{'largest sessions':<40} {'entries':>8} {'content':>10}"]
        lines += [f"  {s['session']:<38} {s['turns']:>8,} {_size(s['content_bytes']):>10}"
                  for s in report["largest_sessions"]]
    sizes = report["sizes"]
    if not sizes["parts"]:
        return [*lines, "", _NO_SIZES.format(**sizes)]
    total = sizes["file_bytes"] or 1
    lines += ["", f"{'file by table and index':<40} {'bytes':>8} {'share':>10}"]
    shown = [p for p in sizes["parts"] if p["bytes"] / total >= _PART_SHARE][:_PARTS_SHOWN]
    for part in shown:
        lines.append(f"  {part['name']:<38} {_size(part['bytes']):>8} {part['bytes'] / total:>10.1%}")
    others = len(sizes["parts"]) - len(shown)
    if others:
        rest = sizes["file_bytes"] - sum(p["bytes"] for p in shown)
        lines.append(f"  {f'{others} more':<38} {_size(rest):>8} {rest / total:>10.1%}")
    lines.append(f"  {'total (' + sizes['source'] + ')':<38} {_size(sizes['file_bytes']):>8} {1:>10.1%}")
    return lines
