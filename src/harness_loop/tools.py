"""Tools from typed Python functions, and the registry the loop looks them up in.

``@tool`` turns a function into a :class:`Tool`: the JSON schema of its arguments comes from the
annotations, its description and per-argument help from the docstring (reST ``:param x:`` or a
Google ``Args:`` section). A parameter annotated :class:`ToolContext` is injected by the loop (the
workspace, the call id) and never shown to the model.

Functions may be sync or async. Sync ones run in a worker thread so that a deadline can cancel the
*call*; Python cannot kill a thread, so a runaway sync function keeps running in the background
after the loop has moved on. Long-running tools should be async.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from harness_mem.errors import InvalidInputError, NotFoundError

from .chat import ToolSpec

__all__ = [
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "ToolRegistry",
    "UnknownToolError",
    "schema_for",
    "tool",
]


class UnknownToolError(NotFoundError):
    """The model (or a caller) named a tool that is not registered."""


class ToolArgumentError(InvalidInputError):
    """A tool was called with arguments that do not fit its signature."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What the loop hands a tool that asks for it: where it may work and which call this is."""

    workspace: Path
    call_id: str
    tool: str


@dataclass(frozen=True)
class Tool:
    """A callable the model may use, with the schema it is shown.

    ``read_only`` tools may run concurrently with their neighbours in one round; ``timeout``
    overrides the loop's per-call deadline.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    read_only: bool = False
    timeout: float | None = None
    context_param: str | None = None
    is_async: bool = field(default=False)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    def bind(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """The keyword arguments to call ``fn`` with; raises :class:`ToolArgumentError` if they do not fit."""
        kwargs = dict(args)
        if self.context_param:
            kwargs.pop(self.context_param, None)
        props = self.parameters.get("properties", {})
        unknown = sorted(set(kwargs) - set(props))
        if unknown:
            raise ToolArgumentError(
                f"`{self.name}` has no argument {', '.join(map(repr, unknown))}"
                f" — its arguments are: {', '.join(props) or '(none)'}"
            )
        missing = [p for p in self.parameters.get("required", []) if p not in kwargs]
        if missing:
            raise ToolArgumentError(f"`{self.name}` needs argument {', '.join(map(repr, missing))}")
        if self.context_param:
            kwargs[self.context_param] = ctx
        return kwargs


_PARAM_RE = re.compile(r"^\s*:param\s+(?:[\w\[\], |.]+\s+)?(\w+)\s*:\s*(.*)$")
_GOOGLE_ARG_RE = re.compile(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTION_RE = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples)\s*:\s*$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (text before any parameter section) and per-parameter help."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        if m := _PARAM_RE.match(line):
            section, current = "param", m.group(1)
            params[current] = m.group(2).strip()
        elif m := _SECTION_RE.match(line):
            section, current = m.group(1), None
        elif section in ("Args", "Arguments", "Parameters") and (m := _GOOGLE_ARG_RE.match(line)):
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif section is None:
            desc.append(line)
        elif current and line.strip() and section in ("param", "Args", "Arguments", "Parameters"):
            params[current] = f"{params[current]} {line.strip()}".strip()
        elif line.strip().startswith(":"):
            section, current = "other", None
    return "\n".join(desc).strip(), params


def schema_for(annotation: Any) -> dict[str, Any]:
    """The JSON schema of one annotation (str, int, float, bool, list, dict, Literal, Enum, Optional, unions)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = schema_for(args[0])
        extra = next((a for a in args[1:] if isinstance(a, str)), None)
        return {**schema, "description": extra} if extra else schema
    if annotation is Any or annotation is inspect.Parameter.empty:
        return {}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return schema_for(members[0])
        return {"anyOf": [schema_for(a) for a in members]}
    if origin is Literal:
        return {"enum": list(args)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [m.value for m in annotation]}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
    if annotation in simple:
        return {"type": simple[annotation]}
    if annotation is Path:
        return {"type": "string"}
    if annotation in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset):
        # list[X], set[X] and tuple[X, ...] are homogeneous; a fixed tuple[X, Y] is left open.
        item = args[0] if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis) else None
        return {"type": "array", **({"items": schema_for(item)} if item is not None else {})}
    if annotation is dict or origin in (dict, Mapping):
        return {"type": "object"}
    raise TypeError(
        f"cannot describe {annotation!r} as JSON schema — use str, int, float, bool, list, dict, Literal or Enum"
    )


def _make_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    read_only: bool,
    timeout: float | None,
) -> Tool:
    hints = typing.get_type_hints(fn, include_extras=True)
    doc_desc, doc_params = _parse_docstring(fn.__doc__)
    props: dict[str, Any] = {}
    required: list[str] = []
    context_param: str | None = None
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(
                f"tool {fn.__name__}: *args/**kwargs cannot be described to a model — name each argument"
            )
        annotation = hints.get(pname, param.annotation)
        if annotation is ToolContext:
            context_param = pname
            continue
        schema = schema_for(annotation)
        if pname in doc_params and "description" not in schema:
            schema["description"] = doc_params[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        elif param.default is not None and isinstance(param.default, (str, int, float, bool)):
            schema["default"] = param.default.value if isinstance(param.default, enum.Enum) else param.default
        props[pname] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    return Tool(
        name=name or fn.__name__,
        description=description or doc_desc or (name or fn.__name__).replace("_", " "),
        parameters=parameters,
        fn=fn,
        read_only=read_only,
        timeout=timeout,
        context_param=context_param,
        is_async=inspect.iscoroutinefunction(fn),
    )


@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a typed function; usable bare (``@tool``) or with options."""
    if fn is not None:
        return _make_tool(fn, name=name, description=description, read_only=read_only, timeout=timeout)
    return lambda f: _make_tool(f, name=name, description=description, read_only=read_only, timeout=timeout)


def _edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


ToolLike = Tool | Callable[..., Any] | Callable[..., Awaitable[Any]]


class ToolRegistry:
    """Tools by name; the last registration of a name wins, and schemas are listed sorted by name."""

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, t: ToolLike) -> Tool:
        """Add a tool (a plain function is wrapped with :func:`tool`)."""
        made = t if isinstance(t, Tool) else tool(t)
        self._tools[made.name] = made
        return made

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> typing.Iterator[Tool]:
        return iter(sorted(self._tools.values(), key=lambda t: t.name))

    def specs(self) -> list[ToolSpec]:
        """Schemas sorted by name, so the tool block of the prompt stays byte-identical (and cacheable)."""
        return [t.spec for t in self]

    def get(self, name: str) -> Tool:
        """The tool called ``name``; :class:`UnknownToolError` says which one was probably meant."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        available = sorted(self._tools)
        hint = ""
        if available:
            best = min(available, key=lambda n: _edit_distance(name, n))
            if _edit_distance(name, best) * 3 <= len(name):
                hint = f" — did you mean `{best}`?"
        listing = ", ".join(f"`{n}`" for n in available) or "(none)"
        return f"unknown tool `{name}`{hint or '.'} Available tools: {listing}"
