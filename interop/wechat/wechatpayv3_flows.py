"""Drives the simulator's WeChat Pay gateway with wechatpayv3's own code, in the simulator's
mode: public-key mode (the platform key and its PUB_KEY_ID_ given), or certificate mode (the
SDK's default: it downloads and decrypts the platform certificates from /v3/certificates).

Native create, query by out-trade-no and by transaction id, close, the day's trade and
fund-flow bills (downloaded, the SHA-1 checked), with the SDK's answer verification on (a
client holding the wrong key must fail); then the SDK's own notify verification and AES-GCM
decryption of a notify the simulator delivered.
"""

import gzip
import hashlib
import json
import tempfile
import time

from wechatpayv3 import WeChatPay, WeChatPayType

from common import (IDENTITY, NotifyReceiver, check, control, finish, pay_at_simulator, read,
                    unique, SIM_URL)


CERTIFICATE_MODE = IDENTITY.get("wechat_platform_mode") == "certificate"
MODE = "certificate mode" if CERTIFICATE_MODE else "public-key mode"


def point_at_simulator():
    """The SDK has no setting for its host: it assigns `_gate_way` in its core's constructor,
    which in certificate mode downloads the certificates at once (`_init_certificates`). Set
    the host there and after construction; nothing else of the SDK is touched."""
    import wechatpayv3.core as core

    download = core.Core._init_certificates

    def init_certificates(self):
        self._gate_way = SIM_URL
        download(self)

    core.Core._init_certificates = init_certificates


def client(notify_url, platform_public_key=None, apiv3_key=None):
    if not CERTIFICATE_MODE:
        settings = {"public_key": platform_public_key or read("wechat-platform-public.pem"),
                    "public_key_id": IDENTITY["wechat_platform_serial"]}
    else:
        settings = {"cert_dir": tempfile.mkdtemp(prefix="wechatpayv3-certificates-")}
    wxpay = WeChatPay(
        wechatpay_type=WeChatPayType.NATIVE,
        mchid=IDENTITY["wechat_mchid"],
        private_key=read("wechat-merchant-private.pem"),
        cert_serial_no=IDENTITY["wechat_merchant_serial"],
        appid=IDENTITY["wechat_appid"],
        apiv3_key=apiv3_key or IDENTITY["wechat_api_v3_key"],
        notify_url=notify_url,
        timeout=(5, 10),
        **settings,
    )
    wxpay._core._gate_way = SIM_URL
    return wxpay


