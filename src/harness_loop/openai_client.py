"""An OpenAI-compatible chat-completions client: async for the loop, sync for harness_mem.

Works with anything that serves ``POST {base_url}/chat/completions`` (OpenAI, vLLM, llama.cpp,
Ollama, LM Studio, ...): tools, JSON mode, a timeout per request, and bounded retries with
exponential backoff on 429 and 5xx responses and on connection failures. ``Retry-After`` is honoured
but capped (``retry_after_max``) so a server cannot park the caller for minutes. Timeouts are not
retried by default: a model too slow once is usually too slow again.

Errors are typed, subclass :class:`harness_mem.errors.ModelError`, and say what to do::

    ModelError
    └── ModelAPIError              anything this client raises; ``.status`` when the server answered
        ├── ModelConnectionError   no connection (server down, wrong --base-url)
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
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from harness_mem.errors import ModelError

from .models import Message, ModelOutput, ModelRequest, Role, StopReason, ToolCall, Usage, scripted_call_id

__all__ = [
    "ModelAPIError",
    "ModelConnectionError",
    "ModelResponseError",
    "ModelStatusError",
    "ModelTimeoutError",
    "OpenAIChatModel",
    "OpenAITextModel",
]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

_FINISH = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
}


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


def _server_message(response: httpx.Response) -> str:
    """The error message a server put in its body (OpenAI's ``{"error": {"message"}}`` or plain text)."""
    try:
        data = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if isinstance(err, str):
            return err[:300]
    return json.dumps(data)[:300]


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` as seconds or an HTTP date)."""
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


def message_to_openai(message: Message) -> dict[str, Any]:
    """One conversation message in the chat-completions wire format."""
    if message.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.args
                        if isinstance(c.args, str)
                        else json.dumps(c.args, ensure_ascii=False),
                    },
                }
                for c in message.tool_calls
            ],
        }
    return {"role": message.role.value, "content": message.content}


def parse_completion(data: Any, *, position: int = 0) -> ModelOutput:
    """A :class:`ModelOutput` from a chat-completions response body."""
    try:
        choice = data["choices"][0]
        msg = choice.get("message") or {}
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ModelResponseError(
            f"the server's answer has no choices[0].message: {json.dumps(data)[:200]} — "
            "is --base-url an OpenAI-compatible /v1 endpoint?"
        ) from None
    calls = []
    for j, raw in enumerate(msg.get("tool_calls") or ()):
        fn = raw.get("function") or {}
        name = str(fn.get("name", ""))
        arguments = fn.get("arguments")
        args: dict[str, Any] | str
        if isinstance(arguments, dict):
            args = arguments
        else:
            try:
                parsed = json.loads(arguments or "{}")
                args = parsed if isinstance(parsed, dict) else str(arguments)
            except (TypeError, ValueError):
                args = str(arguments)  # the loop tells the model its arguments were not JSON
        # Some servers omit ids; the loop needs one per call to pair calls with results.
        call_id = str(raw.get("id") or scripted_call_id(name, args, f"{position}:{j}"))
        calls.append(ToolCall(call_id, name, args))
    usage = data.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    return ModelOutput(
        text=msg.get("content"),
        tool_calls=tuple(calls),
        usage=Usage(
            input=int(usage.get("prompt_tokens") or 0),
            output=int(usage.get("completion_tokens") or 0),
            cached_input=int(details.get("cached_tokens") or 0),
        ),
        stop_reason=_FINISH.get(str(choice.get("finish_reason")), StopReason.OTHER),
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


@dataclass(frozen=True)
class _Settings:
    base_url: str
    model: str
    api_key: str | None
    timeout: float
    max_retries: int
    backoff_base: float
    backoff_max: float
    retry_after_max: float
    retry_on_timeout: bool
    temperature: float | None

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        # One system message: several chat templates refuse a second one.
        if system := "\n\n".join(part for part in (request.system, *request.guides) if part):
            messages.append({"role": "system", "content": system})
        messages.extend(message_to_openai(m) for m in request.messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if request.json:
            body["response_format"] = {"type": "json_object"}
        if request.max_output_tokens:
            body["max_tokens"] = request.max_output_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def retry_delay(
        self, attempt: int, *, response: httpx.Response | None = None, exc: Exception | None = None
    ) -> float:
        """Seconds to wait before attempt ``attempt + 1``; raises the final error when giving up."""
        final = attempt > self.max_retries
        tries = f" (after {attempt} attempts)" if attempt > 1 else ""
        if isinstance(exc, httpx.TimeoutException):
            if final or not self.retry_on_timeout or isinstance(exc, httpx.PoolTimeout):
                raise ModelTimeoutError(
                    f"{self.url} did not answer within {self.timeout:g}s{tries} — raise the timeout "
                    "(--timeout) or use a faster model"
                ) from exc
        elif isinstance(exc, httpx.TransportError):
            if final:
                raise ModelConnectionError(
                    f"cannot connect to {self.url}: {exc or type(exc).__name__}{tries} — is the server running? "
                    "Check --base-url (HARNESS_LOOP_BASE_URL)"
                ) from exc
        elif response is not None:
            status = response.status_code
            if final or status not in RETRY_STATUSES:
                raise ModelStatusError(
                    f"{self.url} answered HTTP {status}: {_server_message(response)}{tries} — {_fix_for(status)}",
                    status=status,
                    body=response.text[:2000],
                )
            asked = _retry_after(response)
            if asked is not None:
                return min(asked, self.retry_after_max)
        # Full jitter keeps a crowd of clients from retrying in lockstep.
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)))

    def parse(self, response: httpx.Response, position: int) -> ModelOutput:
        try:
            data = response.json()
        except ValueError:
            raise ModelResponseError(
                f"{self.url} answered with something that is not JSON: {response.text[:200]!r} — "
                "is --base-url an OpenAI-compatible /v1 endpoint?",
                status=response.status_code,
            ) from None
        return parse_completion(data, position=position)


def _fix_for(status: int) -> str:
    if status in (401, 403):
        return "check the API key (--api-key or HARNESS_LOOP_API_KEY)"
    if status == 404:
        return "check --base-url (it usually ends in /v1) and the model name (--model)"
    if status in (400, 413, 422):
        return (
            "the server refused the request; check the model supports tools/JSON mode and the context length"
        )
    if status == 429:
        return "the server is rate-limiting; wait, or lower the request rate"
    return "the server failed; retry later or check its logs"


class OpenAIChatModel:
    """An async :class:`~harness_loop.models.Model` over an OpenAI-compatible chat-completions API.

    :param base_url: e.g. ``http://127.0.0.1:8000/v1``.
    :param model: the model name the server expects.
    :param api_key: sent as a Bearer token when given.
    :param timeout: seconds per HTTP request.
    :param max_retries: extra attempts on 429/5xx/connection failures.
    :param backoff_base: first backoff in seconds, doubling up to ``backoff_max``.
    :param retry_after_max: the longest ``Retry-After`` honoured.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        retry_after_max: float = 30.0,
        retry_on_timeout: bool = False,
        temperature: float | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = _Settings(
            base_url,
            model,
            api_key,
            timeout,
            max_retries,
            backoff_base,
            backoff_max,
            retry_after_max,
            retry_on_timeout,
            temperature,
        )
        self.name = model
        self._client = client
        self._owns_client = client is None
        self._calls = 0

    async def complete(self, request: ModelRequest) -> ModelOutput:
        """One chat completion, retried as configured."""
        s = self.settings
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=s.timeout)
        payload = s.payload(request)
        self._calls += 1
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._client.post(s.url, json=payload, headers=s.headers, timeout=s.timeout)
            except httpx.TransportError as exc:
                delay = s.retry_delay(attempt, exc=exc)
            else:
                if response.is_success:
                    return s.parse(response, self._calls)
                delay = s.retry_delay(attempt, response=response)
            await anyio.sleep(delay)

    async def aclose(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.aclose()
        self._client = None

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class OpenAITextModel:
    """A synchronous text model (harness_mem's ``TextModel``: ``complete(prompt, *, max_tokens, json)``).

    Same server, settings and errors as :class:`OpenAIChatModel`; for consolidation, distillation and
    other harness_mem work that runs outside an event loop.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        retry_after_max: float = 30.0,
        retry_on_timeout: bool = False,
        temperature: float | None = None,
        system: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.settings = _Settings(
            base_url,
            model,
            api_key,
            timeout,
            max_retries,
            backoff_base,
            backoff_max,
            retry_after_max,
            retry_on_timeout,
            temperature,
        )
        self.name = model
        self.system = system
        self._client = client or httpx.Client(timeout=timeout)
        self._owns_client = client is None
        self._calls = 0

    def complete(self, prompt: str, *, max_tokens: int, json: bool = False) -> str:
        """The model's text answer to ``prompt`` (a JSON object's text when ``json``)."""
        s = self.settings
        request = ModelRequest(
            messages=(Message(Role.USER, prompt),),
            system=self.system,
            json=json,
            max_output_tokens=max_tokens,
        )
        payload = s.payload(request)
        self._calls += 1
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._client.post(s.url, json=payload, headers=s.headers, timeout=s.timeout)
            except httpx.TransportError as exc:
                delay = s.retry_delay(attempt, exc=exc)
            else:
                if response.is_success:
                    return s.parse(response, self._calls).text or ""
                delay = s.retry_delay(attempt, response=response)
            time.sleep(delay)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> OpenAITextModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_env(cls, **overrides: Any) -> OpenAITextModel:
        """Configured from ``HARNESS_LOOP_BASE_URL``, ``HARNESS_LOOP_MODEL`` and ``HARNESS_LOOP_API_KEY``."""
        return cls(**{**env_settings(), **overrides})


def env_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``base_url``, ``model`` and ``api_key`` from the environment; a clear error when one is missing."""
    env = os.environ if environ is None else environ
    missing = [v for v in ("HARNESS_LOOP_BASE_URL", "HARNESS_LOOP_MODEL") if not env.get(v)]
    if missing:
        raise ModelError(
            f"no model server configured ({', '.join(missing)} not set) — set HARNESS_LOOP_BASE_URL "
            "(e.g. http://127.0.0.1:8000/v1) and HARNESS_LOOP_MODEL"
        )
    return {
        "base_url": env["HARNESS_LOOP_BASE_URL"],
        "model": env["HARNESS_LOOP_MODEL"],
        "api_key": env.get("HARNESS_LOOP_API_KEY") or None,
    }
