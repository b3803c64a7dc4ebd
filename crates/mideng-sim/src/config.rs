//! The simulator's identity and keys: which merchant it serves on each channel, which keys
//! verify that merchant's requests, and which keys the simulated channels sign with.
//!
//! The merchant's private keys never enter the simulator (it only verifies); the channel's
//! private keys and the WeChat Pay API v3 key never leave it, and no `Debug` output shows them.

use mideng_channel::keys::{PrivateKey, PublicKey, random_nonce};

use crate::SimError;
use crate::limits::CLOCK_SPEED_MAX;

/// The example Alipay partner id of generated configurations.
pub const ALIPAY_SELLER_ID: &str = "2088000000000088";
/// Length of the WeChat Pay API v3 key: it is the AES-256 key, so exactly 32 bytes.
const API_V3_KEY_BYTES: usize = 32;

/// Everything the simulated channels need to know about themselves and their one merchant.
#[derive(Clone)]
pub struct SimConfig {
    /// The merchant's Alipay app id; requests and notifies carry it.
    pub alipay_app_id: String,
    /// The merchant's Alipay partner id (`2088…`), sent as `seller_id` in notifies.
    pub alipay_seller_id: String,
    /// Verifies the merchant's Alipay requests.
    pub alipay_merchant_public_key: PublicKey,
    /// The gateway's key: signs Alipay responses and notifies.
    pub alipay_gateway_key: PrivateKey,
    /// The merchant id on WeChat Pay.
    pub wechat_mchid: String,
    /// The app id bound to the WeChat Pay merchant.
    pub wechat_appid: String,
    /// Verifies the merchant's WeChat Pay `Authorization` signatures.
    pub wechat_merchant_public_key: PublicKey,
    /// Serial number of the merchant's certificate; the `Authorization` header must name it.
    pub wechat_merchant_serial: String,
    /// The platform's key: signs WeChat Pay responses and notifies.
    pub wechat_platform_key: PrivateKey,
    /// Serial number of the platform certificate, sent as `Wechatpay-Serial`.
    pub wechat_platform_serial: String,
    /// The API v3 key that encrypts notification resources; exactly 32 bytes.
    pub wechat_api_v3_key: String,
    /// Channel seconds per real second (1 = real time; 600 = ten channel minutes a second).
    pub clock_speed: u32,
}

impl std::fmt::Debug for SimConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SimConfig")
            .field("alipay_app_id", &self.alipay_app_id)
            .field("alipay_seller_id", &self.alipay_seller_id)
            .field("alipay_gateway_key", &self.alipay_gateway_key)
            .field("wechat_mchid", &self.wechat_mchid)
            .field("wechat_appid", &self.wechat_appid)
            .field("wechat_merchant_serial", &self.wechat_merchant_serial)
            .field("wechat_platform_key", &self.wechat_platform_key)
            .field("wechat_platform_serial", &self.wechat_platform_serial)
            .field("wechat_api_v3_key", &"redacted")
            .field("clock_speed", &self.clock_speed)
            .finish_non_exhaustive()
    }
}

/// The merchant's private keys that [`SimConfig::generate`] made, to hand to the service that
/// plays the merchant.
#[derive(Clone, Debug)]
pub struct MerchantKeys {
    /// Signs the merchant's Alipay requests.
    pub alipay_private: PrivateKey,
    /// Signs the merchant's WeChat Pay requests.
    pub wechat_private: PrivateKey,
}

