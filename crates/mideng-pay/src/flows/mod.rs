//! The service's use cases, one module each, as a request travels: plain async functions over
//! small ports ([`Ports`]: storage, channels, locks, clock, settings) that return a domain
//! outcome. The API and the pages parse, call a flow and render its outcome, and never a
//! storage port; the workers call the same flows with their own ports, never the API.
//!
//! | flow | what it decides |
//! |---|---|
//! | [`order`] | create an order once per order id; move it by compare-and-set |
//! | [`payment::create`](mod@payment::create) | open one pending payment per order under the order lock, create its trade at the channel |
//! | [`payment::close`](mod@payment::close) | close at the channel first, then here; a buyer who paid first wins |
//! | [`payment::settle`](mod@payment::settle) | the one table "the channel says X → do Y", used by creation, close and reconciliation |
//! | [`payment::show`](mod@payment::show) | one payment with its refunds and what is left to refund; whether the demo checkout may pay it |
//! | [`refund`] | one refund per request key, within the paid amount, asked of the channel under its own number |
//! | [`notify`] | verify a channel notify, then apply it once per notify id |
//! | [`webhook`] | register a merchant endpoint (checked URL, fresh secret), show deliveries, redeliver by hand |
//! | [`wallet`] | credit and deduct, each with its stored answer in one transaction; a deduction put back once |
//! | [`grant`] | the entitlement consumer's effect (one grant per paid order, a revocation per full refund); a parked event replayed or discarded |
//! | [`operator`] | what a person settles by hand: reconciliation cases, parked events; the overview they decide from |
//!
//! The use cases that run beside the API call the same flows and ports from `workers/`:
//! reconcile ([`crate::workers::reconcile`], which applies the channel's word through
//! [`payment::settle`](mod@payment::settle)), deliver a webhook ([`crate::workers::webhooks`]),
//! grant and revoke entitlements ([`crate::workers::consumer`], through [`grant`]) and match the daily bills
//! ([`crate::workers::bill`]).
//!
//! A flow reads what it needs through the ports and never writes SQL: what several tables do
//! together in one transaction is a port method (`store/transactions/`), and the rules a
//! transaction applies are pure functions in [`crate::domain`] (the one-PAID rule, notify
//! matching, refund arithmetic, the state machines).
//!
//! Every idempotency decision a flow takes is logged and counted by [`decision`].

pub mod clock_guard;
pub mod events;
pub mod grant;
pub mod notify;
pub mod operator;
pub mod order;
pub mod order_lock;
pub mod payment;
pub mod refund;
pub mod wallet;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use mideng::Name;
use mideng::lock::LockStore;
use mideng_channel::ChannelKind;
use mideng_channel::adapter::Channel;

pub use crate::domain::clock::{Clock, SystemClock};
use crate::store::Store;

/// Operation names: the scopes of keys, tokens and counters.
pub mod operation {
    /// Creating a payment attempt.
    pub const PAYMENT_CREATE: &str = "payment.create";
    /// Closing a payment attempt.
    pub const PAYMENT_CLOSE: &str = "payment.close";
    /// Refunding a payment.
    pub const REFUND_CREATE: &str = "refund.create";
    /// Crediting a wallet.
    pub const WALLET_CREDIT: &str = "wallet.credit";
    /// Deducting from a wallet.
    pub const WALLET_DEDUCT: &str = "wallet.deduct";
    /// Putting a deduction back.
    pub const WALLET_REVERSE: &str = "wallet.reverse";
    /// Creating an order.
    pub const ORDER_CREATE: &str = "order.create";
    /// Transitioning an order.
    pub const ORDER_TRANSITION: &str = "order.transition";
    /// An Alipay notify.
    pub const NOTIFY_ALIPAY: &str = "notify.alipay";
    /// A WeChat Pay notify.
    pub const NOTIFY_WECHAT: &str = "notify.wechat";
    /// A reconciliation round's decision about one payment.
    pub const RECONCILE: &str = "reconcile";
}

