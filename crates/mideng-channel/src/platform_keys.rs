//! The WeChat Pay platform keys a merchant trusts, by serial, and the rules that admit a
//! downloaded `GET /v3/certificates` list into them. Pure: no I/O, the clock is an argument.
//!
//! Trust. Each certificate in the list reaches us AES-256-GCM encrypted under the API v3 key,
//! which only WeChat Pay and the merchant hold: a certificate that decrypts and authenticates
//! was sealed by one of them. The list's answer must also be signed, by a key we already trust
//! or by one of the certificates it carries (the SDKs' practice: a rotation's first list is
//! signed by the new key, which nobody knows yet). So the anchor is the API v3 key, not a CA
//! chain: the certificates' issuer is not checked, as no SDK checks it either. Whoever holds
//! the API v3 key can hand us a platform key; keep that key as secret as the merchant key.

use std::collections::HashMap;

use serde::Deserialize;
use thiserror::Error;

use crate::keys::{PublicKey, aes_gcm_decrypt};
use crate::strict;
use crate::wechat as protocol;

/// Most certificates a list may carry, and so most keys kept: WeChat Pay serves the current
/// one and, during a rotation, the next. A longer list is refused rather than trimmed.
pub const CERTIFICATES_MAX: usize = 8;
/// Associated data of every encrypted certificate.
pub const CERTIFICATE_ASSOCIATED_DATA: &str = "certificate";
/// Longest serial accepted: a 20-byte X.509 serial in hex.
const SERIAL_CHARS_MAX: usize = 40;

/// Why a certificate or a list is not admitted. The keys trusted before stay as they were.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// Not a PEM X.509 certificate, or not an RSA key in it.
    #[error("not an X.509 certificate with an RSA key: {0}")]
    Unreadable(&'static str),
    /// The list's JSON is not a certificate list.
    #[error("not a certificate list: {0}")]
    MalformedList(&'static str),
    /// More than [`CERTIFICATES_MAX`] certificates.
    #[error("the list carries more than {CERTIFICATES_MAX} certificates")]
    TooMany,
    /// A certificate does not decrypt with the API v3 key (tampered, or another merchant's).
    #[error("a certificate does not decrypt with the API v3 key")]
    Undecryptable,
    /// A certificate's own serial is not the `serial_no` it is listed under.
    #[error("a certificate's serial is not the serial it is listed under")]
    SerialMismatch,
    /// The list's signature does not verify with a trusted key nor with a listed certificate.
    #[error("the certificate list's signature does not verify")]
    BadSignature,
    /// Not one certificate of the list is valid now.
    #[error("no certificate of the list is valid now")]
    NoneValid,
}

/// A platform key and the window its certificate is valid in (Unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformKey {
    /// Verifies answers and notifies signed under the certificate's serial.
    pub public_key: PublicKey,
    /// Valid from.
    pub not_before_ms: i64,
    /// Valid until.
    pub not_after_ms: i64,
}

impl PlatformKey {
    /// A key with no expiry: public-key mode, where the key is handed over out of band.
    pub fn without_expiry(public_key: PublicKey) -> Self {
        Self {
            public_key,
            not_before_ms: i64::MIN,
            not_after_ms: i64::MAX,
        }
    }

    /// Whether `now_ms` is inside the validity window.
    pub fn is_valid_at(&self, now_ms: i64) -> bool {
        (self.not_before_ms..=self.not_after_ms).contains(&now_ms)
    }
}

/// A certificate, read: its serial (upper-case hex, no leading zeros) and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformCertificate {
    /// The X.509 serial number.
    pub serial: String,
    /// Key and validity.
    pub key: PlatformKey,
}

