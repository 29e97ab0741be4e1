"""Tools from typed functions, the registry, result shaping (spill/truncate), and the built-in tools."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Literal

import pytest

from harness_loop.builtin_tools import grep, list_dir, read_file
from harness_loop.spill import ToolResult, shape_result
from harness_loop.tools import ToolArgumentError, ToolContext, ToolRegistry, UnknownToolError, tool


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_schema_from_annotations_and_docstring() -> None:
    @tool(read_only=True, timeout=5)
    def search(
        ctx: ToolContext,
        query: str,
        k: int = 10,
        mode: Literal["keyword", "semantic"] = "keyword",
        tags: list[str] | None = None,
        colour: Colour | None = None,
        weight: Annotated[float, "how much it counts"] = 1.0,
    ) -> list[str]:
        """Search the notes.

        Longer explanation stays in the description.

        :param query: what to look for,
            over two lines.
        :param k: how many hits.
        """
        return []

    assert search.name == "search" and search.read_only and search.timeout == 5
    assert search.description == "Search the notes.\n\nLonger explanation stays in the description."
    assert search.context_param == "ctx"
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for, over two lines."},
            "k": {"type": "integer", "description": "how many hits.", "default": 10},
            "mode": {"enum": ["keyword", "semantic"], "default": "keyword"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "colour": {"enum": ["red", "blue"]},
            "weight": {"type": "number", "description": "how much it counts", "default": 1.0},
        },
        "required": ["query"],
    }


def test_google_style_docstrings_and_bare_functions() -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first.
            b (int): the second.
        """
        return a + b

    registry = ToolRegistry([add])
    t = registry.get("add")
    assert t.description == "Add two numbers."
    assert t.parameters["properties"]["b"] == {"type": "integer", "description": "the second."}


def test_undescribable_signatures_are_refused() -> None:
    with pytest.raises(TypeError, match="name each argument"):
        tool(lambda *args: None)
    with pytest.raises(TypeError, match="cannot describe"):

        def f(x: object) -> None:
            """F."""

        tool(f)


def test_registry_last_wins_sorted_specs_and_did_you_mean() -> None:
    @tool
    def write_file(path: str) -> None:
        """First."""

    @tool(name="write_file")
    def write_file_v2(path: str, text: str) -> None:
        """Second."""

    @tool
    def read_file_(path: str) -> str:
        """R."""
        return ""

    registry = ToolRegistry([write_file, read_file_, write_file_v2])
    assert [s.name for s in registry.specs()] == ["read_file_", "write_file"]
    assert registry.get("write_file").description == "Second."
    with pytest.raises(UnknownToolError) as err:
        registry.get("write_fil")
    assert "did you mean `write_file`?" in str(err.value) and "`read_file_`" in str(err.value)
    with pytest.raises(UnknownToolError) as err:
        registry.get("zzz")
    assert "did you mean" not in str(err.value)


def test_bind_checks_arguments(tmp_path: Path) -> None:
    @tool
    def f(ctx: ToolContext, a: int, b: int = 2) -> int:
        """F."""
        return a + b

    ctx = ToolContext(tmp_path, "c1", "f")
    assert f.bind({"a": 1}, ctx) == {"a": 1, "ctx": ctx}
    with pytest.raises(ToolArgumentError, match="needs argument 'a'"):
        f.bind({}, ctx)
    with pytest.raises(ToolArgumentError, match="no argument 'c'"):
        f.bind({"a": 1, "c": 3}, ctx)


def shape(
    content: object, tmp_path: Path, *, call_id: str = "call_1", tool_name: str = "t", **kw: object
) -> dict:
    r = shape_result(
        ToolResult(True, content),
        tool=tool_name,
        call_id=call_id,
        workspace=tmp_path,
        max_bytes=kw.pop("max_bytes", 24576),
        **kw,
    )  # type: ignore[arg-type]
    assert r.digest
    return r.content  # type: ignore[no-any-return]


def test_small_results_pass_and_no_ceiling_passes_everything(tmp_path: Path) -> None:
    assert shape({"a": 1}, tmp_path) == {"a": 1}
    assert shape("y" * 100_000, tmp_path, max_bytes=None) == "y" * 100_000
    assert not (tmp_path / ".harness").exists()


