"""The ReAct loop: model → tool calls → results → repeat, guarded against loops and oversized results.

One iteration asks the model once. A turn with tool calls is dispatched -- each call vetted by
``PreToolUse`` hooks first, a leading run of read-only calls concurrently, each under its own
deadline, every result shaped by the 24 KiB ceiling (see :mod:`.spill`) -- and then the guards look
at the finished round (see :mod:`.guards`). A turn without tool calls is the answer: acceptance
checks decide between Done, one more try, and Unverified.

How a run ends (each an :class:`Outcome`, all carrying iters, tools called, usage, last text and
the transcript):

- :class:`Done` -- answered and acceptance passed; TaskCompleted fires only here.
- :class:`Unverified` -- answered, but acceptance still failed after the retry.
- :class:`BudgetExhausted` -- ``max_iters`` ran out: one forced tool-less synthesis call writes the
  best answer it can. Also the outcome of the wall-clock ``time_limit`` (``deadline_reached``),
  which is hard: no model call is made after it.
- :class:`Stuck` -- the stuck detector (or the monotony detector, after a synthesis call) stopped it.
- :class:`Cancelled` -- :meth:`AgentLoop.cancel` or the ``cancel`` event; in-flight model and tool
  calls are abandoned and each unanswered tool call gets a ``{"error": "run cancelled"}`` result,
  so the transcript stays well-formed.

Guides (objects with ``render(query) -> str``; memory recall will be one) are rendered before every
model call with the task as the query -- never a retry or synthesis prompt -- and their blocks are
replaced each time, not stacked into the history.

Long runs: with ``LoopConfig.context_budget`` set, a conversation that nears the budget is compacted
before the next model call -- older turns summarised by one call to the same model, the task and
the recent turns kept (see :mod:`.compaction`), a ``Compacted`` hook event fired.

The loop writes its timeline to an optional :class:`Recorder` (see :mod:`.record`). Tools are run by
a :class:`Dispatcher`; replay swaps in one that answers from the recording.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

import anyio
import anyio.lowlevel

from harness_mem.errors import InvalidInputError, ModelError
from harness_mem.models import check_nesting
from harness_mem.redaction import Redactor, cut_point

from .chat import Message, Model, ModelOutput, ModelRequest, Role, ToolCall, Usage
from .compaction import compaction_request, estimate_tokens, plan_compaction, summary_message
from .guards import (
    Acceptance,
    AcceptanceProbe,
    GuardAction,
    GuardSignal,
    MonotonyDetector,
    MonotonyPolicy,
    NonEmptyAnswer,
    StuckDetector,
    StuckPolicy,
    Verdict,
)
from .hooks import Deny, Event, HookBus, HookEvent
from .spill import ToolResult, shape_result
from .tools import Tool, ToolArgumentError, ToolContext, ToolRegistry, UnknownToolError

__all__ = [
    "AgentLoop",
    "BudgetExhausted",
    "Cancelled",
    "Dispatcher",
    "Done",
    "Guide",
    "LiveDispatcher",
    "LoopConfig",
    "Outcome",
    "Recorder",
    "Stuck",
    "Unverified",
]

T = TypeVar("T")

BUDGET_PROMPT = (
    "[system: iteration budget exhausted] You have used all {max_iters} iterations and cannot call tools "
    "any more. Write your final answer NOW using only the tool results already in this conversation. "
    "Mark facts you could not verify as UNKNOWN."
)


@runtime_checkable
class Guide(Protocol):
    """Renders a block of context for a query (e.g. recalled memories); empty means nothing to add."""

    def render(self, query: str) -> str: ...


@runtime_checkable
class Recorder(Protocol):
    """Receives the loop's timeline, one record per call."""

    def write(self, kind: str, /, **fields: Any) -> None: ...


