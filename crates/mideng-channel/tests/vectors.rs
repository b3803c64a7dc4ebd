//! The protocol code against vectors computed outside it (tests/fixtures/make-vectors.sh:
//! sign strings from the documented rules in Python, signatures by the openssl command line,
//! AES-256-GCM by Python's `cryptography`). PKCS#1 v1.5 signatures are deterministic, so ours
//! must equal openssl's byte for byte.

use mideng_channel::keys::{PrivateKey, PublicKey, aes_gcm_decrypt, aes_gcm_encrypt};
use mideng_channel::{alipay, wechat};

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn merchant() -> (PrivateKey, PublicKey) {
    (
        PrivateKey::from_pem(&fixture("merchant-private.pem")).expect("merchant key"),
        PublicKey::from_pem(&fixture("merchant-public.pem")).expect("merchant public key"),
    )
}

#[test]
fn alipay_request_sign_content_and_signature_match_openssl() {
    let biz_content =
        r#"{"out_trade_no":"P20261129000001","total_amount":"460.00","subject":"订单 1001"}"#;
    let params = [
        ("app_id", "2021000000000001"),
        ("method", "alipay.trade.precreate"),
        ("format", "JSON"),
        ("charset", "utf-8"),
        ("sign_type", "RSA2"),
        ("timestamp", "2026-11-29 12:00:00"),
        ("version", "1.0"),
        (
            "notify_url",
            "http://127.0.0.1:8080/v1/channels/alipay/notify",
        ),
        ("app_auth_token", ""),
        ("biz_content", biz_content),
        ("sign", "ignored: never part of the content"),
    ];
    let content = alipay::request_sign_content(params);
    assert_eq!(content, fixture("alipay-request.sign-content"));
    let (private, public) = merchant();
    let signature = private.sign(content.as_bytes()).expect("sign");
    assert_eq!(
        signature,
        fixture("alipay-request.sign"),
        "same signature as openssl"
    );
    assert!(public.verify(content.as_bytes(), &fixture("alipay-request.sign")));
    assert!(
        !public.verify(content.replace("460.00", "461.00").as_bytes(), &signature),
        "tampered content fails"
    );
}

#[test]
fn wechat_request_message_and_signature_match_openssl() {
    let body = r#"{"appid":"wxd678efh567hg6787","mchid":"1230000109","description":"订单 1001","out_trade_no":"P20261129000001","notify_url":"http://127.0.0.1:8080/v1/channels/wechat/notify","amount":{"total":46000,"currency":"CNY"}}"#;
    let message = wechat::request_message(
        "POST",
        "/v3/pay/transactions/native",
        1_764_417_600,
        "5K8264ILTKCH16CQ2502SI8ZNMTM67VS",
        body,
    );
    assert_eq!(message, fixture("wechat-request.message"));
    let (private, public) = merchant();
    assert_eq!(
        private.sign(message.as_bytes()).expect("sign"),
        fixture("wechat-request.sign")
    );
    assert!(public.verify(message.as_bytes(), &fixture("wechat-request.sign")));
}

#[test]
fn wechat_notify_signature_verifies_and_the_resource_decrypts_like_python() {
    let body = fixture("wechat-notify.body");
    let message = wechat::notify_message("1764417901", "NONCEXYZ123", &body);
    assert_eq!(message, fixture("wechat-notify.message"));
    let platform = PublicKey::from_pem(&fixture("channel-public.pem")).expect("platform key");
    let signature = fixture("wechat-notify.sign");
    assert!(platform.verify(message.as_bytes(), &signature));
    assert!(
        !platform.verify(
            message
                .replace("EV-2026112912050001", "EV-2026112912050002")
                .as_bytes(),
            &signature
        ),
        "tampered body fails"
    );
    let probe = format!("{}{signature}", wechat::SIGNTEST_PREFIX);
    assert!(
        !platform.verify(message.as_bytes(), &probe),
        "a SIGNTEST probe never verifies"
    );

    let notification: wechat::Notification = serde_json::from_str(&body).expect("notification");
    let key = b"0123456789abcdefghijklmnopqrstuv";
    let resource = &notification.resource;
    let plaintext = aes_gcm_decrypt(
        key,
        resource.nonce.as_bytes(),
        resource.associated_data.as_bytes(),
        &resource.ciphertext,
    )
    .expect("decrypts");
    assert_eq!(
        String::from_utf8(plaintext.clone()).expect("utf-8"),
        fixture("wechat-notify.plaintext")
    );
    let transaction: wechat::Transaction = serde_json::from_slice(&plaintext).expect("transaction");
    assert_eq!(
        (transaction.out_trade_no.as_str(), transaction.amount.total),
        ("P20261129000001", 46000)
    );
    let again = aes_gcm_encrypt(
        key,
        resource.nonce.as_bytes(),
        resource.associated_data.as_bytes(),
        &plaintext,
    )
    .expect("encrypt");
    assert_eq!(
        again, resource.ciphertext,
        "same ciphertext as Python's AESGCM"
    );
    assert!(
        aes_gcm_decrypt(
            b"another key of thirty-two bytes!",
            resource.nonce.as_bytes(),
            b"transaction",
            &resource.ciphertext
        )
        .is_err()
    );
    assert!(
        aes_gcm_decrypt(
            key,
            resource.nonce.as_bytes(),
            b"other",
            &resource.ciphertext
        )
        .is_err(),
        "associated data is bound"
    );
}

#[test]
fn keys_round_trip_through_pem_and_bad_pems_are_refused() {
    let (private, public) = merchant();
    let reread = PrivateKey::from_pem(&private.to_pem().expect("pem")).expect("reread");
    assert_eq!(reread.public_key(), public);
    assert_eq!(
        PublicKey::from_pem(&public.to_pem().expect("pem")).expect("reread"),
        public
    );
    assert!(
        PrivateKey::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
            .is_err()
    );
    assert!(PublicKey::from_pem("not a key").is_err());
    assert!(
        !format!("{private:?}").contains("BEGIN"),
        "private keys never print"
    );
}
