//! Every bound the simulator enforces, in one place.
//!
//! The simulator takes input from tests, from the storm and from the service under test, any
//! of which may be broken on purpose. Each bound below keeps one of them from growing the
//! simulator's memory or time without limit; units are named last.

use std::time::Duration;

/// Largest request body on any endpoint. Gateway requests are a few hundred bytes; 64 KiB is
/// generous and still keeps a hostile client from making the simulator buffer megabytes.
pub(crate) const REQUEST_BODY_BYTES_MAX: usize = 64 * 1024;

/// Most trades (unscanned precreates included) held at once. A storm run creates tens of
/// thousands; a million is far beyond any test while capping memory at a few hundred MB.
pub(crate) const TRADES_MAX: usize = 1_000_000;

/// Most refunds of one trade: WeChat Pay's documented limit of partial refunds per order
/// (Alipay's is higher), held on both channels so that one trade's refund book stays small.
pub(crate) const REFUNDS_PER_TRADE_MAX: usize = 50;

/// Longest refund reason, in characters: Alipay's `refund_reason` (WeChat Pay's `reason` is
/// held to 80 characters by its own gateway).
pub(crate) const REFUND_REASON_CHARS_MAX: usize = 256;

/// Most notifies waiting for a delivery at once. Each trade has at most a handful of notifies,
/// so this is only reached when a merchant stays down for a long storm; further notifies are
/// recorded as dropped instead of queued.
pub(crate) const NOTIFIES_PENDING_MAX: usize = 200_000;

/// Most delivery records kept per notify: 16 scheduled deliveries, doubled by the duplicate and
/// concurrent policies, fit with room to spare.
pub(crate) const DELIVERY_RECORDS_PER_NOTIFY_MAX: usize = 64;

/// Most notify deliveries in flight at once. Deliveries go to one merchant on loopback; more
/// parallelism would only queue inside the merchant, and fewer would let one slow merchant
/// answer (up to the timeout) hold back every other trade.
pub(crate) const DELIVERIES_IN_FLIGHT_MAX: usize = 64;

/// How long one delivery may take, in real time. WeChat Pay asks merchants to answer within
/// 5 s and both channels treat silence as a failed delivery.
pub(crate) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of a merchant's answer is read. An acknowledgement is a word; anything longer is
/// read only far enough to record it.
pub(crate) const DELIVERY_ANSWER_BYTES_MAX: usize = 64 * 1024;

/// How much of a merchant's answer is kept in the trade's record, in bytes.
pub(crate) const DELIVERY_ANSWER_RECORDED_BYTES_MAX: usize = 256;

/// Longest sleep of the dispatcher between checks, in real time. The dispatcher is woken
/// whenever work arrives or the clock is advanced; this bound only guards against a missed
/// wake-up or rounding in the clock conversion.
pub(crate) const DISPATCHER_IDLE_MAX: Duration = Duration::from_millis(500);

/// Longest jump of one `/sim/clock/advance`, in seconds (400 days: beyond every expiry and
/// retry schedule the channels have).
pub(crate) const CLOCK_ADVANCE_SECONDS_MAX: u64 = 400 * 24 * 60 * 60;

/// Fastest clock: one real second is at most 11.5 channel days. Faster clocks make every
/// channel timer fire before a single HTTP round trip completes.
pub(crate) const CLOCK_SPEED_MAX: u32 = 1_000_000;

/// Longest `delay_seconds` of a notify policy (30 days, beyond the retry schedules).
pub(crate) const POLICY_DELAY_SECONDS_MAX: u64 = 30 * 24 * 60 * 60;

/// Hold of the `delay` and `reorder` policies when the request names no `delay_seconds`.
pub(crate) const POLICY_DELAY_SECONDS_DEFAULT: u64 = 60;

/// Most per-trade notify policies held at once.
pub(crate) const TRADE_POLICIES_MAX: usize = 100_000;

/// Most calls one `/sim/fail-next` may fail.
pub(crate) const FAULT_TIMES_MAX: u32 = 1_000;

/// Longest merchant order number. Alipay allows 64 characters, WeChat Pay 32; the simulator
/// accepts the larger on both so that the service's numbers are never refused for length.
pub(crate) const OUT_TRADE_NO_BYTES_MAX: usize = 64;

/// Longest subject (Alipay) or description (WeChat Pay), in characters.
pub(crate) const SUBJECT_CHARS_MAX: usize = 256;

/// Longest notify URL, in bytes.
pub(crate) const NOTIFY_URL_BYTES_MAX: usize = 256;
