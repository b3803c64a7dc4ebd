"""Drives a running `mideng serve` through a webhook secret rotation and checks every message
with the official `standardwebhooks` Python library; writes each message, the secrets it was
checked under and the expected outcome for the Node library's check (verify.mjs).

    drive.py BASE SECRET_KEY PAGE_KEY PORT CASES_FILE

A receiver on 127.0.0.1:PORT answers every message 204 and keeps it. Three payments are paid
through the demo checkout: one before any rotation, one during a rotation's overlap (both
secrets must verify it) and one after a rotation without overlap (only the newest may).
"""

import http.server
import json
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

BASE, SECRET_KEY, PAGE_KEY, PORT, CASES_FILE = sys.argv[1:6]
RECEIVED = []
RECEIVED_LOCK = threading.Lock()


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length).decode("utf-8")
        headers = {name.lower(): value for name, value in self.headers.items()}
        with RECEIVED_LOCK:
            RECEIVED.append({"path": self.path, "headers": headers, "body": body})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def call(method, path, body=None, key=SECRET_KEY, headers=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + key)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            return response.status, (json.loads(text) if text else None), response.headers
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        return error.code, (json.loads(text) if text else None), error.headers


def expect(status, answer, wanted, what):
    if status != wanted:
        sys.exit(f"webhook-interop: {what}: {status} {answer}")


def paid_message():
    """Pays a new order as a checkout does: the merchant's server prices it (secret key) and
    hands the page its client secret, and the page pays it (publishable key and that secret);
    the receiver's message about it."""
    order_id = "interop-" + uuid.uuid4().hex[:16]
    status, answer, _ = call(
        "POST", "/v1/orders",
        {"order_id": order_id, "user_id": "interop", "amount": 100, "currency": "CNY"},
    )
    expect(status, answer, 201, "order")
    page = {"Mideng-Client-Secret": answer["client_secret"]}
    _, token, _ = call("POST", "/v1/tokens", {}, key=PAGE_KEY, headers=page)
    status, answer, _ = call(
        "POST", f"/v1/orders/{order_id}/payments", {"channel": "alipay"},
        key=PAGE_KEY, headers={"Idempotency-Token": token["token"], **page},
    )
    expect(status, answer, 201, "payment")
    number = answer["payment_no"]
    status, answer, _ = call("POST", f"/demo/payments/{number}/pay", {}, key=PAGE_KEY, headers=page)
    expect(status, answer, 202, "pay at the simulator")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with RECEIVED_LOCK:
            for message in RECEIVED:
                if json.loads(message["body"])["data"].get("payment_no") == number:
                    return message
        time.sleep(0.05)
    sys.exit(f"webhook-interop: no message about {number} within 30 s")


def verifies(secret, message):
    try:
        Webhook(secret).verify(message["body"], message["headers"])
        return True
    except WebhookVerificationError:
        return False


def rotate(key, valid_secs):
    status, answer, headers = call(
        "POST", f"/v1/webhook-endpoints/{ENDPOINT_ID}/rotate-secret",
        {"previous_secret_valid_secs": valid_secs}, headers={"Idempotency-Key": key},
    )
    expect(status, answer, 200, "rotation")
    return answer, headers


server = http.server.ThreadingHTTPServer(("127.0.0.1", int(PORT)), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()

status, endpoint, _ = call(
    "POST", "/v1/webhook-endpoints",
    {"url": f"http://127.0.0.1:{PORT}/hook", "events": ["payment.succeeded"]},
)
expect(status, endpoint, 201, "endpoint")
ENDPOINT_ID = endpoint["endpoint_id"]
stranger = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
cases = []


def check(stage, message, valid, invalid):
    for secret in valid + invalid:
        outcome = verifies(secret, message)
        if outcome != (secret in valid):
            sys.exit(f"webhook-interop: {stage}: the Python library says {outcome} for a secret")
        cases.append({"stage": stage, "secret": secret, "valid": secret in valid,
                      "headers": message["headers"], "body": message["body"]})


first = endpoint["secret"]
check("before a rotation", paid_message(), [first], [stranger])

key = str(uuid.uuid4())
rotated, _ = rotate(key, 3600)
again, headers = rotate(key, 3600)
if again["secret"] != rotated["secret"] or headers.get("Idempotent-Replayed") != "true":
    sys.exit("webhook-interop: a retried rotation made another secret")
second = rotated["secret"]
message = paid_message()
if len(message["headers"]["webhook-signature"].split(" ")) != 2:
    sys.exit("webhook-interop: a message during the overlap does not carry two signatures")
check("during the overlap", message, [first, second], [stranger])

rotated, _ = rotate(str(uuid.uuid4()), 0)
third = rotated["secret"]
check("after a rotation without overlap", paid_message(), [third], [first, second, stranger])

with open(CASES_FILE, "w") as out:
    json.dump(cases, out)
print(f"webhook-interop: the Python library checked {len(cases)} cases")