def test_dominant_string_field_spills_raw_with_meta(tmp_path: Path) -> None:
    content = {"exit": 0, "stdout": "é" * 30_000}
    marker = shape(content, tmp_path)
    path = Path(marker["path"])
    assert path.suffix == ".txt" and path.read_text(encoding="utf-8") == "é" * 30_000
    assert marker["meta"] == {"exit": 0, "stdout": f"[60000 bytes spilled to {path}]"}
    assert marker["bytes_total"] == len(json.dumps(content, ensure_ascii=False).encode())
    assert len(marker["preview"].encode()) <= 4096  # cut on a character boundary, never mid-character
    assert set(marker) == {"spilled", "tool", "bytes_total", "path", "preview", "note", "meta"}


def test_spread_out_results_spill_as_pretty_json(tmp_path: Path) -> None:
    content = [{"id": i, "name": f"row {i}"} for i in range(2000)]
    marker = shape(content, tmp_path)
    path = Path(marker["path"])
    assert path.suffix == ".json" and json.loads(path.read_text()) == content


def test_spill_names_are_sanitised_and_never_overwrite(tmp_path: Path) -> None:
    first = shape("a" * 30_000, tmp_path, call_id="../../etc/passwd", tool_name="../evil tool")
    second = shape("b" * 30_000, tmp_path, call_id="../../etc/passwd", tool_name="../evil tool")
    p1, p2 = Path(first["path"]), Path(second["path"])
    spill_dir = tmp_path / ".harness" / "spill"
    assert p1.parent == p2.parent == spill_dir and p1 != p2
    assert p1.name == "______etc_passwd-___evil_tool.txt" and p2.name == "______etc_passwd-___evil_tool-2.txt"
    assert p1.read_text() == "a" * 30_000 and p2.read_text() == "b" * 30_000


def test_truncation_when_spill_is_off_keeps_the_context_small(tmp_path: Path) -> None:
    marker = shape("x" * 200_000, tmp_path, spill=False)
    assert set(marker) == {"truncated", "tool", "bytes_total", "bytes_kept", "head", "note"}
    assert marker["bytes_total"] == 200_000 and marker["bytes_kept"] == 24576
    assert len(json.dumps(marker).encode()) < 64 * 1024
    assert not (tmp_path / ".harness").exists()


def test_truncation_when_the_spill_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / ".harness").write_text("a file where the directory should be")
    marker = shape("x" * 30_000, tmp_path)
    assert marker["truncated"] is True and "saving the full result failed" in marker["note"]


def test_digest_is_of_the_unshaped_result(tmp_path: Path) -> None:
    a = shape_result(ToolResult(True, "z" * 30_000), tool="t", call_id="c", workspace=tmp_path, max_bytes=100)
    b = shape_result(ToolResult(True, "z" * 30_000), tool="t", call_id="c", workspace=tmp_path, max_bytes=100)
    assert a.content != b.content and a.digest == b.digest


def test_builtin_tools_stay_inside_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("import os\nprint('hi')\n" + "x = 1\n" * 1000)
    ctx = ToolContext(tmp_path, "c", "t")
    assert list_dir.fn(ctx) == ["src/"]
    page = read_file.fn(ctx, "src/a.py", limit=2)
    assert page.startswith("import os\nprint('hi')\n") and "read on with offset=3" in page
    assert grep.fn(ctx, r"print\(") == ["src/a.py:2: print('hi')"]
    (tmp_path / "blob.txt").write_text("x" * 200_000)
    blob = read_file.fn(ctx, str(tmp_path / "blob.txt"))
    assert len(blob.encode()) < 24576 and blob.endswith(
        "[line 1 is 200000 bytes; only its start is shown — use grep]"
    )
    with pytest.raises(PermissionError, match="outside the workspace"):
        read_file.fn(ctx, "../etc/passwd")
    with pytest.raises(PermissionError):
        list_dir.fn(ctx, "/")


def test_builtin_tools_cut_a_long_line_short_of_a_value(tmp_path: Path) -> None:
    # A card straddling grep's 300th character, or the end of a giant line's head, is dropped whole:
    # half of it would reach the transcript as digits no detector recognises.
    card = "4111 1111 1111 1111"
    (tmp_path / "log.txt").write_text("a " * 145 + "card " + card + " end\n")
    ctx = ToolContext(tmp_path, "c", "t")
    assert grep.fn(ctx, "card") == ["log.txt:1: " + "a " * 145 + "card "]
    (tmp_path / "giant.txt").write_text("c " * 9_995 + card + " tail" * 10)
    giant = read_file.fn(ctx, "giant.txt")
    assert "4111" not in giant and giant.endswith("only its start is shown — use grep]")