@runtime_checkable
class Dispatcher(Protocol):
    """Runs (or, in replay, looks up) tool calls; results come back already shaped."""

    def is_read_only(self, name: str) -> bool: ...

    async def dispatch(self, call: ToolCall, seq: int) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """The loop's limits and guards.

    The defaults were chosen by measurement (leave-one-out runs on verifier-checked tasks): without
    the stuck detector a retry trap burned 16 rounds and two tasks in ten were lost, and spilling
    large results instead of truncating them cut the cost per solved task by 17%.

    Compaction (see :mod:`.compaction`): ``context_budget`` is the conversation's budget in
    *estimated* tokens (characters / 4, system prompt included, guide blocks not); None never
    compacts. Before a model call, a conversation at ``compact_at`` of the budget or more has its
    older turns summarised, keeping recent turns worth up to ``compact_keep`` of the budget.
    """

    max_iters: int = 50
    tool_timeout: float = 120.0
    stuck: StuckPolicy = field(default_factory=StuckPolicy)
    monotony: MonotonyPolicy = field(default_factory=MonotonyPolicy)
    max_result_bytes: int | None = 24576
    spill: bool = True
    acceptance_retries: int = 1
    time_limit: float | None = None
    max_output_tokens: int | None = 8000
    context_budget: int | None = None
    compact_at: float = 0.8
    compact_keep: float = 0.3

    def __post_init__(self) -> None:
        budget = self.context_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise InvalidInputError(
                f"context_budget must be a positive number of tokens or None (never compact), not {budget!r}"
            )
        if not 0 < self.compact_keep < self.compact_at <= 1:
            raise InvalidInputError(
                "compaction needs 0 < compact_keep < compact_at <= 1 (fractions of context_budget), "
                f"not compact_keep={self.compact_keep!r}, compact_at={self.compact_at!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopConfig:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if isinstance(values.get("stuck"), dict):
            values["stuck"] = StuckPolicy(**values["stuck"])
        if isinstance(values.get("monotony"), dict):
            values["monotony"] = MonotonyPolicy(**values["monotony"])
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a run ended. ``last_text`` is the latest non-blank text the model wrote."""

    kind: ClassVar[str] = "outcome"
    iters: int
    tools_called: int
    usage: Usage = field(default_factory=Usage)
    last_text: str | None = None
    session: str = ""
    transcript: tuple[Message, ...] = field(default=(), repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True only for a verified answer."""
        return False

    def to_dict(self) -> dict[str, Any]:
        """The outcome without its transcript, JSON-ready (what the recording's ``end`` holds)."""
        data: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            if f.name == "transcript":
                continue
            value = getattr(self, f.name)
            data[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
        return data


@dataclass(frozen=True, kw_only=True)
class Done(Outcome):
    """The model answered and every acceptance check passed."""

    kind: ClassVar[str] = "done"
    text: str
    verdict: Verdict = field(default_factory=lambda: Verdict(True))

    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, kw_only=True)
class Unverified(Outcome):
    """The model answered, but an acceptance check still failed when the retries ran out."""

    kind: ClassVar[str] = "unverified"
    text: str
    verdict: Verdict


@dataclass(frozen=True, kw_only=True)
class BudgetExhausted(Outcome):
    """The iteration budget (or, with ``deadline_reached``, the wall-clock limit) ran out."""

    kind: ClassVar[str] = "budget_exhausted"
    deadline_reached: bool = False


@dataclass(frozen=True, kw_only=True)
class Stuck(Outcome):
    """A guard stopped a run that was going round in circles."""

    kind: ClassVar[str] = "stuck"
    reason: str
    repeated: int


@dataclass(frozen=True, kw_only=True)
class Cancelled(Outcome):
    """The run was cancelled from outside."""

    kind: ClassVar[str] = "cancelled"


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data; ValueError when it nests deeper than MAX_NESTING (or contains
    itself), which JSON encoding would otherwise meet as a RecursionError."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    check_nesting(value, "the tool's result")
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _error(message: str, **extra: Any) -> ToolResult:
    return ToolResult(False, {"error": message, **extra})


class LiveDispatcher:
    """Runs calls against a :class:`ToolRegistry`: argument checks, per-call deadline, result shaping.

    ``redactor`` scrubs an oversized result before it is spilled to disk or cut (see :mod:`.spill`).
    """

    def __init__(
        self, registry: ToolRegistry, workspace: Path, config: LoopConfig, redactor: Redactor | None = None
    ) -> None:
        self.registry = registry
        self.workspace = workspace
        self.config = config
        self.redactor = redactor

    def is_read_only(self, name: str) -> bool:
        return name in self.registry and self.registry.get(name).read_only

    async def dispatch(self, call: ToolCall, seq: int) -> ToolResult:
        """Run ``call`` and return its shaped result; failures become ``ok: false`` results, not exceptions."""
        result = await self._run(call)
        return shape_result(
            result,
            tool=call.name,
            call_id=call.id,
            workspace=self.workspace,
            max_bytes=self.config.max_result_bytes,
            spill=self.config.spill,
            redactor=self.redactor,
        )

    async def _run(self, call: ToolCall) -> ToolResult:
        try:
            t = self.registry.get(call.name)
        except UnknownToolError as exc:
            return _error(str(exc))
        if isinstance(call.args, str):
            # Cut short of a value: the error is recorded and captured, redacted whole then.
            shown = call.args[: cut_point(call.args, 200, self.redactor)]
            return _error(
                f"the arguments to `{call.name}` were not valid JSON: {shown!r} — send them as one JSON object"
            )
        try:
            kwargs = t.bind(call.args, ToolContext(self.workspace, call.id, call.name))
        except ToolArgumentError as exc:
            return _error(str(exc))
        timeout = t.timeout if t.timeout is not None else self.config.tool_timeout
        result: ToolResult | None = None
        with anyio.move_on_after(timeout):
            result = await self._invoke(t, kwargs)
        if result is None:
            return _error(
                f"tool call exceeded its {timeout:g}s deadline and was cancelled; narrow it "
                "(a smaller input, a tighter query) or split it into steps",
                timeout=True,
            )
        return result

    @staticmethod
    async def _invoke(t: Tool, kwargs: dict[str, Any]) -> ToolResult:
        try:
            if t.is_async:
                value = await t.fn(**kwargs)
            else:
                # abandon_on_cancel: a deadline frees the loop even though the thread runs on.
                value = await anyio.to_thread.run_sync(partial(t.fn, **kwargs), abandon_on_cancel=True)
        except Exception as exc:  # a tool's failure is the model's information, not the loop's crash
            return _error(f"{type(exc).__name__}: {exc}")
        try:
            if isinstance(value, ToolResult):
                return replace(value, content=_jsonable(value.content))
            return ToolResult(True, _jsonable(value))
        except (ValueError, RecursionError) as exc:  # too deep for JSON: the model is told, the loop goes on
            return _error(f"`{t.name}` returned a value that cannot be sent as JSON: {exc}")


async def _gather(thunks: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run concurrently, results in order; the first exception is re-raised as itself (not a group)."""
    results: list[Any] = [None] * len(thunks)
    errors: list[BaseException] = []

    async def one(i: int) -> None:
        try:
            results[i] = await thunks[i]()
        except Exception as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(len(thunks)):
            tg.start_soon(one, i)
    if errors:
        raise errors[0]
    return results


@dataclass
class _RunState:
    task: str
    session: str
    messages: list[Message]
    retries_left: int
    stuck: StuckDetector
    monotony: MonotonyDetector
    started: float = field(default_factory=time.monotonic)
    iter: int = 0  # the current iteration, 0-based; every record and hook event carries it
    iters: int = 0  # model calls completed (synthesis calls aside)
    tools_called: int = 0
    seq: int = 0
    usage: Usage = field(default_factory=Usage)
    last_text: str | None = None
    cancelled: bool = False
    scope: anyio.CancelScope | None = None
    # The round in flight, so a cancellation can answer its calls and keep the transcript well-formed.
    open_calls: tuple[ToolCall, ...] = ()
    open_results: list[ToolResult | None] = field(default_factory=list)


def new_session_id() -> str:
    """A sortable, unique session id: UTC time plus random bits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


class AgentLoop:
    """A ReAct loop over one model and a set of tools.

    :param model: anything with ``async complete(request) -> ModelOutput``.
    :param tools: tools, typed functions, or a :class:`ToolRegistry`.
    :param system: the system prompt.
    :param workspace: where tools work and oversized results are spilled.
    :param config: limits and guards (:class:`LoopConfig`).
    :param hooks: a :class:`HookBus` or hook callables.
    :param guides: context blocks rendered before each model call.
    :param acceptance: checks on the final answer; default ``[NonEmptyAnswer()]``.
    :param recorder: receives the run's timeline (see :class:`harness_loop.record.SessionRecorder`).
    :param dispatcher: runs tool calls; default a :class:`LiveDispatcher` over ``tools``.
    :param redactor: scrubs what the loop writes to the workspace (oversized results spilled to
        ``.harness/spill/``): ``"default"`` is :meth:`Redactor.default`; None writes them as given.
    """

    def __init__(
        self,
        model: Model,
        tools: ToolRegistry | Iterable[Tool | Callable[..., Any]] = (),
        *,
        system: str | None = None,
        workspace: str | Path = ".",
        config: LoopConfig | None = None,
        hooks: HookBus | Iterable[Callable[[HookEvent], Deny | None]] = (),
        guides: Sequence[Guide] = (),
        acceptance: Sequence[Acceptance] | None = None,
        recorder: Recorder | None = None,
        dispatcher: Dispatcher | None = None,
        redactor: Redactor | Literal["default"] | None = "default",
    ) -> None:
        self.model = model
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.system = system
        self.workspace = Path(workspace).resolve()
        self.config = config or LoopConfig()
        self.hooks = hooks if isinstance(hooks, HookBus) else HookBus(hooks)
        self.guides = list(guides)
        self.acceptance: list[Acceptance] = [NonEmptyAnswer()] if acceptance is None else list(acceptance)
        self.recorder = recorder
        self.redactor: Redactor | None = Redactor.default() if redactor == "default" else redactor
        self.dispatcher = dispatcher or LiveDispatcher(self.registry, self.workspace, self.config, self.redactor)
        self.tool_specs = self.registry.specs()
        self._state: _RunState | None = None

    # -- control -----------------------------------------------------------------------------

    def cancel(self) -> None:
        """Cancel the run in progress (if any): it returns :class:`Cancelled`."""
        self.interrupt(cancelled=True)

    def interrupt(self, *, cancelled: bool) -> None:
        """End the run in progress: as cancelled, or (without ``cancelled``) as if its deadline
        struck, which is how replay re-enacts a recorded deadline."""
        st = self._state
        if st is not None and st.scope is not None:
            st.cancelled = st.cancelled or cancelled
            st.scope.cancel()

    async def run(
        self, task: str, *, cancel: anyio.Event | None = None, time_limit: float | None = None
    ) -> Outcome:
        """Work on ``task`` until an answer, a guard, the budget, the time limit or a cancellation ends it."""
        if self._state is not None:
            raise RuntimeError(
                "this AgentLoop is already running a task — create one AgentLoop per concurrent task"
            )
        cfg = self.config
        st = _RunState(
            task=task,
            session=new_session_id(),
            messages=[Message(Role.USER, task, origin="task")],
            retries_left=cfg.acceptance_retries,
            stuck=StuckDetector(cfg.stuck),
            monotony=MonotonyDetector(cfg.monotony),
        )
        limit = cfg.time_limit if time_limit is None else time_limit
        self._record(  # before the run counts as started: a recorder that refuses leaves the loop reusable
            "start",
            source="Startup",
            session=st.session,
            task=task,
            system=self.system,
            config=replace(cfg, time_limit=limit).to_dict(),
            tools=[s.to_dict() for s in self.tool_specs],
            acceptance=[a.name for a in self.acceptance],
            workspace=str(self.workspace),
        )
        self._state = st
        try:
            self._fire(Event.SESSION_START, st, task=task)
            outcome = await self._run_scoped(st, cancel, limit)
        except BaseException as exc:
            # No SessionEnd here: the exception is the news, and a failing hook must not mask it.
            self._record("end", error=f"{type(exc).__name__}: {exc}", elapsed_ms=self._elapsed_ms(st))
            raise
        finally:
            self._state = None
        self._record("end", outcome=outcome.to_dict(), elapsed_ms=self._elapsed_ms(st))
        self._fire(Event.SESSION_END, st, outcome=outcome)
        return outcome

    async def _run_scoped(self, st: _RunState, cancel: anyio.Event | None, limit: float | None) -> Outcome:
        deadline = anyio.current_time() + limit if limit is not None else math.inf
        outcome: Outcome | None = None
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope(deadline=deadline) as scope:
                st.scope = scope
                if cancel is not None:
                    if cancel.is_set():
                        self.cancel()
                    tg.start_soon(self._watch_cancel, cancel)
                try:
                    outcome = await self._iterate(st)
                except Exception as exc:  # stashed so the task group does not wrap it in an ExceptionGroup
                    error = exc
            st.scope = None
            tg.cancel_scope.cancel()
        if error is not None:
            raise error
        if outcome is not None:
            return outcome
        self._close_open_round(st)
        if st.cancelled:
            self._record("cancelled", iter=st.iter)
            self._fire(Event.CANCELLED, st)
            return Cancelled(**self._common(st))
        self._record("deadline", iter=st.iter, time_limit=limit)
        return BudgetExhausted(deadline_reached=True, **self._common(st))

    async def _watch_cancel(self, event: anyio.Event) -> None:
        await event.wait()
        self.cancel()

    # -- the iterations ----------------------------------------------------------------------

    async def _iterate(self, st: _RunState) -> Outcome:
        cfg = self.config
        while st.iters < cfg.max_iters:
            # A checkpoint delivers a cancel or deadline even when the model never yields.
            await anyio.lowlevel.checkpoint()
            st.iter = st.iters
            self._record("heartbeat", iter=st.iter)
            self._fire(Event.HEARTBEAT, st)
            output = await self._call_model(st, tools=True)
            st.iters += 1
            if not output.tool_calls:
                verdict = self._accept(st, output)
                if not verdict.passed and st.retries_left > 0 and st.iters < cfg.max_iters:
                    st.retries_left -= 1
                    self._push_feedback(st, "acceptance", verdict.reason)
                    continue
                # A blank answer with reasoning reports the reasoning: it is all the model said.
                text = output.text if output.text and output.text.strip() else output.reasoning or ""
                if verdict.passed:
                    self._fire(Event.TASK_COMPLETED, st, text=text)
                    return Done(text=text, verdict=verdict, **self._common(st))
                return Unverified(text=text, verdict=verdict, **self._common(st))
            round_ = await self._dispatch_round(st, output.tool_calls)
            for signal in (st.stuck.observe(round_), st.monotony.observe([c.name for c, _ in round_])):
                if signal is None:
                    continue
                if signal.action is GuardAction.NUDGE:
                    self._push_feedback(st, signal.origin, signal.message)
                    continue
                return await self._stop_stuck(st, signal)
        st.iter = st.iters  # the synthesis call is an iteration of its own in the timeline
        self._record("budget_warning", iter=st.iter, ratio=1.0)
        self._fire(Event.BUDGET_WARNING, st, ratio=1.0)
        synthesis = await self._synthesize(st, BUDGET_PROMPT.format(max_iters=cfg.max_iters), "budget")
        return BudgetExhausted(**self._common(st, last_text=synthesis or st.last_text))

    async def _stop_stuck(self, st: _RunState, signal: GuardSignal) -> Stuck:
        if signal.message:  # the monotony guard asks for one last synthesis; the stuck guard does not
            await self._synthesize(st, signal.message, signal.origin)
        self._record("stuck", iter=st.iter, origin=signal.origin, reason=signal.reason, repeated=signal.count)
        return Stuck(reason=signal.reason, repeated=signal.count, **self._common(st))

    def _request(self, st: _RunState, *, tools: bool) -> ModelRequest:
        # The query is always the task: a retry or synthesis prompt would make a poor recall query.
        guides = tuple(block for g in self.guides if (block := g.render(st.task)))
        return ModelRequest(
            messages=tuple(st.messages),
            system=self.system,
            guides=guides,
            tools=self.tool_specs if tools else (),
            max_output_tokens=self.config.max_output_tokens,
        )

    async def _call_model(self, st: _RunState, *, tools: bool, purpose: str | None = None) -> ModelOutput:
        if self.config.context_budget is not None:
            await self._maybe_compact(st, self.config.context_budget)
        request = self._request(st, tools=tools)
        self._record(
            "pre_model",
            iter=st.iter,
            history_len=len(request.messages),
            tools_count=len(request.tools),
            guides=len(request.guides),
            **({"purpose": purpose} if purpose else {}),
        )
        self._fire(Event.PRE_MODEL, st, request=request)
        try:
            output = await self.model.complete(request)
        except Exception as exc:
            self._record("model_error", iter=st.iter, error=f"{type(exc).__name__}: {exc}")
            raise
        st.usage += output.usage
        if output.text and output.text.strip():
            st.last_text = output.text
        if self.recorder is not None:
            self._record(
                "post_model",
                iter=st.iter,
                output=output.to_dict(),
                **({"purpose": purpose} if purpose else {}),
            )
        self._fire(Event.POST_MODEL, st, output=output)
        st.messages.append(Message(Role.ASSISTANT, output.text or "", tool_calls=output.tool_calls))
        return output

    async def _maybe_compact(self, st: _RunState, budget: int) -> None:
        """Summarise the older turns when the conversation has reached ``compact_at`` of ``budget``.

        A failed or blank summary leaves the conversation as it was (the call is recorded); the
        next model call tries again.
        """
        cfg = self.config
        before = estimate_tokens(st.messages, self.system)
        if before < cfg.compact_at * budget:
            return
        split = plan_compaction(st.messages, cfg.compact_keep * budget)
        if split is None:
            return
        older = st.messages[1:split]
        limit = max(256, budget // 10)
        if cfg.max_output_tokens is not None:
            limit = min(limit, cfg.max_output_tokens)
        request = compaction_request(st.task, older, max_output_tokens=limit)
        self._record(
            "pre_model", iter=st.iter, history_len=len(request.messages), tools_count=0, guides=0,
            purpose="compaction",
        )
        try:
            output = await self.model.complete(request)
        except Exception as exc:
            self._record("model_error", iter=st.iter, error=f"{type(exc).__name__}: {exc}", purpose="compaction")
            if not isinstance(exc, ModelError):
                raise
            return  # the conversation stays whole; the call it was making room for goes ahead
        st.usage += output.usage
        if self.recorder is not None:
            self._record("post_model", iter=st.iter, output=output.to_dict(), purpose="compaction")
        summary = (output.text or "").strip()
        if not summary:
            return
        st.messages[1:split] = [summary_message(summary, len(older))]
        after = estimate_tokens(st.messages, self.system)
        self._record(
            "compaction", iter=st.iter, replaced=len(older), tokens_before=before, tokens_after=after,
            budget=budget,
        )
        self._fire(Event.COMPACTED, st, text=summary, ratio=round(before / budget, 3), replaced=len(older))

    async def _synthesize(self, st: _RunState, prompt: str, purpose: str) -> str | None:
        """One tool-less model call to write the best answer possible; a failure yields None."""
        self._push_feedback(st, purpose, prompt, fire=False)
        try:
            output = await self._call_model(st, tools=False, purpose="synthesis")
        except ModelError:  # recorded as model_error; the outcome already tells the caller what happened
            return None
        return output.text if output.text and output.text.strip() else None

    def _accept(self, st: _RunState, output: ModelOutput) -> Verdict:
        probe = AcceptanceProbe(output.text or "", output.reasoning, self.workspace, tuple(st.messages))
        for check in self.acceptance:
            verdict = check.check(probe)
            verdict = replace(verdict, check=verdict.check or check.name)
            self._record(
                "acceptance", iter=st.iter, check=check.name, passed=verdict.passed, reason=verdict.reason
            )
            self._fire(
                Event.ACCEPTANCE_CHECKED, st, name=check.name, passed=verdict.passed, text=verdict.reason
            )
            if not verdict.passed:
                return verdict
        return Verdict(True)

    def _push_feedback(self, st: _RunState, origin: str, text: str, *, fire: bool = True) -> None:
        st.messages.append(Message(Role.USER, text, origin=origin))
        self._record("feedback", iter=st.iter, origin=origin, text=text)
        if fire:
            self._fire(Event.FEEDBACK, st, name=origin, text=text)

    # -- tool rounds -------------------------------------------------------------------------

    async def _dispatch_round(
        self, st: _RunState, calls: tuple[ToolCall, ...]
    ) -> list[tuple[ToolCall, ToolResult]]:
        results: list[ToolResult | None] = [None] * len(calls)
        st.open_calls, st.open_results = calls, results
        i = 0
        while i < len(calls):
            # A leading run of read-only calls goes out together -- after every one of them was vetted.
            j = i + 1
            if self.dispatcher.is_read_only(calls[i].name):
                while j < len(calls) and self.dispatcher.is_read_only(calls[j].name):
                    j += 1
            allowed: list[tuple[int, int]] = []
            for k in range(i, j):
                seq, denied = self._vet(st, calls[k])
                if denied is None:
                    allowed.append((k, seq))
                results[k] = denied
            thunks = [partial(self._timed_dispatch, calls[k], seq) for k, seq in allowed]
            done = await _gather(thunks) if len(thunks) > 1 else [await t() for t in thunks]
            for (k, seq), (result, elapsed_ms) in zip(allowed, done, strict=True):
                results[k] = result
                st.tools_called += 1
                if self.recorder is not None:
                    self._record_result(st, calls[k], seq, result, elapsed_ms=elapsed_ms)
                self._fire(Event.POST_TOOL_USE, st, call=calls[k], seq=seq, result=result)
            i = j
        st.open_calls, st.open_results = (), []
        round_ = [(c, r) for c, r in zip(calls, results, strict=True) if r is not None]
        for call, result in round_:
            st.messages.append(Message(Role.TOOL, result.render(), tool_call_id=call.id, name=call.name))
        return round_

    async def _timed_dispatch(self, call: ToolCall, seq: int) -> tuple[ToolResult, float]:
        started = time.monotonic()
        result = await self.dispatcher.dispatch(call, seq)
        return result, round((time.monotonic() - started) * 1000, 3)

    def _vet(self, st: _RunState, call: ToolCall) -> tuple[int, ToolResult | None]:
        """Number the call and ask the PreToolUse hooks; a denial comes back as the call's result."""
        seq = st.seq
        st.seq += 1
        decision = self._fire(Event.PRE_TOOL_USE, st, call=call, seq=seq)
        action = {"tool": call.name, "call_id": call.id, "args": call.args}
        if not isinstance(decision, Deny):
            self._record("pre_tool", iter=st.iter, seq=seq, action=action)
            return seq, None
        self._record("pre_tool", iter=st.iter, seq=seq, action=action, denied_by=decision.reason)
        denied = ToolResult(False, {"ok": False, "denied_by_hook": decision.reason})
        denied = shape_result(
            denied, tool=call.name, call_id=call.id, workspace=self.workspace, max_bytes=None
        )
        self._record_result(st, call, seq, denied, denied=True)
        return seq, denied

    def _record_result(
        self, st: _RunState, call: ToolCall, seq: int, result: ToolResult, **extra: Any
    ) -> None:
        self._record(
            "post_tool",
            iter=st.iter,
            seq=seq,
            call_id=call.id,
            tool=call.name,
            result=result.to_dict(),
            **extra,
        )

    def _close_open_round(self, st: _RunState) -> None:
        """Give every call of an interrupted round a result, so tool calls and results stay adjacent."""
        for call, result in zip(st.open_calls, st.open_results, strict=True):
            content = (
                result.render()
                if result is not None
                else json.dumps({"error": "run cancelled", "cancelled": True})
            )
            st.messages.append(Message(Role.TOOL, content, tool_call_id=call.id, name=call.name))
        st.open_calls, st.open_results = (), []

    # -- plumbing ----------------------------------------------------------------------------

    def _common(self, st: _RunState, **overrides: Any) -> dict[str, Any]:
        values = {
            "iters": st.iters,
            "tools_called": st.tools_called,
            "usage": st.usage,
            "last_text": st.last_text,
            "session": st.session,
            "transcript": tuple(st.messages),
        }
        values.update(overrides)
        return values

    def _fire(self, event: Event, st: _RunState, **details: Any) -> Deny | None:
        if not len(self.hooks):
            return None
        return self.hooks.fire(HookEvent(event, st.session, st.iter, **details))

    def _record(self, kind: str, **fields_: Any) -> None:
        if self.recorder is not None:
            self.recorder.write(kind, **fields_)

    @staticmethod
    def _elapsed_ms(st: _RunState) -> float:
        return round((time.monotonic() - st.started) * 1000, 3)
