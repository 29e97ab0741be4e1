"""The OpenAI-compatible client against a real HTTP server process on 127.0.0.1 (fake_openai_server.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from fake_openai import FakeServer

from harness_loop.chat import Message, ModelRequest, Role, StopReason, ToolCall, ToolSpec
from harness_loop.cli import main
from harness_loop.loop import AgentLoop, Done
from harness_loop.openai_client import (
    ModelConnectionError,
    ModelResponseError,
    ModelStatusError,
    ModelTimeoutError,
    OpenAIChatModel,
    OpenAITextModel,
)
from harness_loop.tools import tool
from harness_mem.errors import ModelError

pytestmark = pytest.mark.anyio



@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def completion(
    content: str | None = None, tool_calls: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, **extra}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "status": 200,
        "body": {
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}
            ],
            "usage": {
                "prompt_tokens": 11,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        },
    }


def fn_call(id_: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def model(fake: FakeServer, **kw: Any) -> OpenAIChatModel:
    kw.setdefault("backoff_base", 0.01)
    return OpenAIChatModel(fake.url, "test-model", **kw)


async def test_text_completion_and_the_request_on_the_wire(fake: FakeServer) -> None:
    fake.script(completion("hello there"))
    request = ModelRequest(
        messages=[Message(Role.USER, "hi")],
        system="be brief",
        guides=["recalled: the user likes tea"],
        tools=[ToolSpec("lookup", "Look up.", {"type": "object", "properties": {}, "required": []})],
        json=True,
        max_output_tokens=50,
    )
    async with model(fake, api_key="sk-test") as m:
        out = await m.complete(request)
    assert out.text == "hello there" and out.stop_reason is StopReason.END_TURN
    assert (out.usage.input, out.usage.output, out.usage.cached_input) == (11, 4, 8)
    (sent,) = fake.requests()
    assert sent["authorization"] == "Bearer sk-test"
    body = sent["body"]
    assert body["model"] == "test-model" and body["max_tokens"] == 50
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"] == [
        {"role": "system", "content": "be brief\n\nrecalled: the user likes tea"},
        {"role": "user", "content": "hi"},
    ]
    assert body["tools"][0]["function"]["name"] == "lookup"
    assert body["tool_choice"] == "auto"  # said outright: llama.cpp's server calls no tool otherwise


async def test_tool_calls_are_parsed_and_sent_back(fake: FakeServer) -> None:
    fake.strict()  # as llama.cpp's server: a null content is an HTTP 500
    fake.script(
        completion(
            None,
            [fn_call("c1", "lookup", '{"key": "a"}'), fn_call("", "lookup", "{broken")],
            reasoning_content="I should look",
        ),
        completion("done"),
    )
    async with model(fake) as m:
        out = await m.complete(ModelRequest(messages=[Message(Role.USER, "go")]))
        assert out.stop_reason is StopReason.TOOL_USE and out.reasoning == "I should look"
        first, second = out.tool_calls
        assert first == ToolCall("c1", "lookup", {"key": "a"})
        assert second.args == "{broken" and second.id.startswith("call_")  # a missing id is filled in
        history = [
            Message(Role.USER, "go"),
            Message(Role.ASSISTANT, "", tool_calls=out.tool_calls),
            Message(Role.TOOL, "value", tool_call_id="c1", name="lookup"),
        ]
        await m.complete(ModelRequest(messages=history))
    sent = fake.requests()[1]["body"]["messages"]
    assert sent[1]["tool_calls"][0] == fn_call("c1", "lookup", '{"key": "a"}')
    assert "content" not in sent[1]  # an empty reply beside tool calls is left out, never null
    assert sent[2] == {"role": "tool", "tool_call_id": "c1", "content": "value"}


async def test_slow_response_times_out_with_a_clear_error(fake: FakeServer) -> None:
    fake.script({"delay": 2, "body": completion("late")["body"]})
    async with model(fake, timeout=0.3) as m:
        with pytest.raises(ModelTimeoutError) as err:  # the late answer (2 s) would be a reply, not this error
            await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))
    assert isinstance(err.value, ModelError)
    assert "did not answer within 0.3s" in str(err.value) and "raise the timeout" in str(err.value)
    assert len(fake.requests()) == 1  # a timeout is not retried by default


async def test_500_is_retried_then_succeeds(fake: FakeServer) -> None:
    fake.script({"status": 500, "body": {"error": {"message": "overloaded"}}}, completion("recovered"))
    async with model(fake) as m:
        out = await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))
    assert out.text == "recovered" and len(fake.requests()) == 2


async def test_persistent_500_gives_up_with_the_servers_message(fake: FakeServer) -> None:
    fake.script(*[{"status": 503, "body": {"error": {"message": "model is loading"}}}] * 3)
    async with model(fake, max_retries=2) as m:
        with pytest.raises(ModelStatusError) as err:
            await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))
    assert err.value.status == 503 and len(fake.requests()) == 3
    assert "answered HTTP 503: model is loading (after 3 attempts) — the server failed" in str(err.value)


async def test_retry_after_is_respected_and_capped(fake: FakeServer) -> None:
    fake.script({"status": 429, "headers": {"Retry-After": "0.2"}, "body": {}}, completion("ok"))
    started = time.monotonic()
    async with model(fake) as m:
        assert (await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))).text == "ok"
    assert time.monotonic() - started >= 0.2

    fake.script({"status": 429, "headers": {"Retry-After": "3600"}, "body": {}}, completion("ok"))
    started = time.monotonic()
    async with model(fake, retry_after_max=0.1) as m:
        assert (await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))).text == "ok"
    assert time.monotonic() - started < 60  # uncapped: an hour


async def test_client_errors_are_not_retried_and_say_how_to_fix(fake: FakeServer) -> None:
    fake.script({"status": 401, "body": {"error": {"message": "invalid api key"}}})
    async with model(fake) as m:
        with pytest.raises(ModelStatusError, match="HTTP 401: invalid api key — check the API key"):
            await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))
    assert len(fake.requests()) == 1
    async with OpenAIChatModel(fake.base + "/wrong", "m", backoff_base=0.01) as m:
        with pytest.raises(ModelStatusError, match=r"HTTP 404.*check --model-url \(it usually ends in /v1\)"):
            await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))
    fake.script({"status": 200, "raw": "<html>proxy login</html>"})
    async with model(fake) as m:
        with pytest.raises(ModelResponseError, match="not JSON"):
            await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))


async def test_connection_refused_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free now, and nothing listens on it
    async with OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_base=0.01) as m:
        with pytest.raises(
            ModelConnectionError, match=r"cannot connect .* is the server running\? Check --model-url"
        ):
            await m.complete(ModelRequest(messages=[Message(Role.USER, "hi")]))


def test_sync_text_model_for_harness_mem(fake: FakeServer) -> None:
    from harness_mem.providers.textmodel import TextModel

    fake.script({"status": 500, "body": {}}, completion('{"facts": []}'))
    with OpenAITextModel(fake.url, "test-model", backoff_base=0.01, system="You distil.") as tm:
        assert isinstance(tm, TextModel)
        assert tm.complete("distil this", max_tokens=64, json=True) == '{"facts": []}'
    body = fake.requests()[-1]["body"]
    assert body["response_format"] == {"type": "json_object"} and body["max_tokens"] == 64
    assert body["messages"] == [
        {"role": "system", "content": "You distil."},
        {"role": "user", "content": "distil this"},
    ]


async def test_agent_loop_over_http(fake: FakeServer, tmp_path: Path) -> None:
    @tool
    def lookup(key: str) -> str:
        """Look up."""
        return f"value of {key}"

    fake.script(completion(None, [fn_call("c1", "lookup", '{"key": "k"}')]), completion("the value is known"))
    async with model(fake) as m:
        out = await AgentLoop(m, [lookup], workspace=tmp_path).run("find k")
    assert isinstance(out, Done) and out.iters == 2 and out.usage.input == 22
    assert fake.requests()[1]["body"]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "value of k",
    }


def test_cli_run_against_the_server_records_and_replays(fake: FakeServer, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the password is swordfish\n")
    fake.script(
        completion(None, [fn_call("c1", "read_file", '{"path": "notes.txt"}')]),
        completion("The password is swordfish."),
    )
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["run", "--model-url", fake.url, "--model", "m", "-w", str(tmp_path), "What is the password?"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "The password is swordfish.\n"
    recording = Path(result.stderr.splitlines()[0].removeprefix("recording: "))
    assert recording.parent == tmp_path / ".harness" / "sessions"
    assert "done after 2 iterations and 1 tool calls" in result.stderr
    assert fake.requests()[1]["body"]["messages"][-1]["content"] == "the password is swordfish\n"

    (tmp_path / "notes.txt").unlink()  # replay needs neither the file nor the server
    result = runner.invoke(main, ["replay", str(recording)], catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.startswith("reproduced: done after 2 iterations")


def test_cli_run_reports_an_unreachable_server_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--model-url",
            f"http://127.0.0.1:{port}/v1",
            "--model",
            "m",
            "-w",
            str(tmp_path),
            "--no-record",
            "--retries",
            "0",
            "hi",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: cannot connect to http://127.0.0.1:{port}/v1/chat/completions")
    assert line.endswith("is the server running? Check --model-url (HARNESS_LOOP_MODEL_URL)")


async def test_concurrent_requests_share_one_client(fake: FakeServer) -> None:
    async with model(fake) as m:
        results: list[str | None] = [None] * 4

        async def one(i: int) -> None:
            results[i] = (await m.complete(ModelRequest(messages=[Message(Role.USER, f"q{i}")]))).text

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one, i)
    assert sorted(results) == [f"echo: q{i}" for i in range(4)]  # type: ignore[type-var]
