//! The OpenAPI document is generated from the handlers; the committed copy in
//! `docs/openapi.json` must match it, so that a change to the API shows up in review. After an
//! intended change: `cargo run -p mideng-cli -- openapi > docs/openapi.json`.

use utoipa::OpenApi;

#[test]
fn the_committed_document_matches_the_code() {
    let generated = mideng_pay::api::ApiDoc::openapi()
        .to_pretty_json()
        .expect("renders");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed.trim_end() == generated.trim_end(),
        "{} is out of date: run `cargo run -p mideng-cli -- openapi > docs/openapi.json`",
        path.display()
    );
    let document: serde_json::Value = serde_json::from_str(&generated).expect("JSON");
    for path in [
        "/v1/tokens",
        "/v1/orders",
        "/v1/orders/{order_id}",
        "/v1/orders/{order_id}/transitions",
        "/v1/orders/{order_id}/payments",
        "/v1/payments/{payment_no}",
        "/v1/payments/{payment_no}/close",
        "/v1/channels/alipay/notify",
        "/v1/channels/wechat/notify",
        "/v1/wallets/{user_id}/credit",
        "/v1/wallets/{user_id}/deduct",
        "/v1/wallets/{user_id}",
        "/v1/idempotency-keys/{key}",
    ] {
        assert!(document["paths"][path].is_object(), "{path} is documented");
    }
}
