"""Which options and environment variables an error message tells the user to check.

Both command lines take the same model flags (``--model-url``, ``--model``, ``--api-key``,
``--model-timeout``) and differ only in their environment prefix: ``HARNESS_MEM_`` for harness-mem,
``HARNESS_LOOP_`` for harness-loop. A :class:`Hints` names them for one of the two, so the flags a
command declares (:func:`harness_mem.cliutils.model_options`) and the fixes its errors suggest
(:mod:`harness_mem.providers.openai`) come from the same object. It is its own module so that the
command lines can build their options without importing the HTTP client.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelError

__all__ = ["MEM_HINTS", "Hints", "check_model_config"]


@dataclass(frozen=True)
class Hints:
    """The options and variables an error message tells the user to check."""

    url_option: str = "--model-url"
    url_env: str = "HARNESS_MEM_MODEL_URL"
    model_option: str = "--model"
    model_env: str = "HARNESS_MEM_MODEL"
    key_option: str = "--api-key"
    key_env: str = "HARNESS_MEM_API_KEY"
    timeout_option: str = "--model-timeout"

    @classmethod
    def for_env_prefix(cls, prefix: str) -> Hints:
        """The shared flags with ``{prefix}_MODEL_URL``, ``{prefix}_MODEL`` and ``{prefix}_API_KEY``."""
        return cls(url_env=f"{prefix}_MODEL_URL", model_env=f"{prefix}_MODEL", key_env=f"{prefix}_API_KEY")

    def no_model(self) -> str:
        """The message for a command that needs a model and was given none."""
        return (
            f"no model configured — pass {self.url_option} and {self.model_option}"
            f" (or set {self.url_env} and {self.model_env})"
        )

    def no_url(self) -> str:
        return (
            f"a model name was given but no server — pass {self.url_option} (or set {self.url_env}),"
            " e.g. http://127.0.0.1:8000/v1"
        )

    def no_name(self, base_url: str) -> str:
        return f"a model server was given ({base_url}) but no model name — pass {self.model_option} (or set {self.model_env})"


#: harness-mem's names.
MEM_HINTS = Hints.for_env_prefix("HARNESS_MEM")


def check_model_config(base_url: str | None, model: str | None, *, required: bool, hints: Hints = MEM_HINTS) -> bool:
    """True when a model is configured, False when none is; half a configuration raises.

    A URL without a model name (or the reverse) is always a mistake, so it is a :class:`ModelError`
    that names the missing flag; with ``required``, no configuration at all is one too.
    """
    if not base_url and not model:
        if required:
            raise ModelError(hints.no_model())
        return False
    if not base_url:
        raise ModelError(hints.no_url())
    if not model:
        raise ModelError(hints.no_name(base_url))
    return True
