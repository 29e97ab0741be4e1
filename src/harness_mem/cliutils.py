"""What the ``harness-mem`` and ``harness-loop`` command lines share, so that both behave alike.

- :func:`command_group` makes a CLI's top-level group: ``-h`` as well as ``--help``, ``--version``,
  and one error mapper (:func:`user_error`) around every command. A known
  :class:`~harness_mem.errors.HarnessMemError` becomes one line, ``Error: what — how to fix``, and
  exit status 1. Anything unexpected becomes one line too (with the exception's type), unless the
  CLI's ``*_RAISE_ERRORS`` variable is set or the test suite is running (it sets
  ``sys._called_from_test``): then the traceback shows, so a bug is never hidden from a test.
- :func:`db_option` and :func:`namespace_option` are ``--db`` and ``--namespace``.
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
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .errors import HarnessMemError
from .models import dumps
from .providers.hints import MEM_HINTS, Hints, check_model_config
from .settings import is_server_url

if TYPE_CHECKING:
    from .providers.openai import OpenAITextModel

__all__ = [
    "CONTEXT_SETTINGS",
    "DISTRIBUTION",
    "MappedErrorsGroup",
    "ModelSettings",
    "command_group",
    "db_option",
    "echo_json",
    "gc_report_lines",
    "json_object_option",
    "json_option",
    "model_options",
    "namespace_option",
    "one_line",
    "raise_errors",
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


def raise_errors(env: str) -> bool:
    """True when unexpected errors should keep their traceback: ``env`` is set, or tests are running."""
    return bool(os.environ.get(env)) or hasattr(sys, "_called_from_test")


def user_error(exc: BaseException, raise_errors_env: str) -> click.ClickException | None:
    """The one-line error a user sees for ``exc``; None when it should propagate unchanged.

    click's own exceptions (usage errors, ``Exit``, ``Abort``) and ``KeyboardInterrupt`` pass
    through; so does an unexpected exception when :func:`raise_errors` says so.
    """
    if isinstance(exc, click.ClickException | click.exceptions.Exit | click.Abort) or not isinstance(exc, Exception):
        return None
    if isinstance(exc, HarnessMemError):
        return click.ClickException(one_line(str(exc)))
    if raise_errors(raise_errors_env):
        return None
    return click.ClickException(
        f"unexpected {type(exc).__name__}: {one_line(str(exc))} — set {raise_errors_env}=1 for a traceback"
        " and report it"
    )


class MappedErrorsGroup(click.Group):
    """A group whose commands' errors go through :func:`user_error` (subcommands included)."""

    def __init__(self, *args: Any, raise_errors_env: str = "HARNESS_MEM_RAISE_ERRORS", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raise_errors_env = raise_errors_env

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # `harness-mem list | head` closes our stdout early: that is not an error, and Python's
            # complaint about the unflushed stdout would only be noise.
            sys.stderr.close()
            raise click.exceptions.Exit(0) from None
        except Exception as exc:
            mapped = user_error(exc, self.raise_errors_env)
            if mapped is None:
                raise
            raise mapped from None


def command_group(*, prog_name: str, raise_errors_env: str) -> Callable[[Callable[..., Any]], click.Group]:
    """``@click.group`` for a CLI's top level: ``-h``, ``--version`` and the shared error mapper."""

    def decorate(f: Callable[..., Any]) -> click.Group:
        f = click.version_option(package_name=DISTRIBUTION, prog_name=prog_name)(f)
        return click.group(cls=MappedErrorsGroup, context_settings=CONTEXT_SETTINGS,
                           raise_errors_env=raise_errors_env)(f)

    return decorate


# ---- the database --------------------------------------------------------------------------------


class StoreLocation(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A store's location: a file's path (a ``Path``), or a ``postgresql://`` URL (kept as text)."""

    name = "PATH|URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path | str:
        if isinstance(value, Path) or not is_server_url(value):
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
        (hints.timeout_option, "model_timeout", None,
         click.FloatRange(min=0, min_open=True), "Seconds to wait for each model reply [default: 120]."),
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
    elif report["vacuum"] == "incremental":
        done.append(f"{freed} free pages returned")
    elif report["free_pages_after"] and report["auto_vacuum"] == "none":
        done.append(f"{report['free_pages_after']} free pages kept (this file does not vacuum itself;"
                    " --vacuum rewrites it once)")
    sizes = report["tables"]
    lines = ["; ".join(done), f"file: {_size(report['bytes_before'])} -> {_size(report['bytes_after'])}"]
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
