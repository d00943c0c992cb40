"""A second OpenAI-compatible server, standard library only: what the `ministream` plugin engine
(ministream_engine.py beside it) starts in its own venv, where quantbench is not installed.

It answers /health, /v1/models, and /v1/chat/completions and /v1/completions, streamed (SSE, usage
in a last chunk when stream_options.include_usage asks) or whole: `max_tokens` words of "ok" (16
where none is asked), the first after --ttft-ms and each next after --itl-ms.

    python ministream_server.py --host 127.0.0.1 --port 8000 --model NAME [--itl-ms 2]
"""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def make_handler(model: str, ttft_s: float, itl_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet: one line a request
            pass

        def _json(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path not in ("/v1/chat/completions", "/v1/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            chat = self.path.endswith("chat/completions")
            prompt = body.get("messages") if chat else body.get("prompt")
            usage = {"prompt_tokens": len(json.dumps(prompt).split()), "completion_tokens": 0}
            n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            usage["completion_tokens"] = n
            usage["total_tokens"] = usage["prompt_tokens"] + n
            kind = "chat.completion" if chat else "text_completion"
            if not body.get("stream"):
                time.sleep(ttft_s + itl_s * (n - 1))
                text = " ".join(["ok"] * n)
                choice = {"index": 0, "finish_reason": "length"}
                choice.update({"message": {"role": "assistant", "content": text}} if chat
                              else {"text": text})  # fmt: skip
                self._json(200, {"id": "ms-1", "object": kind, "model": model,
                                 "choices": [choice], "usage": usage})  # fmt: skip
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()  # HTTP/1.0: the stream ends when the connection closes

            def send(choices: list, extra: dict | None = None) -> None:
                event = {"id": "ms-1", "object": f"{kind}.chunk", "model": model,
                         "choices": choices, **(extra or {})}  # fmt: skip
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()

            for i in range(n):
                time.sleep(ttft_s if i == 0 else itl_s)
                finish = "length" if i == n - 1 else None
                piece = "ok" if i == 0 else " ok"
                delta = {"delta": {"content": piece}} if chat else {"text": piece}
                send([{"index": 0, "finish_reason": finish, **delta}])
            if (body.get("stream_options") or {}).get("include_usage"):
                send([], {"usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--itl-ms", type=float, default=2.0)
    args = parser.parse_args()
    handler = make_handler(args.model, args.ttft_ms / 1000, args.itl_ms / 1000)
    ThreadingHTTPServer((args.host, args.port), handler).serve_forever()


if __name__ == "__main__":
    main()