impl SimConfig {
    /// A configuration around keys the caller brings: `merchant` signs for the merchant on both
    /// channels, `channel` for both gateways; fixed example ids and serials, a fixed API v3 key
    /// and a real-time clock. For tests and tools that load fixed keys (generating RSA keys is
    /// slow); never for anything facing real money.
    pub fn with_keys(merchant: PrivateKey, channel: PrivateKey) -> (SimConfig, MerchantKeys) {
        let config = SimConfig {
            alipay_app_id: "2021000000000001".to_owned(),
            alipay_seller_id: ALIPAY_SELLER_ID.to_owned(),
            alipay_merchant_public_key: merchant.public_key(),
            alipay_gateway_key: channel.clone(),
            wechat_mchid: "1230000109".to_owned(),
            wechat_appid: "wxd678efh567hg6787".to_owned(),
            wechat_merchant_public_key: merchant.public_key(),
            wechat_merchant_serial: "5157F09EFDC096DE15EBE81A47057A7232F1B8E1".to_owned(),
            wechat_platform_key: channel,
            wechat_platform_serial: "PLATFORM0000000000000000000000000000000001".to_owned(),
            wechat_api_v3_key: "0123456789abcdefghijklmnopqrstuv".to_owned(),
            clock_speed: 1,
        };
        let keys = MerchantKeys {
            alipay_private: merchant.clone(),
            wechat_private: merchant,
        };
        (config, keys)
    }

    /// A configuration with fresh 2048-bit keys for both channels and both sides, fixed
    /// example ids, a random API v3 key and a real-time clock: for running the simulator on its
    /// own. Returns the merchant's private keys alongside. Key generation takes a while (four
    /// RSA keys), so tests should load fixed keys instead.
    pub fn generate() -> Result<(SimConfig, MerchantKeys), SimError> {
        // Four independent keys: generate them on four threads, since each takes long enough
        // to notice on a small machine.
        let keys: Vec<Result<PrivateKey, _>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4).map(|_| scope.spawn(PrivateKey::generate)).collect();
            workers
                .into_iter()
                .map(|worker| {
                    worker
                        .join()
                        .unwrap_or(Err(mideng_channel::keys::KeyError::Rsa))
                })
                .collect()
        });
        let mut keys = keys.into_iter();
        let mut next_key = || -> Result<PrivateKey, SimError> {
            keys.next()
                .ok_or(SimError::KeyGeneration)?
                .map_err(|_| SimError::KeyGeneration)
        };
        let alipay_merchant = next_key()?;
        let alipay_gateway = next_key()?;
        let wechat_merchant = next_key()?;
        let wechat_platform = next_key()?;
        let config = SimConfig {
            alipay_app_id: "2021000000000001".to_owned(),
            alipay_seller_id: ALIPAY_SELLER_ID.to_owned(),
            alipay_merchant_public_key: alipay_merchant.public_key(),
            alipay_gateway_key: alipay_gateway,
            wechat_mchid: "1230000109".to_owned(),
            wechat_appid: "wxd678efh567hg6787".to_owned(),
            wechat_merchant_public_key: wechat_merchant.public_key(),
            wechat_merchant_serial: random_nonce(40),
            wechat_platform_key: wechat_platform,
            wechat_platform_serial: random_nonce(40),
            wechat_api_v3_key: random_nonce(API_V3_KEY_BYTES),
            clock_speed: 1,
        };
        let merchant = MerchantKeys {
            alipay_private: alipay_merchant,
            wechat_private: wechat_merchant,
        };
        Ok((config, merchant))
    }

    /// Checks everything that would otherwise fail later, at a worse moment.
    pub(crate) fn validate(&self) -> Result<(), SimError> {
        let invalid = |reason: &'static str| Err(SimError::InvalidConfig(reason));
        if self.wechat_api_v3_key.len() != API_V3_KEY_BYTES {
            return invalid("wechat_api_v3_key must be exactly 32 bytes");
        }
        if self.clock_speed == 0 || self.clock_speed > CLOCK_SPEED_MAX {
            return invalid("clock_speed must be 1 to 1000000");
        }
        // These travel in headers, form fields and the Authorization header's quoted values:
        // keep them to visible ASCII without quotes or commas so that every encoding is exact.
        let identifier = |text: &str| {
            !text.is_empty()
                && text.len() <= 64
                && text
                    .bytes()
                    .all(|byte| byte.is_ascii_graphic() && !matches!(byte, b'"' | b',' | b'\\'))
        };
        if !identifier(&self.alipay_app_id) {
            return invalid("alipay_app_id must be 1 to 64 visible ASCII characters");
        }
        if !identifier(&self.alipay_seller_id) {
            return invalid("alipay_seller_id must be 1 to 64 visible ASCII characters");
        }
        if !identifier(&self.wechat_mchid) {
            return invalid("wechat_mchid must be 1 to 64 visible ASCII characters");
        }
        if !identifier(&self.wechat_appid) {
            return invalid("wechat_appid must be 1 to 64 visible ASCII characters");
        }
        if !identifier(&self.wechat_merchant_serial) {
            return invalid("wechat_merchant_serial must be 1 to 64 visible ASCII characters");
        }
        if !identifier(&self.wechat_platform_serial) {
            return invalid("wechat_platform_serial must be 1 to 64 visible ASCII characters");
        }
        Ok(())
    }
}

