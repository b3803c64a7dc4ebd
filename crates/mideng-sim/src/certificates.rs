//! The WeChat Pay platform's signing identity — its key, its serial and, in certificate mode,
//! the certificates `GET /v3/certificates` serves — and its rotation.
//!
//! WeChat Pay's platform certificates are X.509, carry the platform's RSA key, are valid five
//! years and are named by their serial number (upper-case hex), which is what
//! `Wechatpay-Serial` says. The simulator issues one at start for its platform key and serial,
//! from a CA of its own; its CA key is ECDSA P-256 (generating an RSA key takes seconds, and no
//! SDK checks the chain: the certificates reach the merchant inside an AES-GCM envelope only
//! the API v3 key opens). Dates follow the wall clock, as the SDKs check them against it.
//!
//! A rotation (certificate mode, on demand through the control API) does what WeChat Pay does
//! when it renews: a new key under a new serial signs from then on, and the list serves the new
//! certificate beside the previous one, so that a merchant meeting the new serial refreshes
//! its list and one still holding the old finds it there.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_RSA_SHA256, SerialNumber,
};

use mideng_channel::keys::PrivateKey;

use crate::config::{SimConfig, WechatPlatformMode};
use crate::error::SimError;

/// How long a platform certificate is valid, as WeChat Pay issues them.
const VALIDITY_DAYS: i64 = 5 * 365;
/// How long before its issue a certificate is already valid, so that a merchant whose clock is
/// a little behind accepts it.
const BACKDATE_DAYS: i64 = 1;

/// One platform certificate, ready to serve.
#[derive(Clone, Debug)]
pub(crate) struct PlatformCertificate {
    /// Its serial number in upper-case hex: the platform serial of the configuration.
    pub(crate) serial: String,
    /// The certificate, PEM.
    pub(crate) pem: String,
    /// Valid from, Unix milliseconds.
    pub(crate) not_before_ms: i64,
    /// Valid until, Unix milliseconds.
    pub(crate) not_after_ms: i64,
}

/// Certificates the list keeps: the signing one and the one it replaced.
const CERTIFICATES_MAX: usize = 2;

/// Who signs WeChat Pay answers and notifies now.
#[derive(Clone, Debug)]
pub(crate) struct PlatformIdentity {
    /// Signs.
    pub(crate) key: PrivateKey,
    /// Sent as `Wechatpay-Serial`.
    pub(crate) serial: String,
    /// What `GET /v3/certificates` serves, oldest first, the signing one last; empty in
    /// public-key mode.
    pub(crate) certificates: Vec<PlatformCertificate>,
}

impl PlatformIdentity {
    /// The identity of `config`, with its certificate in certificate mode.
    pub(crate) fn from_config(config: &SimConfig, now_ms: i64) -> Result<Self, SimError> {
        let certificates = match config.wechat_platform_mode {
            WechatPlatformMode::Certificate => vec![issue_platform_certificate(
                &config.wechat_platform_key,
                &config.wechat_platform_serial,
                now_ms,
            )?],
            WechatPlatformMode::PublicKey => Vec::new(),
        };
        Ok(Self {
            key: config.wechat_platform_key.clone(),
            serial: config.wechat_platform_serial.clone(),
            certificates,
        })
    }

    /// Signs with `key` under a fresh serial from now on, its certificate served beside the
    /// previous one. Certificate mode only (a caller checks): a public key's id is handed to
    /// the merchant out of band, and there is no list to announce a new one in.
    pub(crate) fn rotate(&mut self, key: PrivateKey, now_ms: i64) -> Result<(), SimError> {
        let serial = WechatPlatformMode::Certificate.random_serial();
        let certificate = issue_platform_certificate(&key, &serial, now_ms)?;
        self.certificates.push(certificate);
        let surplus = self.certificates.len().saturating_sub(CERTIFICATES_MAX);
        self.certificates.drain(..surplus);
        self.key = key;
        self.serial = serial;
        Ok(())
    }
}

