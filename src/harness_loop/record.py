"""Session recording (JSONL), offline replay with divergence reports, and a readable trace.

A :class:`SessionRecorder` writes one JSON object per line, each tagged with ``kind`` and ``ts_ms``,
to a file of its own: one file per run, so a recording holds exactly one run and replays on its own. Kinds::

    start{source, session, task, system, config, tools, acceptance, workspace}
    heartbeat{iter}
    pre_model{iter, history_len, tools_count, guides, purpose?}
    post_model{iter, output, purpose?}          model_error{iter, error, purpose?}
    pre_tool{iter, seq, action{tool, call_id, args}, denied_by?}
    post_tool{iter, seq, call_id, tool, result{ok, content, digest}, elapsed_ms | denied}
    feedback{iter, origin, text}                acceptance{iter, check, passed, reason}
    compaction{iter, replaced, tokens_before, tokens_after, budget}
    budget_warning{iter, ratio}                 stuck{iter, origin, reason, repeated}
    cancelled{iter}                             deadline{iter, time_limit}
    end{outcome | error, elapsed_ms}

:func:`replay` re-runs the loop from the recording alone: the model's turns come from ``post_model``,
tool results from ``post_tool`` (as the model saw them, already shaped), denials from ``pre_tool``,
acceptance verdicts from ``acceptance``. No model, no tool function and no file is touched: tools
are not re-executed live, because a live re-run can change the world and cannot show where the run
went differently. Whenever the replayed loop asks for something
the recording does not hold -- another tool, other arguments, one model turn too many -- replay stops
and reports a :class:`Divergence`; at the end it compares the outcome with the recorded one.

**A recording is redacted.** It is a file on disk holding the task, every tool argument and result
and every model turn, so :class:`SessionRecorder` scrubs each record with its redactor (by default
:meth:`~harness_mem.Redactor.default`) before writing it, and says so in ``start.redacted``. Replay
therefore re-runs the *redacted* session: the task, the model's turns and the tool results it
serves are the scrubbed text, consistently (a value is scrubbed the same way in a model turn and in
the tool call it made, so a redacted recording replays without divergence). A replay cannot
reproduce what depended on a redacted value's content; a recorder made with ``redactor=None``
keeps the raw text (and records ``"redacted": false``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal, NoReturn

import anyio

from harness_mem.errors import InvalidInputError, ModelError
from harness_mem.models import counted
from harness_mem.redaction import Redactor

from .chat import Model, ModelOutput, ModelRequest, ToolCall, ToolSpec, canonical_json
from .guards import AcceptanceProbe, Verdict
from .hooks import Deny, Event, HookBus, HookEvent
from .loop import AgentLoop, LoopConfig, Outcome, Recorder
from .spill import ToolResult
from .tools import ToolRegistry

__all__ = [
    "Divergence",
    "RecordingError",
    "ReplayReport",
    "Session",
    "SessionRecorder",
    "SessionStats",
    "format_trace",
    "read_session",
    "replay",
]

FORMAT_VERSION = 1


class RecordingError(InvalidInputError):
    """A recording cannot be written or read as asked."""


class SessionRecorder:
    """Writes one run's timeline to a fresh JSONL file (created exclusively; never appended to).

    :param redactor: what every record passes before it is written; ``"default"`` is
        :meth:`Redactor.default`, None writes the raw text (the start record says which).
    """

    def __init__(self, path: str | Path, *, redactor: Redactor | Literal["default"] | None = "default") -> None:
        self.path = Path(path)
        self.redactor: Redactor | None = Redactor.default() if redactor == "default" else redactor
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("x", encoding="utf-8")
        except FileExistsError:
            raise RecordingError(
                f"{self.path} already exists — recordings are never appended to; pick a new file "
                "or use SessionRecorder.create(directory)"
            ) from None
        except OSError as exc:
            raise RecordingError(
                f"cannot create {self.path}: {exc.strerror or exc} — check the directory"
            ) from None
        self._finished = False

    @classmethod
    def create(
        cls, directory: str | Path, *, prefix: str = "session", redactor: Redactor | Literal["default"] | None = "default"
    ) -> SessionRecorder:
        """A recorder on a new, uniquely named file in ``directory``."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        return cls(Path(directory) / f"{prefix}-{stamp}-{secrets.token_hex(4)}.jsonl", redactor=redactor)

    def write(self, kind: str, /, **fields: Any) -> None:
        """Append one record and flush it, so a crash loses at most the line being written."""
        if self._file is None:
            raise RecordingError(f"{self.path} is closed — create a new SessionRecorder")
        if self._finished:
            raise RecordingError(
                f"{self.path} already holds a finished run — use one SessionRecorder per run "
                "(SessionRecorder.create(directory) names a fresh file)"
            )
        if self.redactor is not None:
            # As JSON first: an object written through str() must not slip past the redactor.
            plain = json.loads(json.dumps(fields, ensure_ascii=False, default=str))
            fields = self.redactor.scrub_value(plain).value
        record = {"kind": kind, "ts_ms": int(time.time() * 1000), **fields}
        if kind == "start":
            record["format"] = FORMAT_VERSION
            record["redacted"] = self.redactor is not None
        self._file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._file.flush()
        if kind == "end":
            self._finished = True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Session:
    """The records of one file, plus the lines that were not records (line number, problem)."""

    records: list[dict[str, Any]]
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    path: Path | None = None

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind") == kind]