/// Reads one PEM X.509 certificate carrying an RSA key. Trailing data is refused: a second
/// certificate behind the first would be one nobody looked at.
pub fn parse_certificate_pem(pem: &str) -> Result<PlatformCertificate, CertificateError> {
    let (rest, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|_| CertificateError::Unreadable("not PEM"))?;
    if !rest.iter().all(u8::is_ascii_whitespace) {
        return Err(CertificateError::Unreadable("data after the certificate"));
    }
    if pem.label != "CERTIFICATE" {
        return Err(CertificateError::Unreadable("not a CERTIFICATE PEM"));
    }
    let (rest, certificate) = x509_parser::parse_x509_certificate(&pem.contents)
        .map_err(|_| CertificateError::Unreadable("not X.509"))?;
    if !rest.is_empty() {
        return Err(CertificateError::Unreadable("data after the certificate"));
    }
    let public_key = PublicKey::from_der(certificate.public_key().raw)
        .map_err(|_| CertificateError::Unreadable("not an RSA key"))?;
    let validity = certificate.validity();
    Ok(PlatformCertificate {
        serial: canonical_serial(&hex::encode_upper(certificate.raw_serial())),
        key: PlatformKey {
            public_key,
            not_before_ms: validity.not_before.timestamp().saturating_mul(1000),
            not_after_ms: validity.not_after.timestamp().saturating_mul(1000),
        },
    })
}

