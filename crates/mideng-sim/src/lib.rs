//! # mideng-sim — an Alipay-like and a WeChat-Pay-like gateway for tests and the storm
//!
//! The payment service talks to its channels only over HTTP; this crate is a channel on the
//! other end of that HTTP, speaking the real protocols (`docs/channels.md`, signed and encrypted
//! with the `mideng-channel` primitives) so that pointing the service at a real gateway is a
//! configuration change. On top of the protocol it adds what tests need: a clock that runs fast
//! or jumps, a buyer to scan and pay, notifies that are lost, doubled, delayed or reordered on
//! request, failures with unknown outcomes, and a ledger of what it charged.
//!
//! ## Components
//!
//! - [`config`](SimConfig) — identities and keys of both channels and their merchant.
//! - `certificates` — the WeChat Pay platform's signing identity: its key and serial, and in
//!   certificate mode its certificates (issued at start, renewed by a rotation).
//! - `clock` — channel time: `clock_speed` × real time plus explicit advances.
//! - `trades` — trades, their state machine and the ledger (pure).
//! - `faults` — armed "fail the next call" faults (pure).
//! - `notify` — the notify queue and policies (pure), the payload of each channel's notify,
//!   and the dispatcher task that delivers them.
//! - `world` — all the state above behind one lock, settled to the clock on every access.
//! - `gateway::alipay` — `GET`/`POST /gateway.do`: precreate, query, close.
//! - `gateway::alipay_v3` — OpenAPI v3, `POST /v3/alipay/trade/{precreate,query,close}`:
//!   the same calls with JSON bodies, header signatures and `gateway::alipay`'s business rules.
//! - `gateway::wechat` — `POST /v3/pay/transactions/native`, query by out-trade-no or
//!   transaction id, close, `/v3/certificates`; WeChat's own signed 404 for any other `/v3`
//!   request.
//! - `control` — `/sim/…`: scan, pay, close, refund, finish, trade and ledger views, the
//!   clock, notify policies, fail-next, WeChat platform rotation.
//!
//! ## How data flows
//!
//! ```text
//! merchant ──HTTP──► gateway::{alipay,wechat} ─┐            ┌─► responses, signed
//!                                              ├─► world ───┤
//! tests, storm ─HTTP─► control ────────────────┘  (one lock)└─► notify queue ──► dispatcher ──HTTP──► merchant
//!                                                   ▲                                   │
//!                                  clock (fast, advanceable) ── wakes ──────────────────┘
//! ```
//!
//! A request is verified (signature, ids, timestamp), then applied to the world in one critical
//! section: the world is settled to the clock (expired trades close), the transition runs, and
//! its events become notifies in the queue. The dispatcher sleeps until the next due delivery on
//! the channel clock, sends it (signed at send time), and records the merchant's answer; an
//! unacknowledged notify is retried on the channel's schedule.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use axum::Router;
use axum::routing::{get, post};
use mideng_channel::keys::PublicKey;
use mideng_channel::{alipay, wechat};
use thiserror::Error;
use tokio::sync::watch;

mod certificates;
mod clock;
mod config;
mod control;
mod faults;
mod gateway;
mod limits;
mod notify;
mod trades;
mod world;

pub use config::{
    ALIPAY_SELLER_ID, MerchantKeys, SimConfig, WechatPlatformMode, merchant_channels,
};

use clock::SimClock;
use world::{World, WorldGuard};

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

/// The simulated channels. Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct Simulator {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Simulator")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

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
    wechat_platform: RwLock<certificates::PlatformIdentity>,
}

impl Shared {
    /// Signs `message` as the WeChat Pay platform signs now: the signature, and the serial to
    /// send beside it.
    pub(crate) fn sign_as_wechat_platform(
        &self,
        message: &[u8],
    ) -> Result<(String, String), mideng_channel::keys::KeyError> {
        // A panic under this lock would be a bug in a panic-free section; keep serving.
        let identity = self
            .wechat_platform
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Ok((identity.key.sign(message)?, identity.serial.clone()))
    }

    /// The platform certificates `GET /v3/certificates` serves (none in public-key mode).
    pub(crate) fn wechat_platform_certificates(&self) -> Vec<certificates::PlatformCertificate> {
        self.wechat_platform
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .certificates
            .clone()
    }

