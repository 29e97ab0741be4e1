"""A synchronous OpenAI-compatible text model: how harness_mem calls a language model.

:class:`OpenAITextModel` implements :class:`~harness_mem.providers.textmodel.TextModel` over any server that
answers ``POST {base_url}/chat/completions`` (OpenAI, vLLM, llama.cpp, Ollama, LM Studio, …): one
user message in, the reply's text out, JSON mode when asked. It is synchronous on purpose — the
distiller, the reviser and offline consolidation make one call at a time, outside any event loop.

Transport policy, shared with harness_loop's async chat client (which imports it from here, never
the other way round):

* a timeout per request; timeouts are not retried by default (a model too slow once is usually too
  slow again);
* bounded retries with exponential backoff and full jitter on 408/409/429/5xx/529 and on connection
  failures; ``Retry-After`` (seconds or an HTTP date) is honoured, capped by ``retry_after_max`` so
  a server cannot park the caller for minutes;
* typed errors, each one line saying what went wrong and how to fix it. The fix names the option
  the user actually has (:class:`~harness_mem.providers.hints.Hints`): the same flags for both
  command lines, with ``HARNESS_MEM_`` or ``HARNESS_LOOP_`` variables::

    ModelError                     (harness_mem.errors)
    └── ModelAPIError              anything a client raises; ``.status`` when the server answered
        ├── ModelConnectionError   no connection (server down, wrong URL)
        ├── ModelTimeoutError      no answer within ``timeout``
        ├── ModelStatusError       an HTTP error status (after retries, if it was retryable)
        └── ModelResponseError     an answer that is not a chat completion
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from ..errors import ModelError
from ..redaction import cut_point
from .hints import MEM_HINTS, Hints, check_model_config

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "MEM_HINTS",
    "NO_MODEL_MESSAGE",
    "RETRY_STATUSES",
    "ChatEndpoint",
    "Hints",
    "ModelAPIError",
    "ModelConnectionError",
    "ModelResponseError",
    "ModelStatusError",
    "ModelTimeoutError",
    "OpenAITextModel",
    "check_model_config",
    "configured_text_model",
    "excerpt",
    "retry_after",
    "server_message",
]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 3

NO_MODEL_MESSAGE = MEM_HINTS.no_model()


# ---- errors ------------------------------------------------------------------------------------


class ModelAPIError(ModelError):
    """A chat-completions call failed; ``status`` is the HTTP status when the server answered."""

    def __init__(self, message: str, *, status: int | None = None, body: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ModelConnectionError(ModelAPIError):
    """The server could not be reached."""


class ModelTimeoutError(ModelAPIError):
    """The server did not answer in time."""


class ModelStatusError(ModelAPIError):
    """The server answered with an HTTP error status."""


class ModelResponseError(ModelAPIError):
    """The server's answer was not a usable chat completion."""




# ---- shared helpers (harness_loop imports these) -------------------------------------------------


def excerpt(text: str, limit: int) -> str:
    """The first ``limit`` characters of a server's text for an error message, cut short of a value
    that straddles the end: a server echoing a prompt can quote PII, and what records the error
    later redacts a value whole but not half of one (see :func:`harness_mem.redaction.cut_point`)."""
    return text[: cut_point(text, limit)]


def server_message(response: httpx.Response) -> str:
    """The error message a server put in its body (OpenAI's ``{"error": {"message"}}`` or plain text)."""
    try:
        data = response.json()
    except ValueError:
        return excerpt(" ".join(response.text.split()), 300)
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return excerpt(str(err["message"]), 300)
        if isinstance(err, str):
            return excerpt(err, 300)
    return excerpt(json.dumps(data), 300)


def retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` as seconds or an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _fix_for(status: int, hints: Hints) -> str:
    if status in (401, 403):
        return f"check the API key ({hints.key_option} or {hints.key_env})"
    if status == 404:
        return f"check {hints.url_option} (it usually ends in /v1) and the model name ({hints.model_option})"
    if status in (400, 413, 422):
        return "the server refused the request; check the model supports tools/JSON mode and the context length"
    if status == 429:
        return "the server is rate-limiting; wait, or lower the request rate"
    return "the server failed; retry later or check its logs"


@dataclass(frozen=True)
class ChatEndpoint:
    """Where and how to call a chat-completions server: the transport policy both clients share.

    :meth:`retry_delay` is the whole retry decision: it returns how long to wait before the next
    attempt, or raises the typed error that ends the call.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    retry_after_max: float = 30.0
    retry_on_timeout: bool = False
    temperature: float | None = None
    hints: Hints = field(default=MEM_HINTS)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def retry_delay(
        self, attempt: int, *, response: httpx.Response | None = None, exc: Exception | None = None
    ) -> float:
        """Seconds to wait before attempt ``attempt + 1``; raises the final error when giving up."""
        final = attempt > self.max_retries
        tries = f" (after {attempt} attempts)" if attempt > 1 else ""
        hints = self.hints
        if isinstance(exc, httpx.TimeoutException):
            # A pool timeout means our own client is saturated: waiting longer will not help.
            if final or not self.retry_on_timeout or isinstance(exc, httpx.PoolTimeout):
                raise ModelTimeoutError(
                    f"{self.url} did not answer within {self.timeout:g}s{tries} — raise the timeout "
                    f"({hints.timeout_option}) or use a faster model"
                ) from exc
        elif isinstance(exc, httpx.TransportError):
            if final:
                raise ModelConnectionError(
                    f"cannot connect to {self.url}: {exc or type(exc).__name__}{tries} — is the server running? "
                    f"Check {hints.url_option} ({hints.url_env})"
                ) from exc
        elif response is not None:
            status = response.status_code
            if final or status not in RETRY_STATUSES:
                raise ModelStatusError(
                    f"{self.url} answered HTTP {status}: {server_message(response)}{tries} — {_fix_for(status, hints)}",
                    status=status,
                    body=excerpt(response.text, 2000),
                )
            asked = retry_after(response)
            if asked is not None:
                return min(asked, self.retry_after_max)
        # Full jitter keeps a crowd of clients from retrying in lockstep.
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)))

    def json_body(self, response: httpx.Response) -> Any:
        """The decoded body of a successful response; :class:`ModelResponseError` when it is not JSON."""
        try:
            return response.json()
        except ValueError:
            raise ModelResponseError(
                f"{self.url} answered with something that is not JSON: {excerpt(response.text, 200)!r} — "
                f"is {self.hints.url_option} an OpenAI-compatible /v1 endpoint?",
                status=response.status_code,
            ) from None


# ---- the text model ------------------------------------------------------------------------------


class OpenAITextModel:
    """A :class:`~harness_mem.providers.textmodel.TextModel` over an OpenAI-compatible chat-completions API.

    Example::

        with OpenAITextModel("http://127.0.0.1:8000/v1", "qwen3") as model:
            reply = model.complete("Name three colours as a JSON object.", max_tokens=64, json=True)

    :param base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
    :param model: the model name the server expects.
    :param api_key: sent as a Bearer token when given.
    :param timeout: seconds per HTTP request.
    :param max_retries: extra attempts on 429/5xx/connection failures.
    :param backoff_base: the first backoff in seconds, doubling up to ``backoff_max``.
    :param retry_after_max: the longest ``Retry-After`` honoured.
    :param system: an optional system message sent before the prompt.
    :param client: an ``httpx.Client`` to use (and not close); by default one is made on first use.
    """

    #: The options error messages point at; harness_loop's subclass names its own.
    default_hints: ClassVar[Hints] = MEM_HINTS

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        retry_after_max: float = 30.0,
        retry_on_timeout: bool = False,
        temperature: float | None = None,
        system: str | None = None,
        client: httpx.Client | None = None,
        hints: Hints | None = None,
    ) -> None:
        if not base_url or not model:
            raise ModelError((hints or self.default_hints).no_model())
        self.endpoint = ChatEndpoint(
            base_url=base_url,
            model=model,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            retry_after_max=retry_after_max,
            retry_on_timeout=retry_on_timeout,
            temperature=temperature,
            hints=hints or self.default_hints,
        )
        self.name = model
        self.system = system
        self._client = client
        self._owns_client = client is None
        self.calls = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint.base_url!r}, {self.name!r})"

    def payload(self, prompt: str, *, max_tokens: int, json: bool = False) -> dict[str, Any]:
        """The request body for one prompt."""
        messages: list[dict[str, str]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {"model": self.endpoint.model, "messages": messages}
        if json:
            body["response_format"] = {"type": "json_object"}
        if max_tokens:
            body["max_tokens"] = max_tokens
        if self.endpoint.temperature is not None:
            body["temperature"] = self.endpoint.temperature
        return body

    def complete(self, prompt: str, *, max_tokens: int, json: bool = False) -> str:
        """The model's text answer to ``prompt`` (a JSON object's text when ``json``); ``""`` if it said nothing."""
        e = self.endpoint
        if self._client is None:
            # Made on first use: building a client costs tens of milliseconds a command may not need.
            self._client = httpx.Client(timeout=e.timeout)
        body = self.payload(prompt, max_tokens=max_tokens, json=json)
        self.calls += 1
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._client.post(e.url, json=body, headers=e.headers, timeout=e.timeout)
            except httpx.TransportError as exc:
                delay = e.retry_delay(attempt, exc=exc)
            else:
                if response.is_success:
                    return self._text(e.json_body(response))
                delay = e.retry_delay(attempt, response=response)
            time.sleep(delay)

    def _text(self, data: Any) -> str:
        try:
            message = data["choices"][0].get("message") or {}
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ModelResponseError(
                f"the server's answer has no choices[0].message: {excerpt(json.dumps(data), 200)} — "
                f"is {self.endpoint.hints.url_option} an OpenAI-compatible /v1 endpoint?"
            ) from None
        if content is None:
            return ""
        if not isinstance(content, str):
            raise ModelResponseError(f"the server's message content is not text: {excerpt(json.dumps(content), 200)}")
        return content

    def close(self) -> None:
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None

    def __enter__(self) -> OpenAITextModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> OpenAITextModel:
        """Configured from the environment variables :attr:`default_hints` names (for this class
        ``HARNESS_MEM_MODEL_URL``, ``HARNESS_MEM_MODEL`` and ``HARNESS_MEM_API_KEY``)."""
        env = os.environ if environ is None else environ
        hints = cls.default_hints
        base_url = env.get(hints.url_env)
        model = env.get(hints.model_env)
        check_model_config(base_url, model, required=True, hints=hints)
        assert base_url and model
        return cls(base_url, model, **{"api_key": env.get(hints.key_env) or None, **overrides})


def configured_text_model(
    base_url: str | None,
    model: str | None,
    *,
    api_key: str | None = None,
    timeout: float | None = None,
    required: bool = False,
    hints: Hints = MEM_HINTS,
) -> OpenAITextModel | None:
    """The model that ``base_url`` and ``model`` name, or None when neither is given.

    Half a configuration (a URL without a model name, or the reverse) is an error, not None: it is
    always a mistake. With ``required``, no configuration at all is an error too
    (:data:`NO_MODEL_MESSAGE`). ``hints`` names the flags the errors suggest.
    """
    if not check_model_config(base_url, model, required=required, hints=hints):
        return None
    assert base_url and model
    options: dict[str, Any] = {"api_key": api_key or None, "hints": hints}
    if timeout is not None:
        options["timeout"] = timeout
    return OpenAITextModel(base_url, model, **options)