/// Issues the certificate of `key` under `serial` (hex), valid from a day before `now_ms` for
/// five years.
pub(crate) fn issue_platform_certificate(
    key: &PrivateKey,
    serial: &str,
    now_ms: i64,
) -> Result<PlatformCertificate, SimError> {
    let failed = |_| SimError::Certificate;
    let serial_bytes = hex_bytes(serial).ok_or(SimError::InvalidConfig(
        "a platform certificate needs a hex serial (certificate mode)",
    ))?;
    let now = time::OffsetDateTime::from_unix_timestamp(now_ms.div_euclid(1000))
        .map_err(|_| SimError::Certificate)?;
    let not_before = now - time::Duration::days(BACKDATE_DAYS);
    let not_after = now + time::Duration::days(VALIDITY_DAYS);

    let mut authority = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    authority
        .distinguished_name
        .push(DnType::CommonName, "mideng simulator WeChat Pay CA");
    authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    authority.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    authority.not_before = not_before;
    authority.not_after = now + time::Duration::days(VALIDITY_DAYS + 1);
    let issuer = Issuer::new(authority, KeyPair::generate().map_err(failed)?);

    let platform_pem = key.to_pem().map_err(|_| SimError::Certificate)?;
    let platform_key =
        KeyPair::from_pem_and_sign_algo(&platform_pem, &PKCS_RSA_SHA256).map_err(failed)?;
    let mut platform = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    platform
        .distinguished_name
        .push(DnType::CommonName, "mideng simulator WeChat Pay platform");
    platform
        .distinguished_name
        .push(DnType::OrganizationName, "mideng simulator");
    platform.serial_number = Some(SerialNumber::from_slice(&serial_bytes));
    platform.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    platform.not_before = not_before;
    platform.not_after = not_after;
    let certificate = platform.signed_by(&platform_key, &issuer).map_err(failed)?;
    Ok(PlatformCertificate {
        serial: serial.to_owned(),
        pem: certificate.pem(),
        not_before_ms: not_before.unix_timestamp().saturating_mul(1000),
        not_after_ms: not_after.unix_timestamp().saturating_mul(1000),
    })
}

/// The bytes of an even-length hex string.
fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|start| u8::from_str_radix(text.get(start..start + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WechatPlatformMode;
    use mideng_channel::keys::PrivateKey;

    fn certificate_mode_config() -> SimConfig {
        let key = PrivateKey::generate().expect("key");
        let (mut config, _) = SimConfig::with_keys(key.clone(), key);
        config.wechat_platform_mode = WechatPlatformMode::Certificate;
        config.wechat_platform_serial = "7132D72A03E93CDDF8C03BBD1F37EEDF43F8E5E1".to_owned();
        config
    }

    #[test]
    fn the_certificate_carries_the_platform_serial_and_is_valid_five_years() {
        let config = certificate_mode_config();
        let now_ms = 1_796_000_000_000;
        let identity = PlatformIdentity::from_config(&config, now_ms).expect("issued");
        assert_eq!(identity.certificates.len(), 1);
        let certificate = &identity.certificates[0];
        assert!(certificate.pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(certificate.serial, config.wechat_platform_serial);
        assert_eq!(certificate.not_before_ms, now_ms - 86_400_000);
        assert_eq!(
            certificate.not_after_ms,
            now_ms + 5 * 365 * 86_400_000,
            "five years"
        );
    }

    #[test]
    fn a_public_key_id_cannot_name_a_certificate_and_public_key_mode_has_none() {
        let key = PrivateKey::generate().expect("key");
        let (config, _) = SimConfig::with_keys(key.clone(), key);
        assert!(matches!(
            issue_platform_certificate(
                &config.wechat_platform_key,
                &config.wechat_platform_serial,
                1_796_000_000_000
            ),
            Err(SimError::InvalidConfig(_))
        ));
        let identity = PlatformIdentity::from_config(&config, 1_796_000_000_000).expect("built");
        assert!(identity.certificates.is_empty());
    }

    #[test]
    fn a_rotation_signs_under_a_new_serial_and_keeps_the_previous_certificate_only() {
        let config = certificate_mode_config();
        let now_ms = 1_796_000_000_000;
        let mut identity = PlatformIdentity::from_config(&config, now_ms).expect("issued");
        let mut serials = vec![identity.serial.clone()];
        for _ in 0..2 {
            identity
                .rotate(PrivateKey::generate().expect("key"), now_ms)
                .expect("rotated");
            assert!(!serials.contains(&identity.serial), "a fresh serial");
            serials.push(identity.serial.clone());
        }
        let listed: Vec<&str> = identity
            .certificates
            .iter()
            .map(|certificate| certificate.serial.as_str())
            .collect();
        assert_eq!(listed, [serials[1].as_str(), serials[2].as_str()]);
        assert_ne!(
            identity.key.public_key(),
            config.wechat_platform_key.public_key()
        );
    }
}