def read_session(path: str | Path, *, strict: bool = True) -> Session:
    """Read a recording; with ``strict``, any malformed line raises :class:`RecordingError` naming its line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordingError(f"{path} does not exist — give the path of a .jsonl recording") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"cannot read {path}: {exc} — is it a recording?") from None
    records: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append((n, f"not valid JSON ({exc.msg})"))
            continue
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            bad.append((n, 'not a record (a JSON object with a "kind")'))
            continue
        records.append(record)
    if strict and bad:
        where = ", ".join(str(n) for n, _ in bad[:10]) + (" …" if len(bad) > 10 else "")
        raise RecordingError(
            f"{path}: malformed line{'s' if len(bad) > 1 else ''} {where} ({bad[0][1]})"
            " — fix or delete those lines (a crashed run can leave a partial last line)"
        )
    if strict and not any(r["kind"] == "start" for r in records):
        raise RecordingError(f"{path} has no start record — it is not a harness-loop recording")
    return Session(records, bad, path)


@dataclass(frozen=True)
class SessionStats:
    """Totals of a recording."""

    model_calls: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    tool_calls: int
    iters: int
    duration_ms: int

    @classmethod
    def of(cls, records: Sequence[Mapping[str, Any]]) -> SessionStats:
        outputs = [r.get("output") or {} for r in records if r.get("kind") == "post_model"]
        usage = [o.get("usage") or {} for o in outputs]
        beats = [int(r.get("iter", 0)) for r in records if r.get("kind") == "heartbeat"]
        stamps = [int(r["ts_ms"]) for r in records if isinstance(r.get("ts_ms"), int)]
        return cls(
            model_calls=len(outputs),
            input_tokens=sum(int(u.get("input", 0)) for u in usage),
            output_tokens=sum(int(u.get("output", 0)) for u in usage),
            cached_input_tokens=sum(int(u.get("cached_input", 0)) for u in usage),
            tool_calls=sum(1 for r in records if r.get("kind") == "pre_tool"),
            iters=max(beats) + 1 if beats else 0,
            duration_ms=max(stamps) - min(stamps) if stamps else 0,
        )


def _clip(text: Any, width: int = 80) -> str:
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


def _call_text(action: Mapping[str, Any]) -> str:
    args = action.get("args")
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in args.items())
    else:
        inner = repr(args)
    return f"{action.get('tool') or action.get('name')}({_clip(inner, 60)})"


def format_trace(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The timeline as lines of text: one line per model turn, tool call, guard and verdict."""
    stamps = [r["ts_ms"] for r in records if isinstance(r.get("ts_ms"), int)]
    t0 = min(stamps) if stamps else 0
    lines: list[str] = []
    for r in records:
        kind = r.get("kind")
        at = f"+{(int(r.get('ts_ms', t0)) - t0) / 1000:.3f}s".ljust(9)
        it = f"#{r['iter']}" if "iter" in r else ""
        line: str | None
        if kind == "start":
            tools = ", ".join(t.get("name", "?") for t in r.get("tools", [])) or "none"
            line = f"start     session {r.get('session')} — task: {_clip(r.get('task', ''))} (tools: {tools})"
        elif kind == "post_model":
            out = r.get("output") or {}
            calls = out.get("tool_calls") or []
            u = out.get("usage") or {}
            if calls:
                what = ", ".join(_call_text(c) for c in calls)
            elif (out.get("text") or "").strip():
                what = _clip(out["text"], 70)
            else:
                what = "(no text)" + (
                    f" reasoning: {_clip(out['reasoning'], 50)}" if out.get("reasoning") else ""
                )
            tag = {"synthesis": "synth", "compaction": "compact"}.get(str(r.get("purpose")), "model")
            line = (
                f"{tag:<9} {'→ ' if calls else ''}{what}  [in {u.get('input', 0)}, out {u.get('output', 0)}]"
            )
        elif kind == "model_error":
            line = f"model     ERROR {_clip(r.get('error', ''))}"
        elif kind == "pre_tool" and r.get("denied_by"):
            line = f"tool      {_call_text(r.get('action') or {})} DENIED: {_clip(r['denied_by'], 60)}"
        elif kind == "post_tool" and not r.get("denied"):
            res = r.get("result") or {}
            content = res.get("content")
            if isinstance(content, dict) and content.get("spilled"):
                summary = f"spilled {content.get('bytes_total')} B to {content.get('path')}"
            else:
                summary = _clip(content, 60)
            line = f"tool      {r.get('tool')} {'ok' if res.get('ok') else 'FAILED'} ({r.get('elapsed_ms', 0):g} ms): {summary}"
        elif kind == "feedback":
            line = f"feedback  [{r.get('origin')}] {_clip(r.get('text', ''), 70)}"
        elif kind == "acceptance":
            verdict = "passed" if r.get("passed") else f"FAILED: {_clip(r.get('reason', ''), 60)}"
            line = f"accept    {r.get('check')} {verdict}"
        elif kind == "compaction":
            line = (
                f"compact   {counted(int(r.get('replaced') or 0), 'message')} summarised: ~{r.get('tokens_before')} → "
                f"~{r.get('tokens_after')} tokens (budget {r.get('budget')})"
            )
        elif kind == "budget_warning":
            line = f"budget    iteration budget exhausted (ratio {r.get('ratio')})"
        elif kind == "stuck":
            line = f"stuck     {r.get('reason')}"
        elif kind in ("cancelled", "deadline"):
            line = f"{kind:<9} run interrupted"
        elif kind == "end":
            if "error" in r:
                line = f"end       ERROR {_clip(r['error'])}"
            else:
                o = r.get("outcome") or {}
                text = o.get("text", o.get("last_text")) or ""
                line = f"end       {o.get('kind')}: iters {o.get('iters')}, tools {o.get('tools_called')}" + (
                    f" — {_clip(text, 60)}" if text else ""
                )
        else:
            line = None  # heartbeat, pre_model, pre_tool and post_tool of denials add nothing readable
        if line is not None:
            lines.append(f"{at} {it:>4} {line}")
    s = SessionStats.of(records)
    lines.append(
        f"{s.model_calls} model calls, {s.tool_calls} tool calls, {s.iters} iterations, "
        f"tokens in {s.input_tokens} (cached {s.cached_input_tokens}) / out {s.output_tokens}, {s.duration_ms} ms"
    )
    return lines


