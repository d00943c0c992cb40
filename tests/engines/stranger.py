"""Another process's server, for the tests of what a stranger on our port may not do: an HTTP
server in the test's own process that answers every GET with 200 (a health check passes)."""

from __future__ import annotations

import http.server
import threading


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"a stranger"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(port: int = 0) -> http.server.HTTPServer:
    """Listening on 127.0.0.1:``port`` (0: any), answering in a daemon thread; ``shutdown()``
    and ``server_close()`` it when done."""
    stranger = http.server.HTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    return stranger