/// How payments behave.
#[derive(Clone, Debug)]
pub struct PaymentSettings {
    /// Whether creating a payment needs a one-time `Idempotency-Token` (default true).
    pub token_required: bool,
    /// How long a payment attempt accepts payment at the channel (default 15 minutes).
    pub expire_after: Duration,
    /// How far this instance's clock may be from the database's before it refuses requests and
    /// its reconciliation and webhook deliveries wait ([`clock_guard`]; default
    /// [`crate::limits::CLOCK_SKEW_MAX`]; zero: never).
    pub clock_skew_max: Duration,
    /// Clock grace past a trade's expiry before "the channel has no such trade" (or "still
    /// pending") closes it, in the close route and in reconciliation alike (default
    /// [`crate::limits::EXPIRY_GRACE`]).
    pub expiry_grace: Duration,
    /// How long a request waits for the order's lock before re-checking the order (default
    /// 2 s).
    pub lock_wait: Duration,
    /// The order lock's lease: how long a holder that stops renewing (dead, or paused) keeps
    /// the order from the next writer (default [`crate::limits::ORDER_LOCK_TTL`], renewed
    /// every third of it). Shorter only where a test must see a paused holder's lock taken
    /// over within its run (`mideng storm --processes`).
    pub order_lock_lease: Duration,
    /// How long a duplicate request waits for the first one before answering 409 (default 5 s).
    pub duplicate_wait: Duration,
    /// How long the answers of money-moving requests (payment creation, credit, deduct) are
    /// kept for replay (default 30 days).
    pub funds_retention: Duration,
    /// The idempotency machinery on the money routes: keys, tokens and records (default true).
    /// Off only for measuring its cost (`mideng bench`), never in production: payment creation,
    /// credit and deduct then run without an `Idempotency-Key` layer or a token guard, and the
    /// wallet operations complete no record (each is still one transaction, and the ledger's
    /// one-debit-per-order constraint still refuses a second deduct for an order).
    pub idempotency: bool,
    /// One layer turned off, for the storm's proof of what each layer prevents (default
    /// none). A test switch: never in production.
    pub broken: Option<BrokenLayer>,
    /// Completed answers each instance keeps in memory to answer replays without a round
    /// trip (default 10 000; 0: none), each for at most [`Self::replay_cache_ttl`] and never
    /// past its record's retention (`mideng::store::cached`).
    pub replay_cache_entries: usize,
    /// How long a completed answer stays in an instance's memory at most (default 10 minutes).
    pub replay_cache_ttl: Duration,
    /// How long an instance keeps an API key it resolved (default 5 s; zero: none): the delay
    /// before a re-keyed or removed key stops working there.
    pub tenant_cache: Duration,
    /// How deducts race on one wallet (default
    /// [`WalletStrategy::ConditionalUpdate`](crate::domain::wallet::WalletStrategy)).
    pub wallet_strategy: crate::domain::wallet::WalletStrategy,
    /// Whether tenants may register webhook endpoints on loopback, private and link-local
    /// addresses (default false).
    pub webhook_private_targets: bool,
    /// IP and port pairs that webhook endpoints may name although they are not globally
    /// routable (default none): the operator's own receivers
    /// ([`crate::domain::outbound::TargetPolicy::allowed`]).
    pub webhook_allowed_targets: Vec<std::net::SocketAddr>,
    /// Whether reconciliation refunds the refund cases by itself — a payment PAID after its
    /// order was canceled, a charge for an order already paid, a charge for a failed attempt
    /// (default true); off, the cases are only recorded, counted and logged.
    pub automatic_refunds: bool,
}

/// A layer the storm may turn off to show what it prevents, or that a deeper one holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokenLayer {
    /// No one-time token guard on payment creation.
    Tokens,
    /// No per-order lock on payment creation and close.
    OrderLock,
    /// No dedup record for channel notifies.
    NotifyDedup,
    /// No dedup claim in the entitlement consumer.
    GrantDedup,
    /// The order lock's fences not enforced: a write under the lock whose fence a later
    /// holder has passed (the holder was paused past its lease) commits anyway, and is
    /// counted (`fence` layer, `written-stale`) and logged as a fenced-off write.
    Fences,
}

impl PaymentSettings {
    /// Whether `layer` is on.
    pub fn layer_on(&self, layer: BrokenLayer) -> bool {
        self.broken != Some(layer)
    }
}

impl PaymentSettings {
    /// Where webhook endpoints may point: one policy for registration and delivery, so that
    /// the two never disagree.
    pub fn webhook_targets(&self) -> crate::domain::outbound::TargetPolicy {
        crate::domain::outbound::TargetPolicy {
            allow_private: self.webhook_private_targets,
            allowed: self.webhook_allowed_targets.clone(),
        }
    }
}