# -- replay ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """Where the replayed run left the recording."""

    what: str
    iter: int | None
    expected: Any
    got: Any

    def __str__(self) -> str:
        where = f"iteration {self.iter}: " if self.iter is not None else ""
        return f"{where}{self.what}: recorded {_clip(self.expected, 100)}, replay {_clip(self.got, 100)}"


class _Diverged(Exception):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(str(divergence))
        self.divergence = divergence


class ReplayModelError(ModelError):
    """The recorded model call failed; replay fails the same way."""


@dataclass(frozen=True)
class ReplayReport:
    """What replay found: the replayed outcome, the recorded one, and any divergences."""

    outcome: Outcome | None
    recorded: dict[str, Any] | None
    divergences: list[Divergence]
    model_turns: int
    tool_results: int
    error: str | None = None  # the model error the replayed run ended with, as the recorded one did

    @property
    def reproduced(self) -> bool:
        return not self.divergences


# Fields that legitimately differ between a run and its replay.
_UNCOMPARED = frozenset({"session"})


class _Tape:
    """The recording, indexed for replay."""

    def __init__(self, session: Session) -> None:
        recs = session.records
        self.start = next(r for r in recs if r["kind"] == "start")
        self.model_turns: deque[dict[str, Any]] = deque(
            r for r in recs if r["kind"] in ("post_model", "model_error")
        )
        self.tools: dict[int, dict[str, Any]] = {}
        for r in recs:
            if r["kind"] in ("pre_tool", "post_tool") and isinstance(r.get("seq"), int):
                self.tools.setdefault(r["seq"], {})[r["kind"]] = r
        self.verdicts: dict[str, deque[dict[str, Any]]] = {}
        for r in recs:
            if r["kind"] == "acceptance":
                self.verdicts.setdefault(str(r.get("check")), deque()).append(r)
        end = next((r for r in reversed(recs) if r["kind"] == "end"), None)
        self.end_outcome: dict[str, Any] | None = end.get("outcome") if end else None
        self.end_error: str | None = end.get("error") if end else None
        self.interruption = next((r["kind"] for r in recs if r["kind"] in ("cancelled", "deadline")), None)
        self.loop: AgentLoop | None = None
        self.current_iter = 0
        self.turns_served = 0
        self.results_served = 0

    async def interrupt_or_diverge(self, what: str, expected: Any, got: Any) -> NoReturn:
        """The recording ran out here: re-enact the recorded interruption, or report a divergence."""
        if self.interruption and self.loop is not None:
            self.loop.interrupt(cancelled=self.interruption == "cancelled")
            await anyio.sleep_forever()  # the loop's cancel scope ends this wait
        raise _Diverged(Divergence(what, self.current_iter, expected, got))


