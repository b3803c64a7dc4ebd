"""Drives the simulator's WeChat Pay gateway with wechatpayv3's own code, in public-key mode.

Native create, query by out-trade-no and by transaction id, close, with the SDK's answer
verification on (a client holding the wrong platform key must fail); then the SDK's own notify
verification and AES-GCM decryption of a notify the simulator delivered.
"""

import json

from wechatpayv3 import WeChatPay, WeChatPayType

from common import (IDENTITY, NotifyReceiver, check, finish, pay_at_simulator, read, unique,
                    SIM_URL)


def client(platform_public_key, notify_url):
    wxpay = WeChatPay(
        wechatpay_type=WeChatPayType.NATIVE,
        mchid=IDENTITY["wechat_mchid"],
        private_key=read("wechat-merchant-private.pem"),
        cert_serial_no=IDENTITY["wechat_merchant_serial"],
        appid=IDENTITY["wechat_appid"],
        apiv3_key=IDENTITY["wechat_api_v3_key"],
        notify_url=notify_url,
        public_key=platform_public_key,
        public_key_id=IDENTITY["wechat_platform_serial"],
        timeout=(5, 10),
    )
    # The SDK has no setting for its host; this attribute is where it keeps it.
    wxpay._core._gate_way = SIM_URL
    return wxpay


def main():
    receiver = NotifyReceiver()
    wxpay = client(read("wechat-platform-public.pem"), receiver.url)
    print("wechatpayv3: native create, query, pay, notify, query by id")
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

    print("wechatpayv3: native create and close")
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

    print("wechatpayv3: answer verification is really on")
    wrong = client(read("wechat-merchant-public.pem"), receiver.url)
    try:
        wrong.query(out_trade_no=paid_no)
        check(False, "a client with the wrong platform key refuses the answer")
    except Exception as error:  # the SDK raises a bare Exception
        check("verify the signature" in str(error),
              f"a client with the wrong platform key refuses the answer ({error})")
    receiver.stop()
    finish("wechatpayv3")


if __name__ == "__main__":
    main()
