//! What every handler and the notify dispatcher share: the configuration, the channel clock,
//! the world behind its lock, the dispatcher's wake-up, the HTTP client that delivers notifies,
//! and the WeChat Pay platform's current signing identity.
//!
//! The locks live here, private, and are reached only through methods that say what they do
//! under them ([`Shared::settled_world`], [`Shared::sign_as_wechat_platform`], …), so that no
//! caller holds one across an await or forgets to settle the world to the clock.

use std::sync::{Mutex, PoisonError, RwLock};

use mideng_channel::keys::{KeyError, PrivateKey, PublicKey};

use crate::certificates::{PlatformCertificate, PlatformIdentity};
use crate::clock::{self, SimClock};
use crate::config::SimConfig;
use crate::error::SimError;
use crate::limits;
use crate::world::{World, WorldGuard};

/// What every handler and the dispatcher share.
pub(crate) struct Shared {
    pub(crate) config: SimConfig,
    pub(crate) clock: SimClock,
    /// All mutable state. A std mutex: critical sections are short and never span an await.
    world: Mutex<World>,
    /// Wakes the dispatcher when deliveries may have become due earlier than it planned.
    pub(crate) wake: tokio::sync::Notify,
    /// Delivers notifies.
    pub(crate) client: reqwest::Client,
    /// Who signs WeChat Pay answers and notifies, and the certificates served: the
    /// configured identity until a rotation replaces it. A std lock, read around each signature
    /// and written only for the swap after a rotation generated its key; never held across an
    /// await.
    wechat_platform: RwLock<PlatformIdentity>,
}

impl Shared {
    /// The state of a simulator with an empty world, its clock starting at the host's time.
    /// `config` must have been validated.
    pub(crate) fn new(config: SimConfig) -> Result<Self, SimError> {
        // reqwest is built without a default TLS provider; notifies go over plain HTTP, but
        // building the client needs one installed. Another part of the process may have
        // installed one already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(limits::DELIVERY_TIMEOUT)
            // Merchants are reached directly: a proxy from the environment would send the
            // channel's notifies somewhere else.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(limits::DELIVERIES_IN_FLIGHT_MAX)
            .build()
            .map_err(|_| SimError::HttpClient)?;
        let wechat_platform = RwLock::new(PlatformIdentity::from_config(
            &config,
            clock::wall_clock_ms(),
        )?);
        Ok(Self {
            clock: SimClock::new(config.clock_speed),
            config,
            world: Mutex::new(World::default()),
            wake: tokio::sync::Notify::new(),
            client,
            wechat_platform,
        })
    }

    /// Signs `message` as the WeChat Pay platform signs now: the signature, and the serial to
    /// send beside it.
    pub(crate) fn sign_as_wechat_platform(
        &self,
        message: &[u8],
    ) -> Result<(String, String), KeyError> {
        // A panic under this lock would be a bug in a panic-free section; keep serving.
        let identity = self
            .wechat_platform
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Ok((identity.key.sign(message)?, identity.serial.clone()))
    }

    /// The key that verifies what the WeChat Pay platform signs now.
    pub(crate) fn wechat_platform_public_key(&self) -> PublicKey {
        self.wechat_platform
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .key
            .public_key()
    }

    /// The platform certificates `GET /v3/certificates` serves (none in public-key mode).
    pub(crate) fn wechat_platform_certificates(&self) -> Vec<PlatformCertificate> {
        self.wechat_platform
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .certificates
            .clone()
    }

    /// Replaces the platform's key and serial with `key` under a fresh serial, its certificate
    /// served beside the previous one (certificate mode).
    pub(crate) fn rotate_wechat_platform(&self, key: PrivateKey) -> Result<String, SimError> {
        let mut identity = self
            .wechat_platform
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        identity.rotate(key, clock::wall_clock_ms())?;
        Ok(identity.serial.clone())
    }

    /// Locks the world and settles it to the clock.
    pub(crate) fn settled_world(&self) -> WorldGuard<'_> {
        // A panic while holding the lock would be a bug in a short, panic-free critical
        // section; keep serving rather than fail every later request.
        let mut guard = self.world.lock().unwrap_or_else(PoisonError::into_inner);
        let now_ms = self.clock.now_ms();
        guard.settle(&self.config, now_ms);
        WorldGuard {
            guard,
            wake: &self.wake,
            now_ms,
        }
    }
}