class _ReplayModel:
    def __init__(self, tape: _Tape) -> None:
        self.tape = tape

    async def complete(self, request: ModelRequest) -> ModelOutput:
        tape = self.tape
        if not tape.model_turns:
            return await tape.interrupt_or_diverge(
                "model turn", "no further model turn", f"a model call with {counted(len(request.messages), 'message')}"
            )
        r = tape.model_turns.popleft()
        tape.current_iter = int(r.get("iter", tape.current_iter))
        tape.turns_served += 1
        if r["kind"] == "model_error":
            raise ReplayModelError(str(r.get("error")))
        return ModelOutput.from_dict(r.get("output") or {})


class _ReplayDispatcher:
    def __init__(self, tape: _Tape) -> None:
        self.tape = tape

    def is_read_only(self, name: str) -> bool:
        return False  # one at a time: the order of results is the recorded order by construction

    async def dispatch(self, call: ToolCall, seq: int) -> ToolResult:
        entry = self.tape.tools.get(seq, {})
        post = entry.get("post_tool")
        if post is None:
            return await self.tape.interrupt_or_diverge(
                "tool call", "no result for this call", _call_text({"tool": call.name, "args": call.args})
            )
        self.tape.results_served += 1
        return ToolResult.from_dict(post.get("result") or {})


def _check_call(tape: _Tape, call: ToolCall, seq: int) -> dict[str, Any] | None:
    pre: dict[str, Any] | None = tape.tools.get(seq, {}).get("pre_tool")
    if pre is None:
        return None
    action = pre.get("action") or {}
    got = {"tool": call.name, "args": call.args}
    if action.get("tool") != call.name or canonical_json(action.get("args")) != canonical_json(call.args):
        raise _Diverged(Divergence("tool call", tape.current_iter, _call_text(action), _call_text(got)))
    return pre


