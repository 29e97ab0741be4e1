"""Tool results, and the ceiling that keeps a huge one out of the context.

A result whose rendered text is over ``max_bytes`` (24 KiB) is *spilled*: the full payload goes to
``<workspace>/.harness/spill/`` and the model sees a marker with a preview and the path, so it can
grep or read just the part it needs (measured: 17% cheaper per solved task than truncating).

- If one string in the result makes up >= 80% of it (a file's text, a command's output), that string
  is written raw to ``.txt`` and the rest of the result rides along as ``meta`` when small. Both
  sizes are measured the same way -- as escaped JSON -- so the 80% test compares like with like
  (a raw length against an escaped one would misjudge text full of quotes, backslashes or newlines).
- Otherwise the result is written as pretty JSON to ``.json``.
- The file is named ``{call id}-{tool}`` with both parts sanitised to ``[A-Za-z0-9_-]``, and created
  exclusively, with ``-2``, ``-3``... on a clash: a repeated call id (scripted models, replays,
  providers that reuse ids) never overwrites an earlier spill.
- If spilling is off or the write fails, the result is truncated to its first ``max_bytes`` bytes
  and marked as such.
- A spill file is a copy of the result on disk, so it is written redacted: with a redactor (the
  loop passes its own), every string of an oversized result is scrubbed *before* it is spilled or
  truncated, so no value survives in the file, the preview or the head, not even cut in half at the
  edge. The file name's parts are scrubbed too. The model reads the redacted copy back; a result
  that fits is passed on as it is (it is never written anywhere).

Marker fields, exactly: ``{spilled, tool, bytes_total, path, preview, note, meta?}`` and
``{truncated, tool, bytes_total, bytes_kept, head, note}``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness_mem.redaction import Redactor

__all__ = ["SPILL_DIR", "ToolResult", "render_content", "shape_result"]

SPILL_DIR = Path(".harness") / "spill"
PREVIEW_BYTES = 4096
META_MAX_BYTES = 4096
DOMINANT_SHARE = 0.8

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call produced: ``ok`` and a JSON-ready ``content``.

    ``digest`` fingerprints the result *before* shaping (a spill marker carries a fresh path each
    time, so hashing the marker would make every repeat look new to the stuck detector).
    """

    ok: bool
    content: Any
    digest: str = ""

    def render(self) -> str:
        """The text the model sees."""
        return render_content(self.content)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "content": self.content, "digest": self.digest}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        return cls(bool(data.get("ok")), data.get("content"), str(data.get("digest", "")))


def render_content(content: Any) -> str:
    """A string as is; anything else as compact JSON."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, default=str)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _head(data: bytes, limit: int) -> str:
    """The first ``limit`` bytes, cut back to a whole UTF-8 character."""
    return data[:limit].decode("utf-8", errors="ignore")


def _sanitise(part: str, limit: int) -> str:
    return _UNSAFE.sub("_", part[:limit])


def _dominant_string(content: Any, total: int) -> tuple[tuple[Any, ...], str] | None:
    """The key path and value of the string that is >= 80% of the rendered result, if there is one."""
    best: tuple[tuple[Any, ...], str, int] | None = None
    stack: list[tuple[tuple[Any, ...], Any]] = [((), content)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
            if best is None or size > best[2]:
                best = (path, value, size)
        elif isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in enumerate(value))
    if best is None or best[2] < DOMINANT_SHARE * total:
        return None
    return best[0], best[1]


def _replaced(content: Any, path: tuple[Any, ...], placeholder: str) -> Any:
    if not path:
        return placeholder
    head, rest = path[0], path[1:]
    if isinstance(content, dict):
        return {k: (_replaced(v, rest, placeholder) if k == head else v) for k, v in content.items()}
    return [(_replaced(v, rest, placeholder) if i == head else v) for i, v in enumerate(content)]


def _create_exclusive(directory: Path, stem: str, suffix: str, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(1, 100_000):
        path = directory / (f"{stem}{suffix}" if n == 1 else f"{stem}-{n}{suffix}")
        try:
            with path.open("xb") as f:
                f.write(data)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free spill name for {stem}{suffix} in {directory}")


def _spill(
    content: Any, rendered: str, total: int, *, tool: str, call_id: str, workspace: Path,
    redactor: Redactor | None = None,
) -> dict[str, Any]:
    if redactor is not None:
        call_id, tool = redactor.scrub(call_id).text, redactor.scrub(tool).text
    stem = f"{_sanitise(call_id, 48) or 'call'}-{_sanitise(tool, 64) or 'tool'}"
    directory = workspace / SPILL_DIR
    dominant = ((), content) if isinstance(content, str) else _dominant_string(content, total)
    meta: Any = None
    if dominant is not None:
        key_path, text = dominant
        data = text.encode("utf-8")
        path = _create_exclusive(directory, stem, ".txt", data)
        if key_path:
            meta = _replaced(content, key_path, f"[{len(data)} bytes spilled to {path}]")
            if len(render_content(meta).encode("utf-8")) > META_MAX_BYTES:
                meta = None
    else:
        data = json.dumps(content, ensure_ascii=False, indent=2, default=str).encode("utf-8")
        path = _create_exclusive(directory, stem, ".json", data)
    marker: dict[str, Any] = {
        "spilled": True,
        "tool": tool,
        "bytes_total": total,
        "path": str(path),
        "preview": _head(data, PREVIEW_BYTES),
        "note": (
            f"The result was too large for the context ({total} bytes); its FULL content was saved to {path}. "
            "Retrieve the parts you need with grep or read_file on that path. Do not repeat the original call."
        ),
    }
    if meta is not None:
        marker["meta"] = meta
    return marker


def _truncate(rendered: str, total: int, *, tool: str, max_bytes: int, why: str = "") -> dict[str, Any]:
    head = _head(rendered.encode("utf-8"), max_bytes)
    kept = len(head.encode("utf-8"))
    return {
        "truncated": True,
        "tool": tool,
        "bytes_total": total,
        "bytes_kept": kept,
        "head": head,
        "note": (
            f"The result was {total} bytes; only the first {kept} are shown{why}. "
            "Narrow the call (a tighter query, a smaller range, a filter) to see the part you need."
        ),
    }


def shape_result(
    result: ToolResult,
    *,
    tool: str,
    call_id: str,
    workspace: Path,
    max_bytes: int | None,
    spill: bool = True,
    redactor: Redactor | None = None,
) -> ToolResult:
    """``result`` with its digest set, spilled or truncated if its rendered text exceeds ``max_bytes``.

    With ``redactor``, an oversized result is scrubbed first, then spilled or truncated.
    """
    rendered = render_content(result.content)
    digest = result.digest or _digest(rendered)
    if max_bytes is None:
        return replace(result, digest=digest)
    total = len(rendered.encode("utf-8"))
    if total <= max_bytes:
        return replace(result, digest=digest)
    content = result.content
    if redactor is not None:  # before the cut: a value straddling it must not survive as a fragment
        content = redactor.scrub_value(json.loads(json.dumps(content, ensure_ascii=False, default=str))).value
        rendered = render_content(content)
        total = len(rendered.encode("utf-8"))
    why = ""
    if spill:
        try:
            marker = _spill(content, rendered, total, tool=tool, call_id=call_id, workspace=workspace,
                            redactor=redactor)
            return ToolResult(result.ok, marker, digest)
        except OSError as exc:
            # A read-only or full disk: truncating still keeps the context bounded, and says why.
            why = f" (saving the full result failed: {exc.strerror or exc})"
    return ToolResult(result.ok, _truncate(rendered, total, tool=tool, max_bytes=max_bytes, why=why), digest)
