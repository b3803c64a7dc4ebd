"""What the interop drivers share: the simulator's identity, its control API, a notify receiver.

The simulator (`mideng sim`) writes its identity and keys into its data directory; SIM_URL
and SIM_DIR say where it listens and where that directory is.
"""

import http.server
import json
import os
import queue
import sys
import threading
import time
import urllib.request

SIM_URL = os.environ["SIM_URL"].rstrip("/")
SIM_DIR = os.environ["SIM_DIR"]
FAILURES = []


def read(name):
    with open(os.path.join(SIM_DIR, name), encoding="utf-8") as file:
        return file.read()


IDENTITY = json.loads(read("sim.json"))


def check(condition, what):
    """Records a failed expectation; the driver exits non-zero at the end if any failed."""
    print(("  ok    " if condition else "  FAIL  ") + what, flush=True)
    if not condition:
        FAILURES.append(what)


def finish(name):
    if FAILURES:
        print(f"{name}: {len(FAILURES)} expectation(s) failed", file=sys.stderr)
        sys.exit(1)
    print(f"{name}: every flow passed")


def control(path):
    """A POST to the simulator's control API: the status and the JSON answer."""
    request = urllib.request.Request(f"{SIM_URL}{path}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.status, json.loads(answer.read() or b"null")


def pay_at_simulator(out_trade_no):
    """The buyer pays through the simulator's control API."""
    return control(f"/sim/trades/{out_trade_no}/pay")[0]


class NotifyReceiver:
    """A tiny merchant endpoint: keeps each notify's headers and raw body, answers 204."""

    def __init__(self):
        received = self.received = queue.Queue()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                received.put((self.headers, self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *arguments):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"

    def next(self, timeout_secs=15):
        return self.received.get(timeout=timeout_secs)

    def stop(self):
        self.server.shutdown()


def unique(prefix):
    return f"{prefix}{time.time_ns()}"