class _ReplayDenials:
    """Re-applies recorded denials, and checks each call against the recording before anything runs."""

    events = (Event.PRE_TOOL_USE,)

    def __init__(self, tape: _Tape) -> None:
        self.tape = tape

    def __call__(self, event: HookEvent) -> Deny | None:
        assert event.call is not None and event.seq is not None
        pre = _check_call(self.tape, event.call, event.seq)
        if pre is not None and pre.get("denied_by"):
            return Deny(str(pre["denied_by"]))
        return None


@dataclass
class _ReplayCheck:
    name: str
    tape: _Tape

    def check(self, probe: AcceptanceProbe) -> Verdict:
        queue = self.tape.verdicts.get(self.name)
        if not queue:
            raise _Diverged(
                Divergence(f"acceptance check {self.name}", self.tape.current_iter, "no verdict", "a check")
            )
        r = queue.popleft()
        return Verdict(bool(r.get("passed")), str(r.get("reason", "")), self.name)


def _config(data: Mapping[str, Any]) -> LoopConfig:
    # Wall-clock time is not replayed: a recorded deadline is re-enacted where it struck.
    return replace(LoopConfig.from_dict(dict(data)), time_limit=None)


def _compare(recorded: Mapping[str, Any] | None, outcome: Outcome) -> list[Divergence]:
    if recorded is None:
        return [Divergence("outcome", None, "no end record", outcome.kind)]
    got = outcome.to_dict()
    out = []
    for key in sorted((set(recorded) | set(got)) - _UNCOMPARED):
        if canonical_json(recorded.get(key)) != canonical_json(got.get(key)):
            out.append(Divergence(f"outcome {key}", None, recorded.get(key), got.get(key)))
    return out


async def replay(
    source: str | Path | Session | Iterable[Mapping[str, Any]],
    *,
    model: Model | None = None,
    recorder: Recorder | None = None,
) -> ReplayReport:
    """Re-run a recorded session offline and report whether it reproduced.

    :param source: a recording's path, a :class:`Session`, or its records.
    :param model: answer with this model instead of the recorded turns (tool results stay recorded).
    :param recorder: record the replay too (e.g. a :class:`SessionRecorder`).
    """
    if isinstance(source, Session):
        session = source
    elif isinstance(source, (str, Path)):
        session = read_session(source)
    else:
        session = Session([dict(r) for r in source])
    if not session.of_kind("start"):
        raise RecordingError("the recording has no start record — it is not a harness-loop recording")
    tape = _Tape(session)
    start = tape.start
    registry = ToolRegistry()
    loop = AgentLoop(
        model or _ReplayModel(tape),
        registry,
        system=start.get("system"),
        workspace=start.get("workspace") or ".",
        config=_config(start.get("config") or {}),
        hooks=HookBus([_ReplayDenials(tape)]),
        acceptance=[_ReplayCheck(str(name), tape) for name in start.get("acceptance", [])],
        recorder=recorder,
        dispatcher=_ReplayDispatcher(tape),
    )
    # The model must see the recorded tool list, though no tool can run.
    loop.tool_specs = [ToolSpec.from_dict(t) for t in start.get("tools", [])]
    tape.loop = loop
    divergences: list[Divergence] = []
    outcome: Outcome | None = None
    error: str | None = None
    try:
        outcome = await loop.run(str(start.get("task", "")))
    except _Diverged as exc:
        divergences.append(exc.divergence)
    except ReplayModelError as exc:
        error = str(exc)
        if tape.end_error is None or error not in tape.end_error:
            divergences.append(Divergence("model error", tape.current_iter, tape.end_error, error))
    else:
        divergences.extend(_compare(tape.end_outcome, outcome))
        if tape.model_turns and model is None:
            divergences.append(
                Divergence("model turns", None, f"{len(tape.model_turns)} more recorded turn(s)", "run ended")
            )
    return ReplayReport(outcome, tape.end_outcome, divergences, tape.turns_served, tape.results_served, error)