/// Merchant-side adapters configured against a simulator at `sim_base_url` (e.g.
/// `http://127.0.0.1:8090`), sending notifies to the service at `service_base_url`: what the
/// embedded service and the tests use instead of real channel credentials.
pub fn merchant_channels(
    config: &SimConfig,
    merchant: &MerchantKeys,
    sim_base_url: &str,
    service_base_url: &str,
) -> Result<
    (
        mideng_channel::adapter::alipay::AlipayChannel,
        mideng_channel::adapter::wechat::WechatChannel,
    ),
    mideng_channel::adapter::ChannelError,
> {
    use mideng_channel::adapter::alipay::{AlipayChannel, AlipayConfig};
    use mideng_channel::adapter::wechat::{WechatChannel, WechatConfig};
    let sim = sim_base_url.trim_end_matches('/');
    let service = service_base_url.trim_end_matches('/');
    let alipay = AlipayChannel::new(AlipayConfig {
        gateway_url: format!("{sim}{}", mideng_channel::alipay::GATEWAY_PATH),
        app_id: config.alipay_app_id.clone(),
        // Set, so that the service's seller check meets every simulated notify.
        seller_id: Some(config.alipay_seller_id.clone()),
        merchant_key: merchant.alipay_private.clone(),
        gateway_public_key: config.alipay_gateway_key.public_key(),
        notify_url: format!("{service}/v1/channels/alipay/notify"),
    })?;
    let wechat = WechatChannel::new(WechatConfig {
        base_url: sim.to_owned(),
        mchid: config.wechat_mchid.clone(),
        appid: config.wechat_appid.clone(),
        merchant_serial: config.wechat_merchant_serial.clone(),
        merchant_key: merchant.wechat_private.clone(),
        platform_public_key: config.wechat_platform_key.public_key(),
        platform_serial: config.wechat_platform_serial.clone(),
        api_v3_key: config.wechat_api_v3_key.clone(),
        notify_url: format!("{service}/v1/channels/wechat/notify"),
    })?;
    Ok((alipay, wechat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_configurations_are_valid_and_keep_secrets_out_of_debug() {
        let started = std::time::Instant::now();
        let (config, merchant) = SimConfig::generate().expect("generate");
        eprintln!("generated four keys in {:?}", started.elapsed());
        assert!(config.validate().is_ok());
        assert_eq!(
            config.alipay_merchant_public_key,
            merchant.alipay_private.public_key()
        );
        assert_eq!(
            config.wechat_merchant_public_key,
            merchant.wechat_private.public_key()
        );
        let printed = format!("{config:?} {merchant:?}");
        assert!(!printed.contains(&config.wechat_api_v3_key));
        assert!(printed.contains("redacted"));
    }

    #[test]
    fn an_api_v3_key_of_the_wrong_length_is_refused() {
        let (mut config, _) = SimConfig::generate().expect("generate");
        config.wechat_api_v3_key = "short".to_owned();
        assert!(matches!(config.validate(), Err(SimError::InvalidConfig(_))));
        config.wechat_api_v3_key = "0123456789abcdefghijklmnopqrstuv".to_owned();
        config.clock_speed = 0;
        assert!(config.validate().is_err());
    }
}
