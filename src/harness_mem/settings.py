"""Settings: the configuration harness_mem reads from the environment, read and checked in one place.

=========================  ==============================================================
``HARNESS_MEM_DB``         the database file (default: ``memory.db`` in the home directory)
``HARNESS_MEM_HOME``       the home directory (default: ``$XDG_DATA_HOME/harness-mem``, else
                           ``~/.local/share/harness-mem``)
``HARNESS_MEM_NAMESPACE``  the tenant the CLI reads and writes (default: ``default``)
``HARNESS_MEM_EMBEDDER``   ``auto`` (a file's own model, else the built-in one when installed),
                           ``none`` (keyword only) or a model's name (``minilm``, ``minilm-int8``,
                           ``minilm-int8s``)
``HARNESS_MEM_EMBED_RUNTIME`` ``auto`` (light when it can run, else the reference), ``onnx`` or ``torch``
``HARNESS_MEM_CACHE_DIR``  where the light runtime's model export is kept (default:
                           ``$XDG_CACHE_HOME/harness-mem``, else ``~/.cache/harness-mem``)
``HARNESS_MEM_CONFIG``     where identity keys are kept (default: ``$XDG_CONFIG_HOME/harness-mem``,
                           else ``~/.config/harness-mem``)
``HARNESS_MEM_IDENTITY_KEY`` the key that seals identity values (64 hex digits), instead of a key file
``HARNESS_MEM_MODEL_URL``  an OpenAI-compatible endpoint for the text model
``HARNESS_MEM_MODEL``      the text model's name
``HARNESS_MEM_API_KEY``    its bearer token, if the server wants one
=========================  ==============================================================

An empty variable counts as unset. The CLI's options read the same variables (a flag wins over
the environment); the library reads them through :meth:`Settings.from_env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field
from pydantic_core import ErrorDetails

from .models import Record


def is_server_url(target: object) -> bool:
    """True for a database server's URL (``postgresql://…``), as opposed to a file's path."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


class Settings(Record):
    """harness_mem's environment, validated: ``Settings.from_env()``; fields take the variables' names."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, protected_namespaces=())

    db: str | None = Field(None, alias="HARNESS_MEM_DB",
                           description="the database: a file's path, or a postgresql:// URL")
    home: Path | None = Field(None, alias="HARNESS_MEM_HOME", description="the home directory")
    namespace: str = Field("default", alias="HARNESS_MEM_NAMESPACE", description="the tenant the CLI uses")
    embedder: Literal["auto", "none", "minilm", "minilm-int8", "minilm-int8s"] = Field(
        "auto", alias="HARNESS_MEM_EMBEDDER",
        description="auto: a file's own model, else the built-in one; none: keyword only; or a model's name",
    )
    embed_runtime: Literal["auto", "onnx", "torch"] = Field(
        "auto", alias="HARNESS_MEM_EMBED_RUNTIME", description="which runtime embeds with the built-in model"
    )
    cache_dir: Path | None = Field(None, alias="HARNESS_MEM_CACHE_DIR", description="the model export cache")
    xdg_cache_home: Path | None = Field(None, alias="XDG_CACHE_HOME", description="the user's cache directory")
    config: Path | None = Field(None, alias="HARNESS_MEM_CONFIG", description="where identity keys are kept")
    xdg_config_home: Path | None = Field(None, alias="XDG_CONFIG_HOME", description="the user's config directory")
    identity_key: str | None = Field(None, alias="HARNESS_MEM_IDENTITY_KEY", repr=False,
                                     description="the key that seals identity values (64 hex digits)")
    model_url: str | None = Field(None, alias="HARNESS_MEM_MODEL_URL", description="OpenAI-compatible endpoint")
    model: str | None = Field(None, alias="HARNESS_MEM_MODEL", description="the text model's name")
    api_key: str | None = Field(None, alias="HARNESS_MEM_API_KEY", repr=False, description="bearer token")
    xdg_data_home: Path | None = Field(None, alias="XDG_DATA_HOME", description="the user's data directory")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings in ``environ`` (default: ``os.environ``); raises InvalidInputError naming a bad variable."""
        env = os.environ if environ is None else environ
        given = {}
        for info in cls.model_fields.values():
            value = env.get(info.alias or "")
            if value:  # an empty variable counts as unset
                given[info.alias or ""] = value
        return cls.check(given)

    @classmethod
    def message(cls, field: str, error: ErrorDetails) -> str | None:
        variable = cls.model_fields[field].alias if field in cls.model_fields else field
        if error["type"] == "literal_error":
            return f"{variable} must be one of {error.get('ctx', {}).get('expected')}, not {error.get('input')!r}"
        return f"{variable}: {error['msg']}"

    def home_dir(self) -> Path:
        """The home directory: ``HARNESS_MEM_HOME``, else ``harness-mem`` in the user's data directory."""
        if self.home is not None:
            return self.home.expanduser()
        base = self.xdg_data_home.expanduser() if self.xdg_data_home else Path.home() / ".local" / "share"
        return base / "harness-mem"

    def cache_path(self) -> Path:
        """``HARNESS_MEM_CACHE_DIR``, else ``harness-mem`` in the user's cache directory."""
        if self.cache_dir is not None:
            return self.cache_dir.expanduser()
        base = self.xdg_cache_home.expanduser() if self.xdg_cache_home else Path.home() / ".cache"
        return base / "harness-mem"

    def config_dir(self) -> Path:
        """``HARNESS_MEM_CONFIG``, else ``harness-mem`` in the user's config directory."""
        if self.config is not None:
            return self.config.expanduser()
        base = self.xdg_config_home.expanduser() if self.xdg_config_home else Path.home() / ".config"
        return base / "harness-mem"

    def db_path(self) -> Path | str:
        """The database: ``HARNESS_MEM_DB`` (a path, or a server URL kept as it is), else
        ``memory.db`` in the home directory."""
        if self.db is None:
            return self.home_dir() / "memory.db"
        return self.db if is_server_url(self.db) else Path(self.db).expanduser()
