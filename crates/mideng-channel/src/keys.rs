//! RSA keys and SHA256withRSA (PKCS#1 v1.5) signatures, the scheme both channels use, and
//! AES-256-GCM for WeChat Pay notifications.
//!
//! Private keys are held in [`PrivateKey`], whose `Debug` prints nothing of the key: secrets
//! never reach logs.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rsa::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding,
};
use rsa::sha2::Sha256;
use thiserror::Error;

/// A key or cryptographic failure.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A PEM document could not be read as the expected key.
    #[error("not a valid {0} PEM")]
    Pem(&'static str),
    /// Key generation or signing failed.
    #[error("RSA operation failed")]
    Rsa,
    /// An AES-256-GCM key is not 32 bytes or a nonce not 12.
    #[error("AES-256-GCM needs a 32-byte key and a 12-byte nonce")]
    AesParameters,
    /// Decryption failed: wrong key, nonce or associated data, or tampered ciphertext.
    #[error("ciphertext does not authenticate")]
    Decrypt,
}

/// An RSA private key (a merchant's, or the simulated channel's).
#[derive(Clone)]
pub struct PrivateKey(rsa::PrivateKey);

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("PrivateKey(redacted)")
    }
}

/// An RSA public key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey(rsa::PublicKey);

/// Size of generated keys: the channels' RSA2 keys are 2048-bit.
const GENERATED_KEY_BITS: usize = 2048;

impl PrivateKey {
    /// Reads a PKCS#8 (`BEGIN PRIVATE KEY`) or PKCS#1 (`BEGIN RSA PRIVATE KEY`) PEM.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        use rsa::pkcs1::DecodeRsaPrivateKey;
        rsa::PrivateKey::from_pkcs8_pem(pem)
            .or_else(|_| rsa::PrivateKey::from_pkcs1_pem(pem))
            .map(Self)
            .map_err(|_| KeyError::Pem("RSA private key"))
    }

    /// A fresh 2048-bit key.
    pub fn generate() -> Result<Self, KeyError> {
        let mut rng = getrandom::SysRng;
        rsa::PrivateKey::new(&mut rng, GENERATED_KEY_BITS)
            .map(Self)
            .map_err(|_| KeyError::Rsa)
    }

    /// The key as PKCS#8 PEM, for saving.
    pub fn to_pem(&self) -> Result<String, KeyError> {
        self.0
            .to_pkcs8_pem(LineEnding::LF)
            .map(|pem| pem.to_string())
            .map_err(|_| KeyError::Pem("RSA private key"))
    }

    /// The public half.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.to_public_key())
    }

    /// SHA256withRSA (PKCS#1 v1.5) over `message`, base64.
    pub fn sign(&self, message: &[u8]) -> Result<String, KeyError> {
        self.0
            .pkcs1v15_sign::<Sha256>(message)
            .map(|signature| STANDARD.encode(signature))
            .map_err(|_| KeyError::Rsa)
    }
}

impl PublicKey {
    /// Reads a SubjectPublicKeyInfo (`BEGIN PUBLIC KEY`) or PKCS#1 (`BEGIN RSA PUBLIC KEY`) PEM.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        use rsa::pkcs1::DecodeRsaPublicKey;
        rsa::PublicKey::from_public_key_pem(pem)
            .or_else(|_| rsa::PublicKey::from_pkcs1_pem(pem))
            .map(Self)
            .map_err(|_| KeyError::Pem("RSA public key"))
    }

    /// Reads a DER SubjectPublicKeyInfo, as an X.509 certificate carries it.
    pub fn from_der(der: &[u8]) -> Result<Self, KeyError> {
        rsa::PublicKey::from_public_key_der(der)
            .map(Self)
            .map_err(|_| KeyError::Pem("RSA public key"))
    }

    /// The key as SubjectPublicKeyInfo PEM, to hand to the other side.
    pub fn to_pem(&self) -> Result<String, KeyError> {
        self.0
            .to_public_key_pem(LineEnding::LF)
            .map_err(|_| KeyError::Pem("RSA public key"))
    }

    /// Whether `signature` (base64) is a valid SHA256withRSA signature of `message`. Malformed
    /// base64 is simply invalid.
    pub fn verify(&self, message: &[u8], signature: &str) -> bool {
        STANDARD
            .decode(signature.trim())
            .is_ok_and(|bytes| self.0.pkcs1v15_verify::<Sha256>(message, &bytes).is_ok())
    }
}

/// AES-256-GCM encryption (WeChat Pay notification resources), base64 of ciphertext + tag.
pub fn aes_gcm_encrypt(
    key: &[u8],
    nonce: &[u8],
    associated_data: &[u8],
    plaintext: &[u8],
) -> Result<String, KeyError> {
    let cipher = Aes256Gcm::new_from_slice(key).map_err(|_| KeyError::AesParameters)?;
    let nonce = Nonce::try_from(nonce).map_err(|_| KeyError::AesParameters)?;
    cipher
        .encrypt(
            &nonce,
            Payload {
                msg: plaintext,
                aad: associated_data,
            },
        )
        .map(|ciphertext| STANDARD.encode(ciphertext))
        .map_err(|_| KeyError::Decrypt)
}

/// AES-256-GCM decryption of a base64 ciphertext + tag.
pub fn aes_gcm_decrypt(
    key: &[u8],
    nonce: &[u8],
    associated_data: &[u8],
    ciphertext: &str,
) -> Result<Vec<u8>, KeyError> {
    let cipher = Aes256Gcm::new_from_slice(key).map_err(|_| KeyError::AesParameters)?;
    let nonce = Nonce::try_from(nonce).map_err(|_| KeyError::AesParameters)?;
    let bytes = STANDARD
        .decode(ciphertext.trim())
        .map_err(|_| KeyError::Decrypt)?;
    cipher
        .decrypt(
            &nonce,
            Payload {
                msg: &bytes,
                aad: associated_data,
            },
        )
        .map_err(|_| KeyError::Decrypt)
}

/// `count` random characters from `[A-Z0-9]` (nonces for WeChat Pay messages).
pub fn random_nonce(count: usize) -> String {
    random_characters(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", count)
}

/// `count` random characters from `alphabet` (ASCII, at most 256 characters; the small bias
/// of a modulo over random bytes does not matter for nonces and identifiers). An empty
/// alphabet gives an empty string.
pub fn random_characters(alphabet: &[u8], count: usize) -> String {
    if alphabet.is_empty() {
        return String::new();
    }
    let mut bytes = vec![0_u8; count];
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    bytes
        .iter()
        .map(|byte| char::from(alphabet[usize::from(*byte) % alphabet.len()]))
        .collect()
}
