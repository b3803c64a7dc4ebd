//! What the audit reads: the database's rows of this run, the channel's side, what the clients
//! were answered and what the merchant received. Plain data.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A payment as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentFact {
    /// Number (`out_trade_no`).
    pub payment_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// Order.
    pub order_id: String,
    /// PENDING, PAID, CLOSED or FAILED.
    pub status: String,
    /// Fen.
    pub amount: i64,
    /// Its currency (the order's, when it was opened).
    pub currency: String,
    /// When the channel stops accepting payment, Unix ms.
    pub expires_at_ms: i64,
    /// Its last change, Unix ms.
    pub updated_at_ms: i64,
    /// The running total of its refunds that are not CLOSED, fen.
    pub refunded: i64,
}

/// A refund as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefundFact {
    /// Number (the channel's `out_refund_no` / `out_request_no`).
    pub refund_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// The client's `Idempotency-Key`: the refund's business key.
    pub request_key: String,
    /// The refunded payment.
    pub payment_no: String,
    /// The payment's order.
    pub order_id: String,
    /// Fen.
    pub amount: i64,
    /// PROCESSING, SUCCESS, CLOSED or ABNORMAL.
    pub status: String,
}

/// An order as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderFact {
    /// Tenant.
    pub tenant_id: String,
    /// Order.
    pub order_id: String,
    /// Status.
    pub status: String,
    /// Whether paying it grants something.
    pub has_entitlement: bool,
    /// Its currency (its amount is in [`Pricing::amount`]).
    pub currency: String,
    /// Its buyer, price and grant, as stored.
    pub pricing: Pricing,
}

/// What an order costs and grants, and to whom: as stored, or as the storm's merchant set it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pricing {
    /// The buyer.
    pub user_id: String,
    /// Fen.
    pub amount: i64,
    /// What paying it grants: sku and quantity.
    pub entitlement: Option<(String, i64)>,
}

/// A grant as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrantFact {
    /// The paying payment.
    pub payment_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// Order.
    pub order_id: String,
    /// To whom.
    pub user_id: String,
    /// What.
    pub sku: String,
    /// How many.
    pub quantity: i64,
    /// When it was revoked (its payment refunded in full), Unix ms; `None` while it holds.
    pub revoked_at_ms: Option<i64>,
}

/// An event in the tenants' event log (`pay_event_log`): written in the transaction of its
/// change, beside its outbox row and its webhook deliveries, and kept for the webhook retention
/// (30 days), where the outbox row may be purged once sent (7 days) — and the outbox also holds
/// rows the service never logged (the storm's events no consumer can process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedEventFact {
    /// Its id (the outbox row's, the `webhook-id` of its messages).
    pub event_id: String,
    /// The tenant it was logged for.
    pub tenant_id: String,
    /// `payment.succeeded`, `payment.closed` or `refund.succeeded`.
    pub event_type: String,
    /// The event as JSON: what its messages carry as `data`.
    pub data: String,
}

impl LoggedEventFact {
    /// The order its payload names, if the payload is an object with one.
    pub fn order_id(&self) -> Option<String> {
        let payload: serde_json::Value = serde_json::from_str(&self.data).ok()?;
        payload.get("order_id")?.as_str().map(str::to_owned)
    }
}

/// A wallet as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletFact {
    /// Tenant.
    pub tenant_id: String,
    /// Owner.
    pub user_id: String,
    /// Fen.
    pub balance: i64,
}

/// A ledger entry as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryFact {
    /// Its number (a deduction's `deduction_no`, a reversal's `reversal_no`).
    pub entry_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// Owner.
    pub user_id: String,
    /// CREDIT or DEBIT.
    pub kind: String,
    /// Fen.
    pub amount: i64,
    /// The debited order.
    pub order_id: Option<String>,
    /// The credit's reference.
    pub reference: String,
    /// The balance right after it.
    pub balance_after: i64,
    /// The wallet's version after it: its place in the wallet's ledger (0: written before the
    /// service recorded it).
    pub wallet_version: i64,
}

/// The service's database, read once.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Payments.
    pub payments: Vec<PaymentFact>,
    /// Orders.
    pub orders: Vec<OrderFact>,
    /// Grants.
    pub grants: Vec<GrantFact>,
    /// Wallets.
    pub wallets: Vec<WalletFact>,
    /// Ledger entries.
    pub entries: Vec<EntryFact>,
    /// Refunds.
    pub refunds: Vec<RefundFact>,
    /// Webhook deliveries.
    pub deliveries: Vec<DeliveryFact>,
    /// Outbox events of the types merchants subscribe to.
    pub events: Vec<EventFact>,
    /// The event log's `payment.succeeded`, `payment.closed` and `refund.succeeded`: what the
    /// event checks read (`audit/events.rs`). `None`: not read (a snapshot made by hand; the
    /// database's snapshot always reads it), and those checks are left out.
    pub logged: Option<Vec<LoggedEventFact>>,
    /// Refund cases: charges this service does not keep.
    pub cases: Vec<CaseFact>,
    /// Events a consumer failed (counted, parked, replayed or discarded).
    pub failures: Vec<FailureFact>,
    /// Outbox rows the relay parked (the broker refused them too often): their ids.
    pub parked_outbox: Vec<String>,
}

