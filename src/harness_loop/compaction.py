"""Context compaction: when a long run's conversation nears its token budget, older turns become one summary.

The loop calls this before a model call when :attr:`LoopConfig.context_budget` is set and the
conversation's estimated size reaches ``compact_at`` of it. What happens then:

- The **task** (the first message) stays as it is, and so do the **most recent turns**: walking back
  from the end, whole groups are kept while they fit in ``compact_keep`` of the budget (the latest
  group is kept even when it alone does not fit). A group is a user or assistant message together
  with the tool results that follow it, so a tool call is never separated from its result -- a
  provider refuses a result whose call is missing, and a call without its result.
- Everything in between is rendered as text and summarised by **one call to the loop's own model**
  (no tools); the summary replaces those messages as a single user message (origin
  ``"compaction"``). The system prompt is not part of the history and is never touched.
- A later compaction summarises the earlier summary along with the turns that followed it.

Tokens are **estimated, not counted**: characters / 4 (:data:`CHARS_PER_TOKEN`) over each
message's text and tool-call arguments, plus a few characters of framing per message, plus the
system prompt. That is about right for English prose and code with common tokenizers and costs
nothing; it is an estimate, so leave headroom (``compact_at`` defaults to 0.8). Guide blocks
(recall) are not counted: they are bounded by their own ``top_k`` and are rendered fresh each call.

The full turns are not lost: with memory attached they were captured as they happened and later
runs can recall them (a run never recalls its own turns).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from harness_mem.redaction import cut_point

from .chat import Message, ModelRequest, Role, ToolCall, canonical_json

__all__ = [
    "CHARS_PER_TOKEN",
    "COMPACTION_ORIGIN",
    "compaction_request",
    "estimate_tokens",
    "plan_compaction",
    "summary_message",
]

CHARS_PER_TOKEN = 4
# Role, separators and call ids cost a few tokens per message whatever the content.
MESSAGE_OVERHEAD_CHARS = 16
COMPACTION_ORIGIN = "compaction"
# One message of the summarised part, as the summariser sees it: a 200 kB tool result adds little a
# summary could keep, and the summary request itself must fit in the model's context.
MAX_RENDERED_CHARS = 2000

SUMMARY_SYSTEM = (
    "You compress the earlier part of an agent's working conversation so that the agent can carry on "
    "from your summary alone. Keep what the rest of the work depends on; drop chatter and repetition. "
    "Never invent anything."
)
SUMMARY_PROMPT = (
    "The agent's task:\n{task}\n\n"
    "Below are the {count} earlier messages of its conversation (long ones are cut). Summarise them in "
    "at most about {words} words: what was done and found (facts, names, numbers, file paths, ids, "
    "commands and their results, errors), what was decided, and what is still open. Write plain text, "
    "no preamble.\n\n--- earlier conversation ---\n{transcript}"
)
SUMMARY_HEADER = "[summary of {count} earlier messages of this conversation, compacted to fit the context]\n"


def _call_chars(call: ToolCall) -> int:
    args = call.args if isinstance(call.args, str) else canonical_json(call.args)
    return len(call.name) + len(args)


def message_chars(message: Message) -> int:
    """The characters ``message`` contributes to a request: text, tool-call arguments, framing."""
    return (
        len(message.content)
        + sum(_call_chars(c) for c in message.tool_calls)
        + MESSAGE_OVERHEAD_CHARS
    )


def estimate_tokens(messages: Sequence[Message], system: str | None = None) -> int:
    """The conversation's size in tokens, estimated as characters / :data:`CHARS_PER_TOKEN`."""
    chars = len(system or "") + sum(message_chars(m) for m in messages)
    return math.ceil(chars / CHARS_PER_TOKEN)


def plan_compaction(messages: Sequence[Message], keep_tokens: float) -> int | None:
    """Where the kept recent part starts: ``messages[1:index]`` are to be summarised.

    The kept part is the longest run of whole groups at the end that fits in ``keep_tokens`` (at
    least the latest group). None when there is nothing worth summarising: no message between the
    task and the kept part, or only an earlier summary.
    """
    starts = [i for i in range(1, len(messages)) if messages[i].role is not Role.TOOL]
    if not starts:
        return None
    split = starts[-1]
    kept_chars = sum(message_chars(m) for m in messages[split:])
    for start in reversed(starts[:-1]):
        group = sum(message_chars(m) for m in messages[start:split])
        if (kept_chars + group) / CHARS_PER_TOKEN > keep_tokens:
            break
        split, kept_chars = start, kept_chars + group
    older = messages[1:split]
    if not older or all(m.origin == COMPACTION_ORIGIN for m in older):
        return None
    return split


def _clip(text: str, limit: int = MAX_RENDERED_CHARS) -> str:
    # Cut short of a value, not through it: a summary echoing half a card number would reach the
    # recording as a fragment its redaction cannot recognise.
    kept = cut_point(text, limit)
    return text if len(text) <= limit else f"{text[:kept]}… [{len(text) - kept} chars cut]"


def render_messages(messages: Sequence[Message]) -> str:
    """The messages as a plain-text transcript for the summariser, one block per message."""
    blocks = []
    for m in messages:
        if m.role is Role.TOOL:
            head = f"[tool result: {m.name or '?'}]"
        elif m.role is Role.USER and m.origin not in (None, "task"):
            head = f"[{m.origin}]"
        else:
            head = f"[{m.role.value}]"
        lines = [f"{head} {_clip(m.content)}".rstrip()]
        for call in m.tool_calls:
            args = call.args if isinstance(call.args, str) else canonical_json(call.args)
            lines.append(f"  -> called {call.name}({_clip(args, 500)})")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def compaction_request(
    task: str, older: Sequence[Message], *, max_output_tokens: int | None
) -> ModelRequest:
    """The one model call that summarises ``older``: no tools, no guides, a prompt of its own."""
    words = max(100, int((max_output_tokens or 1000) * 0.6))
    prompt = SUMMARY_PROMPT.format(
        task=_clip(task), count=len(older), words=words, transcript=render_messages(older)
    )
    return ModelRequest(
        messages=(Message(Role.USER, prompt, origin=COMPACTION_ORIGIN),),
        system=SUMMARY_SYSTEM,
        max_output_tokens=max_output_tokens,
    )


def summary_message(summary: str, count: int) -> Message:
    """The message that stands in for ``count`` summarised messages."""
    return Message(Role.USER, SUMMARY_HEADER.format(count=count) + summary.strip(), origin=COMPACTION_ORIGIN)
