"""A tiny OpenAI-compatible chat-completions server for tests, on 127.0.0.1 only.

Run ``python fake_openai_server.py [--port 0] [--lifetime 300]``; it prints ``PORT <n>`` once it
listens and exits by itself after ``--lifetime`` seconds (so a crashed test run leaves nothing behind).

- ``POST /v1/chat/completions`` answers with the next scripted response, or, when the script is
  empty, echoes the last user message as the assistant's text.
- ``POST /_script`` with ``{"responses": [...]}`` queues responses; each is
  ``{"status": 200, "body": {...} | "raw": "text", "delay": seconds, "headers": {...}}``.
- ``POST /_reset`` clears the script and the request log; ``GET /_requests`` returns the log
  (path, authorization header, body) of every completion request.
- ``POST /_strict`` with ``{"null_content": true}`` makes it answer a message whose ``"content"`` is
  null with HTTP 500, as llama.cpp's server does (``/_reset`` turns it off).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_lock = threading.Lock()
_script: list[dict[str, Any]] = []
_log: list[dict[str, Any]] = []
_strict = {"null_content": False}


def _echo(body: dict[str, Any]) -> dict[str, Any]:
    last = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {})
    return {
        "id": "chatcmpl-echo",
        "object": "chat.completion",
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"echo: {last.get('content', '')}"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; Nagle would hold the second 40 ms

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read the log endpoint instead
        pass

    def _read_json(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def _send(
        self,
        status: int,
        payload: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(payload)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to do

    def do_GET(self) -> None:
        if self.path == "/_requests":
            with _lock:
                data = json.dumps(_log).encode()
            self._send(200, data)
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        body = self._read_json()
        if self.path == "/_script":
            with _lock:
                _script.extend(body.get("responses", []))
            self._send(200, b"{}")
            return
        if self.path == "/_reset":
            with _lock:
                _script.clear()
                _log.clear()
                _strict["null_content"] = False
            self._send(200, b"{}")
            return
        if self.path == "/_strict":
            _strict["null_content"] = bool(body.get("null_content"))
            self._send(200, b"{}")
            return
        if self.path != "/v1/chat/completions":
            self._send(404, b'{"error": {"message": "unknown path; use /v1/chat/completions"}}')
            return
        with _lock:
            _log.append({"path": self.path, "authorization": self.headers.get("authorization"), "body": body})
            if _strict["null_content"] and any("content" in m and m["content"] is None for m in body.get("messages", [])):
                self._send(500, b'{"error": {"code": 500, "message": "[json.exception.type_error.302] '
                                b'type must be string, but is null", "type": "server_error"}}')
                return
            step = _script.pop(0) if _script else None
        if step is None:
            self._send(200, json.dumps(_echo(body)).encode())
            return
        if step.get("delay"):
            time.sleep(float(step["delay"]))
        payload = step["raw"].encode() if "raw" in step else json.dumps(step.get("body", {})).encode()
        content_type = "text/plain" if "raw" in step else "application/json"
        self._send(int(step.get("status", 200)), payload, content_type, step.get("headers"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lifetime", type=float, default=300.0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    timer = threading.Timer(args.lifetime, server.shutdown)
    timer.daemon = True
    timer.start()
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
