"""JSON schemas of the records harness_mem hands out and takes in, by name.

MCP tools, an HTTP API or another language can describe and check the same records the library
does: ``schemas()`` gives every one, ``json_schema("entry")`` one of them, and ``harness-mem schema
[NAME]`` prints them. Records handed out (``entry``, ``hit``) are described as they serialise to
JSON (``model_dump(mode="json")``); records taken in as they are validated, aliases included.
A hit serialises flat (:class:`~harness_mem.models.HitRecord`): the one shape ``recall --json`` prints
and the MCP server's recall returns.
"""

from __future__ import annotations

from typing import Any, Literal

from .errors import InvalidInputError
from .experience.episode import Episode
from .experience.skills import SkillFrontMatter
from .filters import Filters
from .models import Entry, Hit, ImportLine, Record, StoreStats
from .settings import Settings
from .sync.operations import Operation

Mode = Literal["validation", "serialization"]

# name → (model, which side of it the schema describes)
MODELS: dict[str, tuple[type[Record], Mode]] = {
    "entry": (Entry, "serialization"),
    "hit": (Hit, "serialization"),
    "import-line": (ImportLine, "validation"),
    "filters": (Filters, "validation"),
    "episode": (Episode, "validation"),
    "skill-front-matter": (SkillFrontMatter, "validation"),
    "settings": (Settings, "validation"),
    "stats": (StoreStats, "serialization"),
    "sync-op": (Operation, "validation"),
}


def json_schema(name: str) -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of the record called ``name``; see :data:`MODELS`."""
    try:
        model, mode = MODELS[name]
    except KeyError:
        raise InvalidInputError(f"no schema named {name!r} — use one of: {', '.join(MODELS)}") from None
    return model.json_schema(mode)


def schemas() -> dict[str, dict[str, Any]]:
    """Every public record's JSON schema, by name."""
    return {name: json_schema(name) for name in MODELS}

