//! `[channels]`: the channel configurations (deployment-wide, one per channel, shared by the
//! tenants) and the adapters built from them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mideng_channel::adapter::Channel;
use mideng_channel::adapter::alipay::{AlipayApi, AlipayChannel, AlipayConfig};
use mideng_channel::adapter::wechat::{
    CERTIFICATE_REFRESH_INTERVAL, PlatformKeySource, WechatChannel, WechatConfig,
};
use mideng_channel::keys::{PrivateKey, PublicKey};
use mideng_channel::platform_keys::parse_certificate_pem;
use serde::{Deserialize, Serialize};

use super::{ConfigError, ServeConfig};

impl ServeConfig {
    /// The adapters of the configured channels (keys read from their files).
    pub fn channels(&self) -> Result<ConfiguredChannels, ConfigError> {
        let alipay = self
            .channels
            .alipay
            .as_ref()
            .map(|file| -> Result<Arc<dyn Channel>, ConfigError> {
                let channel = AlipayChannel::new(AlipayConfig {
                    gateway_url: file.gateway_url.clone(),
                    api: file.api.into(),
                    app_id: file.app_id.clone(),
                    seller_id: file.seller_id.clone(),
                    merchant_key: private_key(&file.merchant_private_key_file)?,
                    gateway_public_key: public_key(&file.gateway_public_key_file)?,
                    notify_url: file.notify_url.clone(),
                })
                .map_err(|error| ConfigError::Invalid(format!("alipay: {error}")))?;
                Ok(Arc::new(channel))
            })
            .transpose()?;
        let wechat = self
            .channels
            .wechat
            .as_ref()
            .map(|file| -> Result<Arc<dyn Channel>, ConfigError> {
                let channel = WechatChannel::new(WechatConfig {
                    base_url: file.base_url.clone(),
                    mchid: file.mchid.clone(),
                    appid: file.appid.clone(),
                    merchant_serial: file.merchant_serial.clone(),
                    merchant_key: private_key(&file.merchant_private_key_file)?,
                    platform_keys: platform_key_source(file)?,
                    api_v3_key: file.api_v3_key.clone(),
                    notify_url: file.notify_url.clone(),
                })
                .map_err(|error| ConfigError::Invalid(format!("wechat: {error}")))?;
                Ok(Arc::new(channel))
            })
            .transpose()?;
        Ok(ConfiguredChannels { alipay, wechat })
    }
}

/// `[channels]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    /// Alipay.
    pub alipay: Option<AlipayFile>,
    /// WeChat Pay.
    pub wechat: Option<WechatFile>,
}

/// `[channels.alipay]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AlipayFile {
    /// Gateway URL.
    pub gateway_url: String,
    /// `gateway` (default) or `v3`: OpenAPI v3 at `/v3/alipay/trade/…` on the gateway's host.
    #[serde(default)]
    pub api: AlipayApiFile,
    /// App id.
    pub app_id: String,
    /// Seller id, checked on notifies.
    pub seller_id: Option<String>,
    /// PEM file of the merchant's private key.
    pub merchant_private_key_file: PathBuf,
    /// PEM file of Alipay's public key.
    pub gateway_public_key_file: PathBuf,
    /// Our notify URL, as the channel reaches it.
    pub notify_url: String,
}

/// `[channels.alipay] api`: which of Alipay's APIs the adapter speaks.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AlipayApiFile {
    /// `gateway.do`.
    #[default]
    Gateway,
    /// OpenAPI v3.
    V3,
}

impl From<AlipayApiFile> for AlipayApi {
    fn from(api: AlipayApiFile) -> Self {
        match api {
            AlipayApiFile::Gateway => AlipayApi::Gateway,
            AlipayApiFile::V3 => AlipayApi::V3,
        }
    }
}

/// `[channels.wechat]`.
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WechatFile {
    /// API base URL.
    pub base_url: String,
    /// Merchant id.
    pub mchid: String,
    /// App id.
    pub appid: String,
    /// Serial of the merchant certificate.
    pub merchant_serial: String,
    /// PEM file of the merchant's private key.
    pub merchant_private_key_file: PathBuf,
    /// `public_key` (the default: one key, [`WechatFile::platform_public_key_file`] under
    /// [`WechatFile::platform_serial`]) or `certificates` (downloaded from `/v3/certificates`
    /// and refreshed when the platform rotates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_mode: Option<WechatPlatformMode>,
    /// Public-key mode: PEM file of the platform's public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_public_key_file: Option<PathBuf>,
    /// Public-key mode: the serial that key signs under (`Wechatpay-Serial`, `PUB_KEY_ID_…` or
    /// a certificate's serial); notifies under any other serial are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_serial: Option<String>,
    /// Certificate mode, optional: a PEM platform certificate trusted before the first
    /// download (its key then verifies the first list when that list is signed under it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_certificate_file: Option<PathBuf>,
    /// The 32-byte API v3 key (give it by environment).
    pub api_v3_key: String,
    /// Our notify URL, as the channel reaches it.
    pub notify_url: String,
}

