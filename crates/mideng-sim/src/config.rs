//! The simulator's identity and keys: which merchant it serves on each channel, which keys
//! verify that merchant's requests, and which keys the simulated channels sign with.
//!
//! The merchant's private keys never enter the simulator (it only verifies); the channel's
//! private keys and the WeChat Pay API v3 key never leave it, and no `Debug` output shows them.

use mideng_channel::keys::{PrivateKey, PublicKey, random_characters, random_nonce};
use serde::{Deserialize, Serialize};

use crate::error::SimError;
use crate::limits::CLOCK_SPEED_MAX;

/// The example Alipay partner id of generated configurations.
pub const ALIPAY_SELLER_ID: &str = "2088000000000088";
/// Length of the WeChat Pay API v3 key: it is the AES-256 key, so exactly 32 bytes.
const API_V3_KEY_BYTES: usize = 32;

/// Digits of a WeChat Pay certificate serial: the certificate's serial number in upper-case
/// hex, 40 digits for the certificates WeChat Pay issues.
const CERTIFICATE_SERIAL_DIGITS: usize = 40;
/// What a public-key id starts with (`PUB_KEY_ID_0114232134912410000000000000000001`).
const PUBLIC_KEY_ID_PREFIX: &str = "PUB_KEY_ID_";
/// Digits after [`PUBLIC_KEY_ID_PREFIX`] in the ids WeChat Pay hands out.
const PUBLIC_KEY_ID_DIGITS: usize = 34;

/// How merchants learn the key that verifies the platform's signatures, which also decides the
/// form of `Wechatpay-Serial`.
///
/// WeChat Pay has given new merchants a platform **public key** since 2024, named by a
/// `PUB_KEY_ID_…` id and downloaded once from the merchant portal; older merchants verify with
/// platform **certificates** (40-hex-digit serials) fetched from `GET /v3/certificates`. The
/// simulator defaults to public-key mode, the one new integrations get and the one it serves
/// completely; in certificate mode it signs under a certificate-style serial.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WechatPlatformMode {
    /// `Wechatpay-Serial` is `PUB_KEY_ID_` and digits.
    #[default]
    PublicKey,
    /// `Wechatpay-Serial` is a certificate serial: 40 upper-case hex digits (the first 1 to 7,
    /// so that the serial fits in the certificate the simulator issues), and
    /// `GET /v3/certificates` serves that certificate.
    Certificate,
}

impl WechatPlatformMode {
    /// A fresh serial of this mode's form.
    pub fn random_serial(self) -> String {
        match self {
            Self::PublicKey => format!(
                "{PUBLIC_KEY_ID_PREFIX}{}",
                random_characters(b"0123456789", PUBLIC_KEY_ID_DIGITS)
            ),
            Self::Certificate => random_certificate_serial(),
        }
    }

    /// Whether `serial` has this mode's form.
    pub fn accepts_serial(self, serial: &str) -> bool {
        match self {
            Self::PublicKey => serial
                .strip_prefix(PUBLIC_KEY_ID_PREFIX)
                .is_some_and(|digits| {
                    (1..=64 - PUBLIC_KEY_ID_PREFIX.len()).contains(&digits.len())
                        && digits.bytes().all(|byte| byte.is_ascii_digit())
                }),
            Self::Certificate => is_platform_certificate_serial(serial),
        }
    }
}

/// A serial as WeChat Pay writes certificate serials: upper-case hex, 40 digits.
fn is_certificate_serial(serial: &str) -> bool {
    serial.len() == CERTIFICATE_SERIAL_DIGITS
        && serial
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'A'..=b'F').contains(&byte))
}

/// A serial the simulator can also put in an X.509 certificate: a positive number of at most
/// 20 octets (RFC 5280) without a leading zero digit, so its first hex digit is 1 to 7.
fn is_platform_certificate_serial(serial: &str) -> bool {
    is_certificate_serial(serial) && matches!(serial.as_bytes().first(), Some(b'1'..=b'7'))
}