impl Default for PaymentSettings {
    fn default() -> Self {
        Self {
            token_required: true,
            expire_after: Duration::from_secs(15 * 60),
            clock_skew_max: crate::limits::CLOCK_SKEW_MAX,
            expiry_grace: crate::limits::EXPIRY_GRACE,
            lock_wait: Duration::from_secs(2),
            order_lock_lease: crate::limits::ORDER_LOCK_TTL,
            duplicate_wait: Duration::from_secs(5),
            funds_retention: mideng::http::FUNDS_RETENTION,
            idempotency: true,
            broken: None,
            replay_cache_entries: 10_000,
            replay_cache_ttl: Duration::from_secs(10 * 60),
            tenant_cache: Duration::from_secs(5),
            wallet_strategy: crate::domain::wallet::WalletStrategy::default(),
            webhook_private_targets: false,
            webhook_allowed_targets: Vec::new(),
            automatic_refunds: true,
        }
    }
}

/// The configured channel adapters, at most one per channel (configurations are
/// deployment-wide and shared by the tenants).
#[derive(Clone, Default)]
pub struct Channels {
    alipay: Option<Arc<dyn Channel>>,
    wechat: Option<Arc<dyn Channel>>,
}

impl Channels {
    /// The adapters the service takes payments through.
    pub fn new(alipay: Option<Arc<dyn Channel>>, wechat: Option<Arc<dyn Channel>>) -> Self {
        Self { alipay, wechat }
    }

    /// The adapter of `kind`, if configured.
    pub fn get(&self, kind: ChannelKind) -> Option<&Arc<dyn Channel>> {
        match kind {
            ChannelKind::Alipay => self.alipay.as_ref(),
            ChannelKind::Wechat => self.wechat.as_ref(),
        }
    }

    /// The adapter a stored payment goes through, if its channel is known and configured.
    pub fn named(&self, channel: &str) -> Option<&Arc<dyn Channel>> {
        ChannelKind::parse(channel)
            .ok()
            .and_then(|kind| self.get(kind))
    }
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Channels")
            .field("alipay", &self.alipay.is_some())
            .field("wechat", &self.wechat.is_some())
            .finish()
    }
}

/// What every flow works with.
#[derive(Clone)]
pub struct Ports {
    /// Storage, one port per aggregate.
    pub store: Store,
    /// The channel adapters.
    pub channels: Channels,
    /// Per-order and per-payment locks (Redis, or in-process).
    pub locks: Arc<dyn LockStore>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Whether the clock agrees with the database's ([`clock_guard`]).
    pub clock_guard: Arc<clock_guard::ClockGuard>,
    /// Payment behaviour.
    pub settings: PaymentSettings,
}

impl std::fmt::Debug for Ports {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Ports")
            .field("store", &self.store)
            .field("channels", &self.channels)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Ports {
    /// The tenant whose API key hashes to `key_hash`, and which kind of key it is.
    pub async fn tenant_by_key(
        &self,
        key_hash: &str,
    ) -> Result<Option<(String, crate::domain::keys::KeyKind)>, mideng::StoreError> {
        self.store.tenants.tenant_by_key(key_hash).await
    }

    /// Readiness: the database answers one round trip.
    pub async fn ready(&self) -> Result<(), mideng::StoreError> {
        self.store.backend.ping().await
    }

    /// Whether a trade that expired at `expires_at_ms` is past its expiry and the clock grace.
    pub fn expired(&self, expires_at_ms: i64) -> bool {
        self.clock.now_ms()
            > expires_at_ms.saturating_add(mideng::clock::duration_ms(self.settings.expiry_grace))
    }
}

/// The name of an order's lock in the lock store (Redis keys carry it under the store's
/// prefix).
pub fn order_lock_name(tenant: &str, order_id: &str) -> Option<Name> {
    Name::parse(&format!("order:{tenant}:{order_id}")).ok()
}

/// Logs and counts one idempotency decision of the service (the HTTP layer logs its own key
/// and token decisions): `layer` is lock, constraint, cas, dedup, business-key, signature or
/// reconciliation.
pub fn decision(
    layer: &'static str,
    operation: &'static str,
    tenant: &str,
    subject: &str,
    outcome: &'static str,
) {
    tracing::info!(
        target: "mideng::decision",
        layer, operation, tenant, subject, outcome, "idempotency decision"
    );
    metrics::counter!(
        crate::metrics::SERVICE_DECISIONS,
        "layer" => layer, "operation" => operation, "outcome" => outcome
    )
    .increment(1);
}
