"""Builds a WeChat Pay notify the way the platform does, by wechatpayv3's rule, for the
service's adapter to verify (crates/mideng-channel/tests/sdk_notifies.rs).

The body is sent as UTF-8 JSON with non-ASCII text (summary, trade_state_desc) and an empty
field (attach); the resource is AES-256-GCM encrypted with the API v3 key; the headers are
signed with the platform key over the SDK's message (wechatpayv3.utils.rsa_sign over
"timestamp\\nnonce\\nbody\\n", the string its rsa_verify checks). Before writing, the SDK's
own callback() must accept and decrypt it.

Usage: build_notify.py OUT_DIR (writes headers.json and body.json). The keys and identity
are the channel crate's test fixtures, so the adapter test can verify with them.
"""

import base64
import json
import os
import sys
import time

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from wechatpayv3 import WeChatPay, WeChatPayType
from wechatpayv3.utils import load_private_key, rsa_sign

FIXTURES = os.path.join(os.path.dirname(__file__), "../../crates/mideng-channel/tests/fixtures")
API_V3_KEY = "0123456789abcdefghijklmnopqrstuv"
PLATFORM_SERIAL = "PUB_KEY_ID_0112340000000000000000000000000001"
MERCHANT_SERIAL = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as file:
        return file.read()


def main(out_dir):
    transaction = {
        "mchid": "1230000109", "appid": "wxd678efh567hg6787",
        "out_trade_no": "P20261201000007", "transaction_id": "4200000000202612010000000007",
        "trade_type": "NATIVE", "trade_state": "SUCCESS", "trade_state_desc": "支付成功",
        "bank_type": "OTHERS", "attach": "", "success_time": "2026-12-01T12:05:00+08:00",
        "payer": {"openid": "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},
        "amount": {"total": 4600, "payer_total": 4600, "currency": "CNY", "payer_currency": "CNY"},
    }
    nonce = "mIdEnGnOnCe1"
    ciphertext = AESGCM(API_V3_KEY.encode()).encrypt(
        nonce.encode(), json.dumps(transaction, ensure_ascii=False).encode("utf-8"), b"transaction"
    )
    body = json.dumps({
        "id": "EV-2026120112050007", "create_time": "2026-12-01T12:05:01+08:00",
        "resource_type": "encrypt-resource", "event_type": "TRANSACTION.SUCCESS",
        "summary": "支付成功",
        "resource": {
            "original_type": "transaction", "algorithm": "AEAD_AES_256_GCM",
            "ciphertext": base64.b64encode(ciphertext).decode(), "associated_data": "transaction",
            "nonce": nonce,
        },
    }, ensure_ascii=False)
    timestamp = str(int(time.time()))
    header_nonce = "5K8264ILTKCH16CQ2502SI8ZNMTM67VS"
    signature = rsa_sign(load_private_key(fixture("channel-private.pem")),
                         f"{timestamp}\n{header_nonce}\n{body}\n")
    headers = [
        ["Wechatpay-Timestamp", timestamp], ["Wechatpay-Nonce", header_nonce],
        ["Wechatpay-Signature", signature], ["Wechatpay-Serial", PLATFORM_SERIAL],
        ["Wechatpay-Signature-Type", "WECHATPAY2-SHA256-RSA2048"],
        ["Request-ID", "08F78BB5AF0610D302108BA5A4C20618BEB3012800-0"],
    ]

    # The SDK itself must accept what it is about to hand to the adapter.
    sdk = WeChatPay(
        wechatpay_type=WeChatPayType.NATIVE, mchid="1230000109",
        private_key=fixture("merchant-private.pem"), cert_serial_no=MERCHANT_SERIAL,
        appid="wxd678efh567hg6787", apiv3_key=API_V3_KEY,
        public_key=fixture("channel-public.pem"), public_key_id=PLATFORM_SERIAL,
    )
    accepted = sdk.callback(dict(headers), body)
    if not accepted or accepted["resource"]["out_trade_no"] != transaction["out_trade_no"]:
        sys.exit("wechatpayv3 does not accept the notify it built")

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "headers.json"), "w", encoding="utf-8") as file:
        json.dump(headers, file, indent=1)
        file.write("\n")
    with open(os.path.join(out_dir, "body.json"), "wb") as file:
        file.write(body.encode("utf-8"))
    print(f"wechatpayv3: built a notify signed at {timestamp} into {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1])