    /// Replaces the platform's key and serial with `key` under a fresh serial, its certificate
    /// served beside the previous one (certificate mode).
    pub(crate) fn rotate_wechat_platform(
        &self,
        key: mideng_channel::keys::PrivateKey,
    ) -> Result<String, SimError> {
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

impl Simulator {
    /// A simulator with an empty world, its clock starting at the host's time.
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        config.validate()?;
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
        let wechat_platform = RwLock::new(certificates::PlatformIdentity::from_config(
            &config,
            clock::wall_clock_ms(),
        )?);
        Ok(Self {
            shared: Arc::new(Shared {
                clock: SimClock::new(config.clock_speed),
                config,
                world: Mutex::new(World::default()),
                wake: tokio::sync::Notify::new(),
                client,
                wechat_platform,
            }),
        })
    }

    /// The gateways and the control API. Serving this router alone delivers no notifies; run
    /// [`Simulator::dispatch_notifies`] beside it, or use [`Simulator::serve`].
    pub fn router(&self) -> Router {
        let out_trade_no_path = format!("{}{{out_trade_no}}", wechat::PATH_OUT_TRADE_NO);
        let transaction_id_path = format!("{}{{transaction_id}}", wechat::PATH_TRANSACTION_ID);
        let wechat_other_method = gateway::wechat::method_not_routed;
        Router::new()
            .route(
                alipay::GATEWAY_PATH,
                get(gateway::alipay::gateway).post(gateway::alipay::gateway),
            )
            .route(
                alipay::v3::PATH_PRECREATE,
                post(gateway::alipay_v3::precreate),
            )
            .route(alipay::v3::PATH_QUERY, post(gateway::alipay_v3::query))
            .route(alipay::v3::PATH_CLOSE, post(gateway::alipay_v3::close))
            .route(
                wechat::PATH_NATIVE,
                post(gateway::wechat::create_native).fallback(wechat_other_method),
            )
            .route(
                &out_trade_no_path,
                get(gateway::wechat::query).fallback(wechat_other_method),
            )
            .route(
                wechat::PATH_CERTIFICATES,
                get(gateway::wechat::certificates).fallback(wechat_other_method),
            )
            .route(
                &transaction_id_path,
                get(gateway::wechat::query_by_transaction_id).fallback(wechat_other_method),
            )
            .route(
                &format!("{out_trade_no_path}/close"),
                post(gateway::wechat::close).fallback(wechat_other_method),
            )
            .merge(control::routes())
            .fallback(gateway::not_found)
            .with_state(self.clone())
    }

    /// Serves the router on `listener` and delivers notifies, until `shutdown` completes.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (stop_sender, stop_receiver) = watch::channel(false);
        let stop_sender = Arc::new(stop_sender);
        let dispatcher = tokio::spawn(notify::dispatcher::run_dispatcher(
            Arc::clone(&self.shared),
            stop_receiver.clone(),
        ));
        let trigger = {
            let stop_sender = Arc::clone(&stop_sender);
            tokio::spawn(async move {
                shutdown.await;
                stop_sender.send_replace(true);
            })
        };
        let mut server_stop = stop_receiver;
        let result = axum::serve(listener, self.router())
            .with_graceful_shutdown(async move {
                // An error means the sender is gone, which also means stop.
                let _ = server_stop.wait_for(|stop| *stop).await;
            })
            .await;
        // The server may also have ended on an error: stop the dispatcher either way.
        stop_sender.send_replace(true);
        trigger.abort();
        if let Err(error) = dispatcher.await
            && error.is_panic()
        {
            tracing::error!("the notify dispatcher panicked");
        }
        result
    }

    /// Delivers notifies until `shutdown` completes, for callers that serve
    /// [`Simulator::router`] themselves. Run at most one per simulator.
    pub async fn dispatch_notifies(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let (stop_sender, stop_receiver) = watch::channel(false);
        let dispatcher =
            notify::dispatcher::run_dispatcher(Arc::clone(&self.shared), stop_receiver);
        tokio::pin!(dispatcher);
        tokio::select! {
            () = &mut dispatcher => {}
            () = shutdown => {
                stop_sender.send_replace(true);
                dispatcher.await;
            }
        }
    }

    /// The key that verifies Alipay responses and notifies.
    pub fn alipay_gateway_public_key(&self) -> PublicKey {
        self.shared.config.alipay_gateway_key.public_key()
    }

    /// The key that verifies WeChat Pay responses and notifies now: the configured one until a
    /// rotation (certificate mode) replaces it.
    pub fn wechat_platform_public_key(&self) -> PublicKey {
        self.shared
            .wechat_platform
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .key
            .public_key()
    }

    /// Channel time now, Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    /// Moves channel time forward by `seconds` (at most 400 days a call; more is clamped).
    /// Expired trades close and due notifies go out at once.
    pub fn advance_clock(&self, seconds: u64) {
        self.shared
            .clock
            .advance(seconds.min(limits::CLOCK_ADVANCE_SECONDS_MAX));
        drop(self.shared.settled_world());
        self.shared.wake.notify_one();
    }
}
