//! What the storm's and the bench's tests share.

use mideng_channel::keys::PrivateKey;
use mideng_sim::{MerchantKeys, SimConfig};

fn fixture(name: &str) -> PrivateKey {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mideng-channel/tests/fixtures")
        .join(name);
    let pem = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    PrivateKey::from_pem(&pem).expect("fixture key")
}

/// The simulator's identity from the fixture keys (generating RSA keys would take longer than
/// a short storm).
pub(crate) fn identity() -> (SimConfig, MerchantKeys) {
    SimConfig::with_keys(
        fixture("merchant-private.pem"),
        fixture("channel-private.pem"),
    )
}
