//! Every bound of the service, and why it has the value it has. The toolkit's own bounds (key
//! and scope sizes, stored responses, retries) are in `mideng::limits`; the channel's amount
//! bound is `mideng_channel::money::AMOUNT_FEN_MAX`; client identifiers are bounded by
//! [`crate::domain::ids::ID_BYTES_MAX`] (64 bytes, what both channels accept in their own
//! fields); lists (a wallet's entries, a user's grants, a reconciliation page's default) are
//! at most 100 rows, in the statements themselves.

use std::time::Duration;

/// Largest request body the API reads, notifies included. The largest legitimate body is a
/// channel notify (a few KiB); 64 KiB leaves room and bounds what a client can make us buffer.
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// Longest API key read from `Authorization: Bearer`. Issued keys are 68 bytes (`mdk_` and 64
/// hex digits); anything much longer is not a key and is refused before it is hashed.
pub const API_KEY_BYTES_MAX: usize = 256;

/// Lease of an API request's idempotency record: the request holds its key at most this long
/// if its process dies mid-request; after it, a retry may take the key over. Above
/// [`HANDLER_TIMEOUT`], so a live handler never loses its key.
pub const ROUTE_LEASE: Duration = Duration::from_secs(60);

/// Longest an API handler runs before its key is freed and the client told to retry: well
/// above a channel call (bounded by the adapters' own timeouts) and the order lock's wait.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// The order lock's lease: renewed while its flow works, so a holder that dies frees the order
/// after at most this.
pub const ORDER_LOCK_TTL: Duration = Duration::from_secs(30);

/// How long a flow may keep the order's lock by renewing it (`mideng::lock::keep_alive`): a
/// flow makes at most two channel calls, each bounded by the adapter's timeout, so a holder
/// still renewing after this is stuck, and the order is freed for the next writer.
pub const ORDER_LOCK_HOLD_MAX: Duration = Duration::from_secs(120);

/// Lease of a channel notify's dedup record. The record is written in the same transaction as
/// the effect, so the lease only matters if that transaction outlives it.
pub const NOTIFY_LEASE: Duration = Duration::from_secs(30);

/// How long a processed notify id is remembered: longer than the channels' retry schedules
/// (Alipay retries for about 25 hours, WeChat Pay for 24).
pub const NOTIFY_RETENTION: Duration = Duration::from_secs(3 * 24 * 3600);

/// Lease of an entitlement grant's dedup claim (written in the grant's own transaction).
pub const GRANT_LEASE: Duration = Duration::from_secs(30);

/// How long a processed `payment.succeeded` is remembered: far beyond any broker redelivery.
pub const GRANT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Default bound on how far an instance's clock may be from the database's
/// ([`crate::flows::clock_guard`]): half the margin the order lock's renewals leave (its 30 s
/// lease renewed every 10 s tolerates about 20 s), far inside the channels' signature windows
/// (WeChat Pay: 5 minutes) and the expiry grace.
pub const CLOCK_SKEW_MAX: Duration = Duration::from_secs(10);

/// Default clock grace past a trade's expiry: clocks differ between us and the channel, so a
/// trade the channel does not know (or still calls pending) is treated as payable until this
/// long after its expiry. One setting ([`crate::flows::PaymentSettings::expiry_grace`]) used by
/// close and reconciliation alike.
pub const EXPIRY_GRACE: Duration = Duration::from_secs(60);

/// How long a one-time token (`POST /v1/tokens`) stays valid: a payment page left open for
/// half an hour asks for a new one.
pub const TOKEN_TTL: Duration = Duration::from_secs(30 * 60);

/// How long the demo checkout waits for the simulator when it asks it to pay.
pub const PAGE_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest text the demo checkout draws as a QR code (a `pay_url` is far shorter; a version 40
/// code holds at most 2,953 bytes).
pub const QR_TEXT_BYTES_MAX: usize = 1_024;

/// How long the console's counts by state are reused: any number of open consoles costs one
/// round of counting statements per interval.
pub const CONSOLE_OVERVIEW_TTL: Duration = Duration::from_secs(2);

/// The most first-time deducts one group commit takes (`group-commit` wallet strategy): what
/// queued while the groups before it were in flight, up to this many, goes as one statement.
pub const GROUP_COMMIT_REQUESTS_MAX: usize = 32;

/// Groups of deducts in flight at once per instance, each on a connection of its own.
pub const GROUP_COMMIT_IN_FLIGHT: usize = 2;

/// Deducts waiting for a group per instance; past this a deduct goes its own way at once.
pub const GROUP_COMMIT_QUEUE_MAX: usize = 1_024;

/// How long an order's client secret lets a page pay it (`POST /v1/orders` answers it with
/// `client_secret_expires_at`): a buyer finishes a checkout within a day, and a secret copied
/// from a page stops opening anything after it. The merchant makes a new order past it.
pub const CLIENT_SECRET_TTL: Duration = Duration::from_secs(24 * 3600);

/// Unspent one-time tokens one order's page may hold at once (the page's own token store, apart
/// from the merchant's server's, so that no number of visitors exhausts what the server needs).
/// A page takes one when it opens; five open tabs of one checkout are plenty.
pub const PAGE_TOKENS_PER_ORDER_MAX: u32 = 5;

/// Unspent page tokens in all, across every order of every tenant (the page's own store).
pub const PAGE_TOKENS_TOTAL_MAX: u32 = 100_000;

/// Tokens one order's page may take per minute (per instance): a page takes one when it opens
/// and after a refusal, so ten a minute is a buyer reloading often, not a script.
pub const PAGE_TOKENS_PER_MINUTE: u32 = 10;

/// Payment requests one order's page may send per minute (per instance): a checkout sends one
/// per click and a few network retries under the same key.
pub const PAGE_PAYMENTS_PER_MINUTE: u32 = 20;

/// Reads one order's page may send per minute (per instance): the demo checkout follows its
/// order, then its grant, once a second; a second tab doubles that, a third is refused.
pub const PAGE_READS_PER_MINUTE: u32 = 180;

/// New payment attempts (each a trade at the channel under the merchant's credentials) one
/// order may get from its page in [`PAGE_ATTEMPT_WINDOW`]: an order has one pending attempt at
/// a time, so a new one follows only a failed or closed one; five an hour is a buyer switching
/// channels, not a loop against the channel's per-merchant limits.
pub const PAGE_ATTEMPTS_PER_WINDOW: usize = 5;

/// The window of [`PAGE_ATTEMPTS_PER_WINDOW`].
pub const PAGE_ATTEMPT_WINDOW: Duration = Duration::from_secs(3600);

/// Orders the demo checkout may make per minute (per instance), on the demo tenant's account:
/// its route is open to anyone who loads the page.
pub const DEMO_CHECKOUTS_PER_MINUTE: u32 = 60;

/// Orders (pages) whose rates one instance keeps at once; the entries of pages quiet for a
/// minute are dropped when it is reached, and past it a new page is refused until then.
pub const PAGE_RATE_ENTRIES_MAX: usize = 100_000;