/// A refund case as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseFact {
    /// The charged payment.
    pub payment_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// Its order.
    pub order_id: String,
    /// PAID_AFTER_CANCEL, DOUBLE_CHARGE or FAILED_ATTEMPT_CHARGED.
    pub kind: String,
    /// Fen.
    pub amount: i64,
    /// OPEN or REFUND_ASKED.
    pub status: String,
    /// The refund asked for it.
    pub refund_no: Option<String>,
}

/// An event a consumer failed, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureFact {
    /// The message id.
    pub message_id: String,
    /// Which consumer.
    pub consumer: String,
    /// FAILING, PARKED, REPLAYED or DISCARDED.
    pub status: String,
    /// Failed deliveries.
    pub attempts: i64,
}

/// A webhook delivery as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryFact {
    /// Tenant.
    pub tenant_id: String,
    /// The event's id: the messages' `webhook-id`.
    pub event_id: String,
    /// PENDING, DELIVERED or FAILED.
    pub status: String,
    /// Its endpoint's URL (the merchant's, or another endpoint a tenant registered).
    pub url: String,
}

/// An outbox event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFact {
    /// Its id (the webhook-id of its deliveries).
    pub id: String,
    /// `payment.succeeded`, `payment.closed` or `refund.succeeded`.
    pub topic: String,
    /// The payment or refund number it is about.
    pub key: String,
}

/// What the merchant received under one `webhook-id`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceivedWebhook {
    /// Copies with a valid signature (retries and redeliveries included).
    pub copies: u32,
    /// The change the first copy was about: `tenant type payment-or-refund`.
    pub change: String,
    /// Whether a later copy under the same id was about another change.
    pub changes_differ: bool,
}

/// What the storm's merchant received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebhookFacts {
    /// Per `webhook-id`: what the merchant received under it.
    pub received: BTreeMap<String, ReceivedWebhook>,
    /// Messages whose signature did not verify.
    pub bad_signatures: u64,
    /// The merchant's base URL: the webhook invariants are about the deliveries to its
    /// endpoints, not to another a tenant registered (the boundary attacker's stalled one).
    pub merchant_base: String,
}

impl Snapshot {
    /// Only what belongs to one storm run: its tenants, and orders and users whose ids start
    /// with its prefix (a deployment the storm did not start holds other data too).
    pub fn of_run(self, tenants: &std::collections::HashSet<String>, prefix: &str) -> Self {
        let ours = |tenant: &str, id: &str| tenants.contains(tenant) && id.starts_with(prefix);
        Self {
            payments: self
                .payments
                .into_iter()
                .filter(|payment| ours(&payment.tenant_id, &payment.order_id))
                .collect(),
            orders: self
                .orders
                .into_iter()
                .filter(|order| ours(&order.tenant_id, &order.order_id))
                .collect(),
            grants: self
                .grants
                .into_iter()
                .filter(|grant| ours(&grant.tenant_id, &grant.order_id))
                .collect(),
            wallets: self
                .wallets
                .into_iter()
                .filter(|wallet| ours(&wallet.tenant_id, &wallet.user_id))
                .collect(),
            entries: self
                .entries
                .into_iter()
                .filter(|entry| ours(&entry.tenant_id, &entry.user_id))
                .collect(),
            refunds: self
                .refunds
                .into_iter()
                .filter(|refund| ours(&refund.tenant_id, &refund.order_id))
                .collect(),
            deliveries: self
                .deliveries
                .into_iter()
                .filter(|delivery| tenants.contains(&delivery.tenant_id))
                .collect(),
            // Kept whole: the check keeps those about this run's payments and refunds.
            events: self.events,
            // The run's tenants' events about its orders (and any whose payload names no
            // order: the check reports those).
            logged: self.logged.map(|logged| {
                logged
                    .into_iter()
                    .filter(|event| {
                        tenants.contains(&event.tenant_id)
                            && event
                                .order_id()
                                .is_none_or(|order| order.starts_with(prefix))
                    })
                    .collect()
            }),
            cases: self
                .cases
                .into_iter()
                .filter(|case| ours(&case.tenant_id, &case.order_id))
                .collect(),
            // Kept whole: every one must be accounted for (the database is the storm's own).
            failures: self.failures,
            parked_outbox: self.parked_outbox,
        }
    }
}

