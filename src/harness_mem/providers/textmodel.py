"""The one thing harness_mem asks of a language model: text in, text out.

:class:`TextModel` is deliberately tiny and **synchronous**. The distiller and the reviser make one
call each, usually from a CLI command or an offline consolidation job, where a blocking call is the
simplest thing that works; an async host wraps the call (``anyio.to_thread.run_sync``) or adapts its
own async client with a thin sync shim. harness_loop's model clients plug in through an adapter on
their side — harness_mem never imports harness_loop.

Model replies are untrusted text. :func:`extract_json` finds a JSON object in a chatty reply by
trying, in order, the whole text, then a fenced block, then the first ``{`` to the last ``}``; and
:func:`str_list` reads a list of strings from whatever shape a model chose for it.

:class:`ScriptedTextModel` is the test double: a FIFO of replies that records every prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ModelError


@runtime_checkable
class TextModel(Protocol):
    """A model that completes one prompt.

    :param prompt: the whole request, as a single user turn.
    :param max_tokens: an upper bound on the reply's length.
    :param json: ask for a JSON object reply (a hint: callers still parse defensively).
    :returns: the reply text (``""`` is a valid, if useless, reply).
    :raises ModelError: when the call itself fails.
    """

    def complete(self, prompt: str, *, max_tokens: int, json: bool = False) -> str: ...


_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> dict[str, Any] | None:
    """The JSON object in a model reply, or None.

    Tried in order: the whole text, each fenced code block, then the span from the first ``{`` to
    the last ``}``. Only an object counts: a bare list or string is not a draft.
    """
    if not isinstance(text, str):
        return None
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        candidates.append(text[first : last + 1])
    for candidate in candidates:
        if not candidate:
            continue
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


_BULLET = re.compile(r"^\s*[-*•]\s*")


def str_list(value: Any) -> list[str]:
    """A list of non-blank strings from what a model gave.

    An array keeps its strings (an object item contributes its first string value); a string is
    read as lines with ``-``, ``*`` or ``•`` bullets stripped. Anything else is an empty list.
    """
    items: list[str] = []
    if isinstance(value, list):
        for item in value:
            if isinstance(item, str):
                items.append(item)
            elif isinstance(item, dict):
                first = next((v for v in item.values() if isinstance(v, str)), None)
                if first is not None:
                    items.append(first)
            elif isinstance(item, (int, float)) and not isinstance(item, bool):
                items.append(str(item))
    elif isinstance(value, str):
        items = [_BULLET.sub("", line, count=1) for line in value.splitlines()]
    return [item.strip() for item in items if item.strip()]


@dataclass(frozen=True)
class ModelCall:
    """One request a :class:`ScriptedTextModel` received."""

    prompt: str
    max_tokens: int
    json: bool


class ScriptedTextModel:
    """A :class:`TextModel` that answers from a script, first in first out.

    A scripted item that is an exception is raised instead of returned. Every request is kept in
    :attr:`requests` (and the prompts in :attr:`prompts`) so a test can assert what was asked and
    how many calls were made. Asking past the end of the script raises :class:`ModelError`, so an
    unexpected call fails loudly rather than returning nothing.
    """

    def __init__(self, replies: Iterable[str | BaseException] = ()) -> None:
        self._script: list[str | BaseException] = list(replies)
        self.requests: list[ModelCall] = []

    def push(self, *replies: str | BaseException) -> None:
        """Append replies to the script."""
        self._script.extend(replies)

    def complete(self, prompt: str, *, max_tokens: int, json: bool = False) -> str:
        self.requests.append(ModelCall(prompt, max_tokens, json))
        if not self._script:
            raise ModelError(f"scripted model: no reply left for call {len(self.requests)}")
        reply = self._script.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    @property
    def prompts(self) -> list[str]:
        return [r.prompt for r in self.requests]

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def remaining(self) -> int:
        return len(self._script)
