//! Why a simulator could not be built or changed: the one error type of the crate, in a module
//! of its own so that every other module can name it without reaching up to the crate root.

use thiserror::Error;

/// Why the simulator could not be built.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SimError {
    /// A configuration value is unusable.
    #[error("invalid simulator configuration: {0}")]
    InvalidConfig(&'static str),
    /// Fresh keys could not be generated.
    #[error("RSA key generation failed")]
    KeyGeneration,
    /// The HTTP client that delivers notifies could not be built.
    #[error("the notify HTTP client could not be built")]
    HttpClient,
    /// The platform certificate (certificate mode) could not be issued.
    #[error("the WeChat Pay platform certificate could not be issued")]
    Certificate,
}