/// A trade as the channel sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TradeFact {
    /// PENDING, PAID, FINISHED, CLOSED or REFUNDED.
    pub status: String,
    /// Whether the channel's query shows it (an unscanned Alipay code: no).
    pub exists: bool,
    /// What went back to the buyer: its successful refunds' sum, fen.
    pub refunded_fen: i64,
    /// Its refunds.
    pub refunds: Vec<ChannelRefundFact>,
}

/// A refund in a trade's refund book at the channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelRefundFact {
    /// The merchant's number (`out_refund_no`).
    pub out_refund_no: String,
    /// Fen.
    pub amount: i64,
    /// PROCESSING, SUCCESS, CLOSED or ABNORMAL.
    pub status: String,
}

/// The channel's side: its ledger and its trades.
#[derive(Clone, Debug, Default)]
pub struct ChannelFacts {
    /// Charges per `out_trade_no` (amounts).
    pub charges: HashMap<String, Vec<i64>>,
    /// Refunds per `out_trade_no` in the ledger (amounts).
    pub refunded: HashMap<String, Vec<i64>>,
    /// Trades by `out_trade_no`; a number missing here was never created at the channel.
    pub trades: HashMap<String, TradeFact>,
}

/// What the storm's clients were told.
#[derive(Clone, Debug, Default)]
pub struct ClientFacts {
    /// Credits answered 200, by (tenant, user, key): amount.
    pub credits: HashMap<(String, String, String), i64>,
    /// Payments the clients were answered with (the `payment_no` of an answer to a payment's
    /// creation): each must be in the database, whatever failed over after the answer.
    pub payments: BTreeSet<String>,
    /// Deducts answered 200, by (tenant, user, key): (order, amount).
    pub deducts: HashMap<(String, String, String), (String, i64)>,
    /// Replays whose answer differed from the original (description).
    pub replay_mismatches: Vec<String>,
    /// 5xx answers outside every fault window, and 500s anywhere (description).
    pub unexcused_errors: Vec<String>,
    /// Faults of the schedule whose injection failed (description): a run that did not strike
    /// what it says it struck proves less than its report claims.
    pub faults_not_injected: Vec<String>,
    /// Payments the attacker aimed at: ones the workload left waiting (never paid, never
    /// closed), so that any change before their expiry is the attacker's doing.
    pub attacked: BTreeSet<String>,
    /// Attacks that had to be refused and were acknowledged (description).
    pub accepted_attacks: Vec<String>,
    /// Refunds answered 200 or 201, by (tenant, request key).
    pub refunds: HashMap<(String, String), AnsweredRefund>,
    /// Reversals answered 200, by (tenant, user, deduction number).
    pub reversals: HashMap<(String, String, String), AnsweredReversal>,
    /// What the storm's merchant received (`None`: no merchant, a deployment the storm did
    /// not start).
    pub webhooks: Option<WebhookFacts>,
    /// Events no consumer can process that the storm wrote into the outbox (message ids).
    pub poisoned: BTreeSet<String>,
    /// Whether the parked events are the storm's to count (a deployment it started).
    pub parked_checked: bool,
    /// Every keyed operation the clients invoked, with its attempts (the history check).
    pub history: Vec<super::history::Operation>,
    /// Every attempt as one operation in Jepsen's shape (`--history`, the linearizability
    /// check).
    pub operations: Vec<super::jepsen::ClientOp>,
    /// Every order the storm's merchant made with the tenant's secret key, by (tenant, order
    /// id), as it priced it: written before the request was sent, so an order whose answer was
    /// lost is here too. `None`: not recorded (the check of who priced is left out).
    pub priced: Option<HashMap<(String, String), Pricing>>,
}

/// What the answers to one refund request key said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnsweredRefund {
    /// The payment asked to refund.
    pub payment_no: String,
    /// Every amount asked for under the key and named by an answer (one, unless a key made
    /// two refunds or an answer was not the refund asked for).
    pub amounts: BTreeSet<i64>,
    /// Every refund number an answer named (one, unless a key made two refunds).
    pub refund_nos: BTreeSet<String>,
}

/// What the answers to one deduction's reversal said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnsweredReversal {
    /// Every reversal number an answer named (one, unless the deduction was put back twice).
    pub reversal_nos: BTreeSet<String>,
    /// Every amount an answer named.
    pub amounts: BTreeSet<i64>,
}