/// A serial as compared: upper-case hex without leading zeros (DER pads a serial whose first
/// bit is set with a zero byte; WeChat Pay's `serial_no` has no padding).
fn canonical_serial(hex_serial: &str) -> String {
    let trimmed = hex_serial.trim_start_matches('0');
    if trimmed.is_empty() {
        "0".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// A signed `GET /v3/certificates` answer: its signing headers (each given once) and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedList<'a> {
    /// `Wechatpay-Timestamp`.
    pub timestamp: &'a str,
    /// `Wechatpay-Nonce`.
    pub nonce: &'a str,
    /// `Wechatpay-Signature`.
    pub signature: &'a str,
    /// `Wechatpay-Serial`.
    pub serial: &'a str,
    /// The body, as received.
    pub body: &'a str,
}

#[derive(Deserialize)]
struct ListBody {
    data: Vec<ListedCertificate>,
}

#[derive(Deserialize)]
struct ListedCertificate {
    serial_no: String,
    encrypt_certificate: protocol::Resource,
}

/// Admits a list: every certificate decrypts under `api_v3_key`, parses, and carries the
/// serial it is listed under; the answer is signed by a key of `trusted` valid at `now_ms` or
/// by a listed certificate; certificates expired (or not yet valid) at `now_ms` are dropped.
/// The result replaces the trusted keys; on any error they stay as they were.
pub fn admit_certificate_list(
    list: &SignedList<'_>,
    api_v3_key: &[u8],
    trusted: &HashMap<String, PlatformKey>,
    now_ms: i64,
) -> Result<HashMap<String, PlatformKey>, CertificateError> {
    let body: ListBody = strict::json(list.body)
        .map_err(|_| CertificateError::MalformedList("not a JSON certificate list"))?;
    if body.data.len() > CERTIFICATES_MAX {
        return Err(CertificateError::TooMany);
    }
    let mut listed = HashMap::with_capacity(body.data.len());
    for entry in &body.data {
        let serial_is_hex = !entry.serial_no.is_empty()
            && entry.serial_no.len() <= SERIAL_CHARS_MAX
            && entry
                .serial_no
                .bytes()
                .all(|byte| byte.is_ascii_digit() || byte.is_ascii_uppercase() && byte <= b'F');
        if !serial_is_hex {
            return Err(CertificateError::MalformedList("serial_no"));
        }
        let envelope = &entry.encrypt_certificate;
        if envelope.algorithm != protocol::RESOURCE_ALGORITHM {
            return Err(CertificateError::MalformedList("algorithm"));
        }
        let pem = aes_gcm_decrypt(
            api_v3_key,
            envelope.nonce.as_bytes(),
            envelope.associated_data.as_bytes(),
            &envelope.ciphertext,
        )
        .map_err(|_| CertificateError::Undecryptable)?;
        let pem = String::from_utf8(pem)
            .map_err(|_| CertificateError::Unreadable("certificate is not UTF-8"))?;
        let certificate = parse_certificate_pem(&pem)?;
        if certificate.serial != canonical_serial(&entry.serial_no) {
            return Err(CertificateError::SerialMismatch);
        }
        if listed
            .insert(entry.serial_no.clone(), certificate.key)
            .is_some()
        {
            return Err(CertificateError::MalformedList("a serial listed twice"));
        }
    }
    let signer = trusted
        .get(list.serial)
        .filter(|key| key.is_valid_at(now_ms))
        .or_else(|| listed.get(list.serial))
        .ok_or(CertificateError::BadSignature)?;
    let message = protocol::notify_message(list.timestamp, list.nonce, list.body);
    if list.signature.starts_with(protocol::SIGNTEST_PREFIX)
        || !signer.public_key.verify(message.as_bytes(), list.signature)
    {
        return Err(CertificateError::BadSignature);
    }
    listed.retain(|_, key| key.is_valid_at(now_ms));
    if listed.is_empty() {
        return Err(CertificateError::NoneValid);
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{PrivateKey, aes_gcm_encrypt};
    use rcgen::{CertificateParams, KeyPair, PKCS_RSA_SHA256, SerialNumber};
    use std::sync::OnceLock;

    const API_V3_KEY: &[u8] = b"0123456789abcdefghijklmnopqrstuv";
    const NOW_MS: i64 = 1_764_417_600_000;
    const DAY_MS: i64 = 86_400_000;

    /// Two platform keys (generating RSA keys is slow: once for all tests).
    fn platform_keys() -> &'static [PrivateKey; 2] {
        static KEYS: OnceLock<[PrivateKey; 2]> = OnceLock::new();
        KEYS.get_or_init(|| {
            [
                PrivateKey::generate().expect("key"),
                PrivateKey::generate().expect("key"),
            ]
        })
    }

    /// A self-signed certificate of `key` under `serial`, valid `days` around `NOW_MS`.
    fn certificate(key: &PrivateKey, serial: &str, from_ms: i64, until_ms: i64) -> String {
        let pair = KeyPair::from_pem_and_sign_algo(&key.to_pem().expect("pem"), &PKCS_RSA_SHA256)
            .expect("key pair");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.serial_number = Some(SerialNumber::from_slice(
            &hex::decode(serial).expect("hex serial"),
        ));
        params.not_before =
            time::OffsetDateTime::from_unix_timestamp(from_ms / 1000).expect("time");
        params.not_after =
            time::OffsetDateTime::from_unix_timestamp(until_ms / 1000).expect("time");
        params.self_signed(&pair).expect("signed").pem()
    }

    fn entry(serial_no: &str, pem: &str, key: &[u8]) -> serde_json::Value {
        let nonce = "0123456789ab";
        serde_json::json!({
            "serial_no": serial_no,
            "effective_time": "2025-11-29T20:00:00+08:00",
            "expire_time": "2030-11-29T20:00:00+08:00",
            "encrypt_certificate": {
                "algorithm": "AEAD_AES_256_GCM",
                "nonce": nonce,
                "associated_data": CERTIFICATE_ASSOCIATED_DATA,
                "ciphertext": aes_gcm_encrypt(key, nonce.as_bytes(), CERTIFICATE_ASSOCIATED_DATA.as_bytes(), pem.as_bytes()).expect("encrypt"),
            },
        })
    }

    const OLD: &str = "1A2B3C4D5E6F708192A3B4C5D6E7F80912345678";
    const NEW: &str = "7132D72A03E93CDDF8C03BBD1F37EEDF43F8E5E1";

    fn valid(key: &PrivateKey, serial: &str) -> String {
        certificate(key, serial, NOW_MS - DAY_MS, NOW_MS + 365 * DAY_MS)
    }

    /// Admits `entries`, signed by `signer` under `signed_serial`, over `trusted`.
    fn admit(
        entries: Vec<serde_json::Value>,
        signer: &PrivateKey,
        signed_serial: &str,
        trusted: &HashMap<String, PlatformKey>,
    ) -> Result<HashMap<String, PlatformKey>, CertificateError> {
        let body = serde_json::json!({ "data": entries }).to_string();
        let signature = signer
            .sign(protocol::notify_message("1764417600", "N", &body).as_bytes())
            .expect("sign");
        admit_certificate_list(
            &SignedList {
                timestamp: "1764417600",
                nonce: "N",
                signature: &signature,
                serial: signed_serial,
                body: &body,
            },
            API_V3_KEY,
            trusted,
            NOW_MS,
        )
    }

    #[test]
    fn a_first_list_signed_by_its_own_certificate_is_trusted() {
        let [old, _] = platform_keys();
        let keys = admit(
            vec![entry(OLD, &valid(old, OLD), API_V3_KEY)],
            old,
            OLD,
            &HashMap::new(),
        )
        .expect("admitted");
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[OLD].public_key, old.public_key());
    }

    #[test]
    fn a_rotation_list_signed_by_the_new_key_brings_both_keys() {
        let [old, new] = platform_keys();
        let trusted = HashMap::from([(
            OLD.to_owned(),
            PlatformKey::without_expiry(old.public_key()),
        )]);
        let keys = admit(
            vec![
                entry(OLD, &valid(old, OLD), API_V3_KEY),
                entry(NEW, &valid(new, NEW), API_V3_KEY),
            ],
            new,
            NEW,
            &trusted,
        )
        .expect("admitted");
        assert_eq!(keys[NEW].public_key, new.public_key());
        assert_eq!(keys[OLD].public_key, old.public_key());
    }

    #[test]
    fn tampered_lists_are_refused() {
        let [old, new] = platform_keys();
        let none = HashMap::new();
        assert_eq!(
            admit(
                vec![entry(NEW, &valid(old, OLD), API_V3_KEY)],
                old,
                NEW,
                &none
            ),
            Err(CertificateError::SerialMismatch),
            "a certificate listed under another serial"
        );
        assert_eq!(
            admit(
                vec![entry(
                    OLD,
                    &valid(old, OLD),
                    b"ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"
                )],
                old,
                OLD,
                &none
            ),
            Err(CertificateError::Undecryptable),
            "sealed with another API v3 key"
        );
        assert_eq!(
            admit(
                vec![entry(OLD, &valid(old, OLD), API_V3_KEY)],
                new,
                OLD,
                &none
            ),
            Err(CertificateError::BadSignature),
            "signed by a key that is not the certificate's"
        );
        assert_eq!(
            admit(
                vec![entry(OLD, &valid(old, OLD), API_V3_KEY)],
                new,
                NEW,
                &none
            ),
            Err(CertificateError::BadSignature),
            "signed under a serial neither trusted nor listed"
        );
        let many = (0..=CERTIFICATES_MAX)
            .map(|_| entry(OLD, &valid(old, OLD), API_V3_KEY))
            .collect();
        assert_eq!(admit(many, old, OLD, &none), Err(CertificateError::TooMany));
    }

    #[test]
    fn expired_certificates_are_dropped_and_a_list_of_only_expired_ones_is_refused() {
        let [old, new] = platform_keys();
        let expired = certificate(old, OLD, NOW_MS - 10 * DAY_MS, NOW_MS - DAY_MS);
        let keys = admit(
            vec![
                entry(OLD, &expired, API_V3_KEY),
                entry(NEW, &valid(new, NEW), API_V3_KEY),
            ],
            new,
            NEW,
            &HashMap::new(),
        )
        .expect("admitted");
        assert!(!keys.contains_key(OLD));
        assert!(keys.contains_key(NEW));
        assert_eq!(
            admit(
                vec![entry(OLD, &expired, API_V3_KEY)],
                old,
                OLD,
                &HashMap::new()
            ),
            Err(CertificateError::NoneValid)
        );
    }

    #[test]
    fn a_certificate_pem_with_anything_after_it_is_refused() {
        let [old, _] = platform_keys();
        let pem = valid(old, OLD);
        assert_eq!(parse_certificate_pem(&pem).expect("read").serial, OLD);
        assert!(parse_certificate_pem(&format!("{pem}{pem}")).is_err());
        assert!(parse_certificate_pem("not a certificate").is_err());
    }
}
