"""Drives the channel simulator with python-alipay-sdk, using the SDK's own code: request
signing (sent as a GET query string, as the SDK always does), response verification
(`verified_sync_response`), the day's bill (`server_api`, then its zip) and notify
verification (`AliPay.verify`). Then builds a notify
the way the channel would (the SDK's sign-content rule: every field but `sign` and
`sign_type`, sorted, empty values kept), checks the SDK accepts it, and writes it for the
service's adapter to verify.

Environment: SIM_URL, SIM_DIR (the simulator's data directory), CHANNEL_PRIVATE_KEY and
CHANNEL_PUBLIC_KEY (PEM files the SDK-built notify is signed and checked with), NOTIFY_OUT.
Exits non-zero on the first failure.
"""

import io
import json
import os
import threading
import time
import urllib.parse
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from alipay import AliPay

SIM_URL = os.environ["SIM_URL"]
SIM_DIR = os.environ["SIM_DIR"]


def read(path):
    with open(path, encoding="utf-8") as file:
        return file.read()


identity = json.loads(read(os.path.join(SIM_DIR, "sim.json")))
received = []


class Receiver(BaseHTTPRequestHandler):
    """The merchant's notify receiver: keeps every form it is sent and answers `success`."""

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        received.append(self.rfile.read(length).decode("utf-8"))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"success")

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
notify_url = "http://127.0.0.1:{}/notify".format(server.server_address[1])


def sdk(private_key_path, public_key_path, app_id=identity["alipay_app_id"]):
    client = AliPay(
        appid=app_id,
        app_private_key_string=read(private_key_path),
        alipay_public_key_string=read(public_key_path),
        sign_type="RSA2",
    )
    # The SDK knows only the production and sandbox gateways; point it at the simulator.
    client._gateway = SIM_URL + "/gateway.do"
    return client


def control(path):
    request = urllib.request.Request(SIM_URL + path, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200, path


def next_notify(count):
    deadline = time.monotonic() + 15
    while len(received) < count:
        assert time.monotonic() < deadline, "a notify arrives within 15 s"
        time.sleep(0.05)
    return dict(urllib.parse.parse_qsl(received[count - 1], keep_blank_values=True))


def sdk_accepts(client, notify):
    data = dict(notify)
    signature = data.pop("sign")
    return client.verify(data, signature)


merchant = sdk(
    os.path.join(SIM_DIR, "alipay-merchant-private.pem"),
    os.path.join(SIM_DIR, "alipay-gateway-public.pem"),
)
suffix = format(int(time.time() * 1000), "x")
paid = "PY-PAID-" + suffix
closed = "PY-CLOSED-" + suffix

# precreate, query before the scan, pay, the notify, query, a refused close.
created = merchant.api_alipay_trade_precreate(
    subject="拿铁 latte", out_trade_no=paid, total_amount="66.60", notify_url=notify_url
)
assert created["code"] == "10000", created
assert created["qr_code"], created
early = merchant.api_alipay_trade_query(out_trade_no=paid)
assert early["sub_code"] == "ACQ.TRADE_NOT_EXIST", early
control("/sim/trades/{}/pay".format(paid))
notify = next_notify(1)
assert sdk_accepts(merchant, notify), "AliPay.verify accepts the notify"
assert notify["trade_status"] == "TRADE_SUCCESS", notify
assert notify["total_amount"] == "66.60", notify
assert notify["seller_id"] == identity["alipay_seller_id"], notify
assert not sdk_accepts(merchant, {**notify, "total_amount": "0.01"}), "a tampered notify fails"
query = merchant.api_alipay_trade_query(out_trade_no=paid)
assert query["trade_status"] == "TRADE_SUCCESS", query
assert query["trade_no"] == notify["trade_no"], query
refused = merchant.api_alipay_trade_close(out_trade_no=paid)
assert refused["sub_code"] == "ACQ.TRADE_STATUS_ERROR", refused

# precreate, scan, close, query, the TRADE_CLOSED notify.
merchant.api_alipay_trade_precreate(
    subject="close me", out_trade_no=closed, total_amount="1.00", notify_url=notify_url
)
control("/sim/trades/{}/scan".format(closed))
close = merchant.api_alipay_trade_close(out_trade_no=closed)
assert close["code"] == "10000", close
assert merchant.api_alipay_trade_query(out_trade_no=closed)["trade_status"] == "TRADE_CLOSED"
closed_notify = next_notify(2)
assert closed_notify["trade_status"] == "TRADE_CLOSED", closed_notify
assert sdk_accepts(merchant, closed_notify), "the close notify verifies"

# The day's bill through the SDK's generic verified call (it has no method of its own for it),
# then the zip it names: the GBK detail lists the paid trade and its totals.
day = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 8 * 3600))
bill = merchant.server_api(
    "alipay.data.dataservice.bill.downloadurl.query", {"bill_type": "trade", "bill_date": day}
)
assert bill["code"] == "10000", bill
with urllib.request.urlopen(bill["bill_download_url"], timeout=30) as download:
    archive = zipfile.ZipFile(io.BytesIO(download.read()))
texts = [archive.read(name).decode("gbk") for name in archive.namelist()]
detail = next((text for text in texts if "业务明细列表结束" in text), None)
assert detail is not None, "the zip holds the detail"
assert paid in detail and "66.60" in detail, "the detail lists the paid trade"
assert "#交易合计：" in detail, "with its totals"

# A wrongly signed answer is refused by the SDK: a verifier with another key.
stranger = sdk(
    os.path.join(SIM_DIR, "alipay-merchant-private.pem"), os.environ["CHANNEL_PUBLIC_KEY"]
)
try:
    stranger.api_alipay_trade_query(out_trade_no=paid)
except Exception as refusal:  # the SDK raises AliPayValidationError
    assert type(refusal).__name__ == "AliPayValidationError", refusal
else:
    raise AssertionError("an answer signed by another key is refused")

# A notify as the channel would sign it, with an empty and a non-ASCII field.
channel = sdk(
    os.environ["CHANNEL_PRIVATE_KEY"], os.environ["CHANNEL_PUBLIC_KEY"], "2021000000000001"
)
built = {
    "notify_time": "2026-11-29 12:05:01",
    "notify_type": "trade_status_sync",
    "notify_id": "sdkpython" + suffix,
    "app_id": "2021000000000001",
    "charset": "utf-8",
    "version": "1.0",
    "sign_type": "RSA2",
    "trade_no": "2026112922001400000000000003",
    "out_trade_no": "P20261129000003",
    "trade_status": "TRADE_SUCCESS",
    "total_amount": "460.00",
    "seller_id": "2088000000000001",
    "subject": "订单 – 咖啡 ☕",
    "passback_params": "",
    "gmt_payment": "2026-11-29 12:05:00",
}
unsigned = {key: value for key, value in built.items() if key not in ("sign", "sign_type")}
content = "&".join("{}={}".format(key, value) for key, value in channel._ordered_data(unsigned))
built["sign"] = channel._sign(content)
assert sdk_accepts(channel, built), "the SDK accepts the built notify"
with open(os.environ["NOTIFY_OUT"], "w", encoding="utf-8") as out:
    out.write(urllib.parse.urlencode(built))

server.shutdown()
print("python-alipay-sdk: precreate, query, close, the day's bill and notifies verified; wrote " + os.environ["NOTIFY_OUT"])
