"""The control side of tests/loop/fake_openai_server.py, shared by the model-client tests."""

from __future__ import annotations

from typing import Any

import httpx


class FakeServer:
    """Control side of tests/loop/fake_openai_server.py: a real OpenAI-compatible HTTP server on
    127.0.0.1 that answers from a script and records what it was sent."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/v1"
        self.control = httpx.Client(base_url=self.base)  # one client: building one costs ~50 ms

    def script(self, *responses: dict[str, Any]) -> None:
        self.control.post("/_script", json={"responses": list(responses)}).raise_for_status()

    def say(self, *contents: str) -> None:
        """Script plain assistant replies, one per request."""
        self.script(*(
            {"status": 200, "body": {"choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": c}}]}}
            for c in contents
        ))

    def strict(self) -> None:
        """Refuse a message whose content is null with HTTP 500, as llama.cpp's server does."""
        self.control.post("/_strict", json={"null_content": True}).raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        return self.control.get("/_requests").json()  # type: ignore[no-any-return]

    def reset(self) -> None:
        self.control.post("/_reset", json={}).raise_for_status()
