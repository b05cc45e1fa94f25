"""A tiny OpenAI-compatible server for tests: POST /v1/chat/completions answers a fixed text
per prompt (`answer(prompt)`), and keeps every request's headers and body."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class ChatServer:
    """Serves on 127.0.0.1 in a thread while used as a context manager; `url` is its root."""

    def __init__(self, answer: Callable[[str], str]) -> None:
        self.answer = answer
        self.requests: list[tuple[dict[str, str], dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((dict(self.headers), body))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": f"no route {self.path}"})
                text = server.answer(body["messages"][-1]["content"])
                self._send(200, {"choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}}]})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "ChatServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