/// `channels.wechat.platform_mode`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WechatPlatformMode {
    /// One platform public key, configured.
    PublicKey,
    /// The platform certificates, downloaded.
    Certificates,
}

/// Where `[channels.wechat]` takes the platform keys from, once its fields are checked.
pub(super) enum WechatPlatformChoice<'a> {
    PublicKey { key_file: &'a Path, serial: &'a str },
    Certificates { certificate_file: Option<&'a Path> },
}

impl WechatFile {
    /// The platform-key fields read together: each mode takes its own fields and refuses the
    /// other's, so that a configuration never means two things.
    pub(super) fn platform_choice(&self) -> Result<WechatPlatformChoice<'_>, ConfigError> {
        let invalid = |what: &str| ConfigError::Invalid(format!("channels.wechat: {what}"));
        match self.platform_mode.unwrap_or(WechatPlatformMode::PublicKey) {
            WechatPlatformMode::PublicKey => {
                if self.platform_certificate_file.is_some() {
                    return Err(invalid(
                        "platform_certificate_file is for platform_mode = \"certificates\"",
                    ));
                }
                match (&self.platform_public_key_file, &self.platform_serial) {
                    (Some(key_file), Some(serial)) if !serial.is_empty() => {
                        Ok(WechatPlatformChoice::PublicKey { key_file, serial })
                    }
                    _ => Err(invalid(
                        "public-key mode needs platform_public_key_file and platform_serial \
                         (or set platform_mode = \"certificates\")",
                    )),
                }
            }
            WechatPlatformMode::Certificates => {
                if self.platform_public_key_file.is_some() || self.platform_serial.is_some() {
                    return Err(invalid(
                        "platform_mode = \"certificates\" downloads the platform keys: \
                         remove platform_public_key_file and platform_serial",
                    ));
                }
                Ok(WechatPlatformChoice::Certificates {
                    certificate_file: self.platform_certificate_file.as_deref(),
                })
            }
        }
    }
}

impl std::fmt::Debug for WechatFile {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WechatFile")
            .field("base_url", &self.base_url)
            .field("mchid", &self.mchid)
            .field("api_v3_key", &"redacted")
            .finish_non_exhaustive()
    }
}

/// Channel adapters built from the configuration.
#[derive(Clone, Default)]
pub struct ConfiguredChannels {
    /// Alipay.
    pub alipay: Option<Arc<dyn Channel>>,
    /// WeChat Pay.
    pub wechat: Option<Arc<dyn Channel>>,
}

fn private_key(path: &Path) -> Result<PrivateKey, ConfigError> {
    let pem = std::fs::read_to_string(path)
        .map_err(|error| ConfigError::Invalid(format!("{}: {error}", path.display())))?;
    PrivateKey::from_pem(&pem)
        .map_err(|_| ConfigError::Invalid(format!("{} is not an RSA private key", path.display())))
}

fn platform_key_source(file: &WechatFile) -> Result<PlatformKeySource, ConfigError> {
    Ok(match file.platform_choice()? {
        WechatPlatformChoice::PublicKey { key_file, serial } => PlatformKeySource::PublicKey {
            key: public_key(key_file)?,
            serial: serial.to_owned(),
        },
        WechatPlatformChoice::Certificates { certificate_file } => {
            let initial = certificate_file
                .map(|path| {
                    let pem = std::fs::read_to_string(path).map_err(|error| {
                        ConfigError::Invalid(format!("{}: {error}", path.display()))
                    })?;
                    parse_certificate_pem(&pem).map_err(|error| {
                        ConfigError::Invalid(format!("{}: {error}", path.display()))
                    })
                })
                .transpose()?;
            PlatformKeySource::Certificates {
                initial,
                refresh_interval: CERTIFICATE_REFRESH_INTERVAL,
            }
        }
    })
}

fn public_key(path: &Path) -> Result<PublicKey, ConfigError> {
    let pem = std::fs::read_to_string(path)
        .map_err(|error| ConfigError::Invalid(format!("{}: {error}", path.display())))?;
    PublicKey::from_pem(&pem)
        .map_err(|_| ConfigError::Invalid(format!("{} is not an RSA public key", path.display())))
}
