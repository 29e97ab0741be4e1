"""An OpenAI-compatible chat-completions client for the loop (async), over harness_mem's transport.

Works with anything that serves ``POST {base_url}/chat/completions`` (OpenAI, vLLM, llama.cpp,
Ollama, LM Studio, ...): tools, JSON mode, a timeout per request, and bounded retries with
exponential backoff on 429 and 5xx responses and on connection failures. ``Retry-After`` is honoured
but capped (``retry_after_max``) so a server cannot park the caller for minutes. Timeouts are not
retried by default: a model too slow once is usually too slow again.

The transport policy (retries, backoff, ``Retry-After``, error mapping) and the typed errors live in
:mod:`harness_mem.providers.openai` and are imported from there — the dependency runs one way, loop to
mem. :class:`OpenAITextModel` is harness_mem's synchronous text model, with this package's environment
variables in its error messages::

    ModelError
    └── ModelAPIError              anything this client raises; ``.status`` when the server answered
        ├── ModelConnectionError   no connection (server down, wrong --model-url)
        ├── ModelTimeoutError      no answer within ``timeout``
        ├── ModelStatusError       an HTTP error status (after retries, if it was retryable)
        └── ModelResponseError     an answer that is not a chat completion
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio
import httpx

from harness_mem import providers
from harness_mem.providers.openai import (
    RETRY_STATUSES,
    ChatEndpoint,
    Hints,
    ModelAPIError,
    ModelConnectionError,
    ModelResponseError,
    ModelStatusError,
    ModelTimeoutError,
    check_model_config,
)
from harness_mem.redaction import cut_point

from .chat import Message, ModelOutput, ModelRequest, Role, StopReason, ToolCall, Usage, scripted_call_id

__all__ = [
    "LOOP_HINTS",
    "RETRY_STATUSES",
    "ModelAPIError",
    "ModelConnectionError",
    "ModelResponseError",
    "ModelStatusError",
    "ModelTimeoutError",
    "OpenAIChatModel",
    "OpenAITextModel",
]

#: harness-loop's names for the "how to fix" half of error messages: the same flags as harness-mem,
#: with HARNESS_LOOP_ variables.
LOOP_HINTS = Hints.for_env_prefix("HARNESS_LOOP")

_FINISH = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
}


def message_to_openai(message: Message) -> dict[str, Any]:
    """One conversation message in the chat-completions wire format."""
    if message.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        # An empty reply beside tool calls is left out, not sent as null: llama.cpp's server answers
        # "content": null with HTTP 500.
        return {
            "role": "assistant",
            **({"content": message.content} if message.content else {}),
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
        body = json.dumps(data)
        raise ModelResponseError(  # cut short of a value: what records the error redacts it whole
            f"the server's answer has no choices[0].message: {body[: cut_point(body, 200)]} — "
            f"is {LOOP_HINTS.url_option} an OpenAI-compatible /v1 endpoint?"
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
class _Settings(ChatEndpoint):
    """harness_mem's endpoint and retry policy, plus the loop's request and response shapes."""

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
            # Said outright: some servers (llama.cpp's) make no tool call unless asked to choose.
            body["tool_choice"] = "auto"
        if request.json:
            body["response_format"] = {"type": "json_object"}
        if request.max_output_tokens:
            body["max_tokens"] = request.max_output_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def parse(self, response: httpx.Response, position: int) -> ModelOutput:
        return parse_completion(self.json_body(response), position=position)


class OpenAIChatModel:
    """An async :class:`~harness_loop.chat.Model` over an OpenAI-compatible chat-completions API.

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
            hints=LOOP_HINTS,
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


class OpenAITextModel(providers.OpenAITextModel):
    """harness_mem's synchronous text model (``complete(prompt, *, max_tokens, json)``), as the loop
    configures it: error messages name ``HARNESS_LOOP_*`` variables, and :meth:`from_env` reads
    ``HARNESS_LOOP_MODEL_URL``, ``HARNESS_LOOP_MODEL`` and ``HARNESS_LOOP_API_KEY``. Everything else
    is :class:`harness_mem.providers.openai.OpenAITextModel`.
    """

    default_hints: ClassVar[Hints] = LOOP_HINTS


def env_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``base_url``, ``model`` and ``api_key`` from the environment; a clear error when one is missing."""
    env = os.environ if environ is None else environ
    base_url = env.get(LOOP_HINTS.url_env)
    model = env.get(LOOP_HINTS.model_env)
    check_model_config(base_url, model, required=True, hints=LOOP_HINTS)
    return {"base_url": base_url, "model": model, "api_key": env.get(LOOP_HINTS.key_env) or None}