/// A random certificate serial (the merchant's, or the platform's in certificate mode), which
/// fits in a certificate ([`is_platform_certificate_serial`]).
fn random_certificate_serial() -> String {
    format!(
        "{}{}",
        random_characters(b"1234567", 1),
        random_characters(b"0123456789ABCDEF", CERTIFICATE_SERIAL_DIGITS - 1)
    )
}

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
    /// Serial number of the merchant's certificate (40 upper-case hex digits); the
    /// `Authorization` header must name it.
    pub wechat_merchant_serial: String,
    /// The platform's key: signs WeChat Pay responses and notifies.
    pub wechat_platform_key: PrivateKey,
    /// Public-key or certificate mode: the form of [`SimConfig::wechat_platform_serial`].
    pub wechat_platform_mode: WechatPlatformMode,
    /// The platform's serial, sent as `Wechatpay-Serial`: its public-key id or its
    /// certificate's serial, as [`SimConfig::wechat_platform_mode`] says.
    pub wechat_platform_serial: String,
    /// The API v3 key that encrypts notification resources; exactly 32 bytes.
    pub wechat_api_v3_key: String,
    /// Channel seconds per real second (1 = real time; 600 = ten channel minutes a second).
    pub clock_speed: u32,
    /// Whether a day's bill is served while the day runs (for tests and storms that reconcile
    /// the day they made), rather than the next morning as the channels publish it.
    pub bills_as_the_day_runs: bool,
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
            .field("wechat_platform_mode", &self.wechat_platform_mode)
            .field("wechat_platform_serial", &self.wechat_platform_serial)
            .field("wechat_api_v3_key", &"redacted")
            .field("clock_speed", &self.clock_speed)
            .field("bills_as_the_day_runs", &self.bills_as_the_day_runs)
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
    /// channels, `channel` for both gateways; fixed example ids and serials (public-key mode),
    /// a fixed API v3 key and a real-time clock. For tests and tools that load fixed keys (generating RSA keys is
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
            wechat_platform_mode: WechatPlatformMode::PublicKey,
            wechat_platform_serial: "PUB_KEY_ID_0112340000000000000000000000000001".to_owned(),
            wechat_api_v3_key: "0123456789abcdefghijklmnopqrstuv".to_owned(),
            clock_speed: 1,
            bills_as_the_day_runs: false,
        };
        let keys = MerchantKeys {
            alipay_private: merchant.clone(),
            wechat_private: merchant,
        };
        (config, keys)
    }

    /// A configuration with fresh 2048-bit keys for both channels and both sides, fixed
    /// example ids, random serials (public-key mode), a random API v3 key and a real-time clock: for running the simulator on its
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
            wechat_merchant_serial: random_certificate_serial(),
            wechat_platform_key: wechat_platform,
            wechat_platform_mode: WechatPlatformMode::PublicKey,
            wechat_platform_serial: WechatPlatformMode::PublicKey.random_serial(),
            wechat_api_v3_key: random_nonce(API_V3_KEY_BYTES),
            clock_speed: 1,
            bills_as_the_day_runs: false,
        };
        let merchant = MerchantKeys {
            alipay_private: alipay_merchant,
            wechat_private: wechat_merchant,
        };
        Ok((config, merchant))
    }

    /// Checks everything that would otherwise fail later, at a worse moment.
    /// Replaces WeChat serials written in a form this version no longer accepts (identities
    /// written by older versions used 40 random `[0-9A-Z]` characters) with fresh ones of the
    /// right form; whether anything changed. Lets a data directory from an older version start.
    pub fn renew_outdated_serials(&mut self) -> bool {
        let mut changed = false;
        if !is_certificate_serial(&self.wechat_merchant_serial) {
            self.wechat_merchant_serial = random_certificate_serial();
            changed = true;
        }
        if !self
            .wechat_platform_mode
            .accepts_serial(&self.wechat_platform_serial)
        {
            self.wechat_platform_serial = self.wechat_platform_mode.random_serial();
            changed = true;
        }
        changed
    }

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
        // Serials in the real forms: the official SDKs look keys up by them, and some check
        // the form (a public key's id must start with PUB_KEY_ID_).
        if !is_certificate_serial(&self.wechat_merchant_serial) {
            return invalid("wechat_merchant_serial must be 40 upper-case hex digits");
        }
        if !self
            .wechat_platform_mode
            .accepts_serial(&self.wechat_platform_serial)
        {
            return invalid(match self.wechat_platform_mode {
                WechatPlatformMode::PublicKey => {
                    "wechat_platform_serial must be PUB_KEY_ID_ and digits in public-key mode"
                }
                WechatPlatformMode::Certificate => {
                    "wechat_platform_serial must be 40 upper-case hex digits, the first 1 to 7, in certificate mode"
                }
            });
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
    use mideng_channel::adapter::alipay::{AlipayApi, AlipayChannel, AlipayConfig};
    use mideng_channel::adapter::wechat::{
        CERTIFICATE_REFRESH_INTERVAL, PlatformKeySource, WechatChannel, WechatConfig,
    };
    let sim = sim_base_url.trim_end_matches('/');
    let service = service_base_url.trim_end_matches('/');
    let alipay = AlipayChannel::new(AlipayConfig {
        gateway_url: format!("{sim}{}", mideng_channel::alipay::GATEWAY_PATH),
        api: AlipayApi::Gateway,
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
        // The mode the simulator runs in: its one public key, or its certificates downloaded.
        platform_keys: match config.wechat_platform_mode {
            WechatPlatformMode::PublicKey => PlatformKeySource::PublicKey {
                key: config.wechat_platform_key.public_key(),
                serial: config.wechat_platform_serial.clone(),
            },
            WechatPlatformMode::Certificate => PlatformKeySource::Certificates {
                initial: None,
                refresh_interval: CERTIFICATE_REFRESH_INTERVAL,
            },
        },
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
    fn generated_serials_have_the_forms_wechat_pay_uses() {
        let (config, _) = SimConfig::generate().expect("generate");
        assert_eq!(config.wechat_platform_mode, WechatPlatformMode::PublicKey);
        assert_eq!(config.wechat_merchant_serial.len(), 40);
        assert!(
            config
                .wechat_merchant_serial
                .bytes()
                .all(|byte| byte.is_ascii_hexdigit() && !byte.is_ascii_lowercase()),
            "{}",
            config.wechat_merchant_serial
        );
        let digits = config
            .wechat_platform_serial
            .strip_prefix("PUB_KEY_ID_")
            .expect("a public-key id");
        assert!(digits.len() == 34 && digits.bytes().all(|byte| byte.is_ascii_digit()));
        let certificate = WechatPlatformMode::Certificate.random_serial();
        assert!(WechatPlatformMode::Certificate.accepts_serial(&certificate));
        assert!(!WechatPlatformMode::PublicKey.accepts_serial(&certificate));
        assert_ne!(certificate, WechatPlatformMode::Certificate.random_serial());
    }

    #[test]
    fn a_serial_of_the_wrong_form_for_its_mode_is_refused() {
        let (valid, _) = SimConfig::with_keys(
            PrivateKey::generate().expect("key"),
            PrivateKey::generate().expect("key"),
        );
        assert!(valid.validate().is_ok());
        let refused = |change: &dyn Fn(&mut SimConfig)| {
            let mut config = valid.clone();
            change(&mut config);
            matches!(config.validate(), Err(SimError::InvalidConfig(_)))
        };
        assert!(refused(
            &|config| config.wechat_platform_mode = WechatPlatformMode::Certificate
        ));
        assert!(refused(
            &|config| config.wechat_platform_serial = "PUB_KEY_ID_".to_owned()
        ));
        assert!(refused(
            &|config| config.wechat_platform_serial = "PUB_KEY_ID_12a4".to_owned()
        ));
        assert!(refused(&|config| {
            config.wechat_merchant_serial = "5157f09efdc096de15ebe81a47057a7232f1b8e1".to_owned();
        }));
        assert!(refused(
            &|config| config.wechat_merchant_serial = "ABC".to_owned()
        ));
        assert!(!refused(&|config| {
            config.wechat_platform_mode = WechatPlatformMode::Certificate;
            config.wechat_platform_serial = "7132D72A03E93CDDF8C03BBD1F37EEDF43F8E5E1".to_owned();
        }));
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
