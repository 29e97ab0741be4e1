"""Providers: the models harness_mem calls, behind small protocols.

- embedders (``embeddings``): :class:`MiniLMEmbedder`, loaded from an installed package, never a hub;
- text models (``textmodel``): the :class:`TextModel` protocol and :class:`ScriptedTextModel` for tests;
- which flags and variables model errors name (``hints``), shared by both command lines;
- one OpenAI-compatible client (``openai``): the transport policy (timeouts, retries, typed errors)
  that :class:`OpenAITextModel` uses here and harness_loop's chat model builds on.
"""

from typing import TYPE_CHECKING, Any

from .embeddings import MiniLMEmbedder, default_embedder, default_embedder_available
from .hints import MEM_HINTS, Hints, check_model_config
from .textmodel import ScriptedTextModel, TextModel, extract_json, str_list

if TYPE_CHECKING:
    from .openai import (
        DEFAULT_MAX_RETRIES,
        DEFAULT_TIMEOUT,
        MEM_HINTS,
        NO_MODEL_MESSAGE,
        RETRY_STATUSES,
        ChatEndpoint,
        Hints,
        ModelAPIError,
        ModelConnectionError,
        ModelResponseError,
        ModelStatusError,
        ModelTimeoutError,
        OpenAITextModel,
        configured_text_model,
        retry_after,
        server_message,
    )

# httpx is only worth importing when a text model is used: the client's names load on first access.
_OPENAI_NAMES = frozenset({
    "DEFAULT_MAX_RETRIES", "DEFAULT_TIMEOUT", "NO_MODEL_MESSAGE", "RETRY_STATUSES",
    "ChatEndpoint", "ModelAPIError", "ModelConnectionError", "ModelResponseError",
    "ModelStatusError", "ModelTimeoutError", "OpenAITextModel", "configured_text_model", "retry_after",
    "server_message",
})


def __getattr__(name: str) -> Any:
    if name in _OPENAI_NAMES:
        from . import openai

        return getattr(openai, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "MEM_HINTS",
    "NO_MODEL_MESSAGE",
    "RETRY_STATUSES",
    "ChatEndpoint",
    "Hints",
    "MiniLMEmbedder",
    "ModelAPIError",
    "ModelConnectionError",
    "ModelResponseError",
    "ModelStatusError",
    "ModelTimeoutError",
    "OpenAITextModel",
    "ScriptedTextModel",
    "TextModel",
    "check_model_config",
    "configured_text_model",
    "default_embedder",
    "default_embedder_available",
    "extract_json",
    "retry_after",
    "server_message",
    "str_list",
]
