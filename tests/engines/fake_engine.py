"""A stand-in server process for lifecycle tests (our lifecycle logic, not an engine's).

    python fake_engine.py PORT MODE

MODE: ok (serve /health), exit (exit 3 at once), slow (never bind), children (ok + spawn two
sleeping children, one of them in its own session), crash-after (ok, then SIGKILL itself after
1 s), deaf (ok, ignoring SIGTERM: only the guard's SIGKILL after its grace period stops it),
litter (ok, leaving a file and a socket in its temporary folder, as vLLM does), late-bind
(ok, binding only once the file named by FAKE_BIND_AFTER exists, as vLLM binds after 15 s of
imports).
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time

port, mode = int(sys.argv[1]), sys.argv[2]
print(f"fake engine starting in mode {mode}", flush=True)
if mode == "exit":
    print("fatal: cannot load model weights", flush=True)
    sys.exit(3)
if mode == "slow":
    time.sleep(3600)
if mode == "children":
    sleeper = [sys.executable, "-c", "import time; time.sleep(3600)"]
    subprocess.Popen(sleeper)
    subprocess.Popen(sleeper, start_new_session=True)
    print("spawned workers", flush=True)
if mode == "litter":
    import socket
    import tempfile

    litter = os.path.join(tempfile.gettempdir(), "vllm_dist_fake")
    with open(litter, "w") as handle:
        handle.write("x")
    ipc = socket.socket(socket.AF_UNIX)
    ipc.bind(os.path.join(tempfile.gettempdir(), "fake-ipc"))
    print(f"littered {litter}", flush=True)
if mode == "deaf":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "late-bind":
    flag = os.environ["FAKE_BIND_AFTER"]
    deadline = time.monotonic() + 30
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.02)
if mode == "crash-after":
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