def main():
    point_at_simulator()
    receiver = NotifyReceiver()
    wxpay = client(receiver.url)
    print(f"wechatpayv3 ({MODE}): native create, query, pay, notify, query by id")
    paid_no = unique("PY")
    code, message = wxpay.pay(
        description="mideng 互操作 · 二维码", out_trade_no=paid_no, amount={"total": 101}
    )
    check(code == 200, f"create answers 200 with a verified signature ({code} {message})")
    check(json.loads(message).get("code_url", "").startswith("weixin://"), "create gives a code_url")
    code, message = wxpay.query(out_trade_no=paid_no)
    check(code == 200 and json.loads(message)["trade_state"] == "NOTPAY",
          f"query by out_trade_no: NOTPAY ({code})")

    check(pay_at_simulator(paid_no) == 200, "the buyer pays at the simulator")
    headers, body = receiver.next()
    check(headers.get("Request-ID", "") != "", "the notify carries a Request-ID")
    notification = wxpay.callback(headers, body)
    check(notification is not None, "the SDK verifies and decrypts the delivered notify")
    transaction = (notification or {}).get("resource", {})
    check(transaction.get("out_trade_no") == paid_no and transaction.get("trade_state") == "SUCCESS",
          "the notify says the trade was paid")
    check(transaction.get("amount", {}).get("total") == 101, "the notify has the amount")
    check(notification is not None and notification.get("event_type") == "TRANSACTION.SUCCESS",
          "the event type is TRANSACTION.SUCCESS")

    transaction_id = transaction.get("transaction_id", "")
    code, message = wxpay.query(transaction_id=transaction_id)
    answer = json.loads(message) if code == 200 else {}
    check(code == 200 and answer.get("out_trade_no") == paid_no
          and answer.get("trade_state") == "SUCCESS",
          f"query by transaction_id finds the paid trade ({code})")

    code, message = wxpay.close(out_trade_no=paid_no)
    check(code == 400 and json.loads(message).get("code") == "ORDERPAID",
          f"closing a paid trade is refused with ORDERPAID ({code})")

    print(f"wechatpayv3 ({MODE}): the day's trade bill, gzip, its SHA-1 checked")
    day = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 8 * 3600))
    code, message = wxpay.trade_bill(bill_date=day)
    check(code == 200, f"the trade bill answers 200 with a verified signature ({code} {message})")
    answer = json.loads(message) if code == 200 else {}
    check(answer.get("hash_type") == "SHA1", "the answer names its hash")
    code, content = wxpay.download_bill(answer.get("download_url", ""))
    check(code == 200 and isinstance(content, bytes), f"the SDK downloads the file ({code})")
    bill = gzip.decompress(content) if code == 200 else b""
    check(hashlib.sha1(bill).hexdigest() == answer.get("hash_value"),
          "the uncompressed file has the announced SHA-1")
    text = bill.decode("utf-8", errors="replace")
    check(f"`{paid_no}" in text and "`SUCCESS" in text, "the bill lists the paid trade")
    check("总交易单数,应结订单总金额,退款总金额" in text, "with its summary")
    code, message = wxpay.fundflow_bill(bill_date=day)
    check(code == 200 and json.loads(message).get("download_url"),
          f"the fund-flow bill answers too ({code})")

    print(f"wechatpayv3 ({MODE}): native create and close")
    closed_no = unique("PY")
    code, _ = wxpay.pay(description="mideng interop", out_trade_no=closed_no, amount={"total": 1})
    check(code == 200, "a second create")
    code, message = wxpay.close(out_trade_no=closed_no)
    check(code == 204, f"close answers 204 ({code} {message!r})")
    code, message = wxpay.query(out_trade_no=closed_no)
    check(code == 200 and json.loads(message)["trade_state"] == "CLOSED", "the closed trade queries CLOSED")
    code, message = wxpay.query(out_trade_no=unique("NEVER"))
    check(code == 404 and json.loads(message).get("code") == "ORDER_NOT_EXIST",
          f"an unknown trade is 404 ORDER_NOT_EXIST ({code})")

    if CERTIFICATE_MODE:
        print(f"wechatpayv3 ({MODE}): the platform renews its certificate")
        status, rotated = control("/sim/wechat/platform/rotate")
        check(status == 200, f"the simulator rotates its platform certificate ({status})")
        code, message = wxpay.query(out_trade_no=paid_no)
        check(code == 200 and json.loads(message)["trade_state"] == "SUCCESS",
              "an answer under the new serial: the SDK refreshes its certificates and verifies it")
        renewed_no = unique("PY")
        code, _ = wxpay.pay(description="mideng 续期", out_trade_no=renewed_no, amount={"total": 7})
        check(code == 200, "a create after the rotation")
        pay_at_simulator(renewed_no)
        headers, body = receiver.next()
        check(headers.get("Wechatpay-Serial") == rotated["serial_no"],
              "the next notify is signed under the new serial")
        notification = wxpay.callback(headers, body)
        check(notification is not None
              and notification["resource"]["out_trade_no"] == renewed_no,
              "the SDK verifies and decrypts it")

    print(f"wechatpayv3 ({MODE}): answer verification is really on")
    if CERTIFICATE_MODE:
        try:
            client(receiver.url, apiv3_key="0" * 32)
            check(False, "a client with the wrong API v3 key cannot open the certificates")
        except Exception as error:  # the SDK raises a bare Exception
            check("No wechatpay platform certificate" in str(error),
                  f"a client with the wrong API v3 key cannot open the certificates ({error})")
    else:
        wrong = client(receiver.url, platform_public_key=read("wechat-merchant-public.pem"))
        try:
            wrong.query(out_trade_no=paid_no)
            check(False, "a client with the wrong platform key refuses the answer")
        except Exception as error:  # the SDK raises a bare Exception
            check("verify the signature" in str(error),
                  f"a client with the wrong platform key refuses the answer ({error})")
    receiver.stop()
    finish(f"wechatpayv3 ({MODE})")


if __name__ == "__main__":
    main()
