"""harness_mem's synchronous OpenAI-compatible text model, against a real HTTP server on 127.0.0.1.

The server is harness_loop's test server (tests/loop/fake_openai_server.py), run as a process.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from fake_openai import FakeServer

from harness_mem.errors import HarnessMemError, ModelError
from harness_mem.providers.openai import (
    NO_MODEL_MESSAGE,
    ModelConnectionError,
    ModelResponseError,
    ModelStatusError,
    ModelTimeoutError,
    OpenAITextModel,
    configured_text_model,
)
from harness_mem.providers.textmodel import TextModel


def reply(content: str | None) -> dict[str, Any]:
    return {
        "status": 200,
        "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                              "finish_reason": "stop"}]},
    }


def model(fake: FakeServer, **kw: Any) -> OpenAITextModel:
    kw.setdefault("backoff_base", 0.01)
    return OpenAITextModel(fake.url, "test-model", **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # free now, and nothing listens on it


def test_one_user_message_in_the_reply_text_out(fake: FakeServer) -> None:
    fake.script(reply('{"facts": []}'))
    with model(fake, api_key="sk-test") as tm:
        assert isinstance(tm, TextModel)
        assert tm.complete("extract facts", max_tokens=64, json=True) == '{"facts": []}'
    (sent,) = fake.requests()
    assert sent["authorization"] == "Bearer sk-test"
    assert sent["body"] == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "extract facts"}],
        "max_tokens": 64,
        "response_format": {"type": "json_object"},
    }


def test_plain_text_mode_sends_no_response_format_and_a_null_content_is_empty(fake: FakeServer) -> None:
    fake.script(reply(None))
    with model(fake, temperature=0.0) as tm:
        assert tm.complete("hi", max_tokens=8) == ""
    body = fake.requests()[0]["body"]
    assert "response_format" not in body and body["temperature"] == 0.0


def test_5xx_is_retried_then_succeeds(fake: FakeServer) -> None:
    fake.script({"status": 500, "body": {"error": {"message": "overloaded"}}}, reply("recovered"))
    with model(fake) as tm:
        assert tm.complete("hi", max_tokens=8) == "recovered"
    assert len(fake.requests()) == 2


def test_persistent_5xx_gives_up_with_the_servers_message(fake: FakeServer) -> None:
    fake.script(*[{"status": 503, "body": {"error": {"message": "model is loading"}}}] * 3)
    with model(fake, max_retries=2) as tm, pytest.raises(ModelStatusError) as err:
        tm.complete("hi", max_tokens=8)
    assert isinstance(err.value, ModelError) and isinstance(err.value, HarnessMemError)
    assert err.value.status == 503 and len(fake.requests()) == 3
    assert "answered HTTP 503: model is loading (after 3 attempts) — the server failed" in str(err.value)


def test_retry_after_is_honoured_and_capped(fake: FakeServer) -> None:
    fake.script({"status": 429, "headers": {"Retry-After": "0.3"}, "body": {}}, reply("ok"))
    started = time.monotonic()
    with model(fake) as tm:
        assert tm.complete("hi", max_tokens=8) == "ok"
    assert time.monotonic() - started >= 0.3

    fake.script({"status": 429, "headers": {"Retry-After": "3600"}, "body": {}}, reply("ok"))
    started = time.monotonic()
    with model(fake, retry_after_max=0.1) as tm:
        assert tm.complete("hi", max_tokens=8) == "ok"
    assert time.monotonic() - started < 60  # uncapped: an hour


@pytest.mark.parametrize(
    ("step", "path", "error", "message"),
    [
        ({"status": 401, "body": {"error": {"message": "invalid api key"}}}, "/v1", ModelStatusError,
         "HTTP 401: invalid api key — check the API key (--api-key or HARNESS_MEM_API_KEY)"),
        ({"status": 400, "body": {"error": {"message": "context too long"}}}, "/v1", ModelStatusError,
         "HTTP 400: context too long — the server refused the request"),
        (None, "/wrong", ModelStatusError, "check --model-url (it usually ends in /v1) and the model name (--model)"),
        ({"status": 200, "raw": "<html>proxy login</html>"}, "/v1", ModelResponseError,
         "is --model-url an OpenAI-compatible /v1 endpoint?"),
        ({"status": 200, "body": {"object": "list"}}, "/v1", ModelResponseError, "has no choices[0].message"),
    ],
)
def test_errors_are_typed_not_retried_and_say_how_to_fix(
    fake: FakeServer, step: dict[str, Any] | None, path: str, error: type[Exception], message: str
) -> None:
    if step is not None:
        fake.script(step)
    with OpenAITextModel(fake.base + path, "m", backoff_base=0.01) as tm, pytest.raises(error) as err:
        tm.complete("hi", max_tokens=8)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert len(fake.requests()) <= 1


def test_a_slow_server_times_out_once(fake: FakeServer) -> None:
    fake.script({"delay": 2, "body": reply("late")["body"]})
    with model(fake, timeout=0.3) as tm, pytest.raises(ModelTimeoutError) as err:
        tm.complete("hi", max_tokens=8)  # the late answer (2 s) would be a reply, not this error
    assert "did not answer within 0.3s" in str(err.value) and "(--model-timeout)" in str(err.value)
    assert len(fake.requests()) == 1


def test_connection_refused_names_the_option_to_check() -> None:
    port = free_port()
    tm = OpenAITextModel(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_base=0.01)
    with tm, pytest.raises(ModelConnectionError) as err:
        tm.complete("hi", max_tokens=8)
    assert str(err.value).startswith(f"cannot connect to http://127.0.0.1:{port}/v1/chat/completions")
    assert str(err.value).endswith("(after 2 attempts) — is the server running? Check --model-url (HARNESS_MEM_MODEL_URL)")


def test_configuration_from_options_and_environment() -> None:
    assert configured_text_model(None, None) is None
    with pytest.raises(ModelError) as err:
        configured_text_model(None, "", required=True)
    assert str(err.value) == NO_MODEL_MESSAGE
    with pytest.raises(ModelError, match="no model name — pass --model"):
        configured_text_model("http://127.0.0.1:1/v1", None)
    with pytest.raises(ModelError, match="no server — pass --model-url"):
        configured_text_model(None, "qwen3")
    built = configured_text_model("http://h/v1", "qwen3", api_key="k", timeout=5)
    assert built is not None and built.endpoint.timeout == 5 and built.endpoint.headers == {"Authorization": "Bearer k"}
    env = {"HARNESS_MEM_MODEL_URL": "http://h/v1", "HARNESS_MEM_MODEL": "qwen3"}
    from_env = OpenAITextModel.from_env(env, max_retries=0)
    assert (from_env.endpoint.url, from_env.name, from_env.endpoint.max_retries) == (
        "http://h/v1/chat/completions", "qwen3", 0,
    )
    with pytest.raises(ModelError, match="no model configured"):
        OpenAITextModel.from_env({})


def test_harness_loop_reuses_it_and_harness_mem_never_imports_harness_loop() -> None:
    from harness_loop import openai_client
    from harness_mem.providers import openai as openai_text

    assert issubclass(openai_client.OpenAITextModel, openai_text.OpenAITextModel)
    for name in ("ModelAPIError", "ModelConnectionError", "ModelStatusError", "ModelTimeoutError",
                 "ModelResponseError", "RETRY_STATUSES"):
        assert getattr(openai_client, name) is getattr(openai_text, name), name
    # The loop's subclass points its users at the loop's own variables.
    loop_model = openai_client.OpenAITextModel(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=0)
    with loop_model, pytest.raises(ModelConnectionError, match=r"Check --model-url \(HARNESS_LOOP_MODEL_URL\)$"):
        loop_model.complete("hi", max_tokens=8)

    code = (
        "import sys\n"
        "import harness_mem.cli, harness_mem.experience.consolidate, harness_mem.providers.openai, harness_mem.experience.transcript\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'harness_loop')\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
