//! The API's request and response bodies (JSON, snake_case). Amounts are integer fen; times
//! are RFC 3339 in UTC.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::events::Grant;
use crate::domain::order::Order;
use crate::domain::payment::Payment;
use crate::domain::wallet::WalletEntry;

pub use super::fields::AmountField;

pub use crate::domain::rfc3339;

/// `POST /v1/orders`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrder {
    /// Unique per tenant: the business key that makes creation idempotent.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$", min_length = 1, max_length = 64)]
    pub order_id: String,
    /// The buyer.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$", min_length = 1, max_length = 64)]
    pub user_id: String,
    /// Fen, 1 ..= 10^10.
    #[schema(value_type = i64, minimum = 1, maximum = 10_000_000_000_i64)]
    pub amount: AmountField,
    /// `CNY`.
    #[schema(pattern = "^CNY$")]
    pub currency: String,
    /// What paying the order grants.
    #[serde(default)]
    pub entitlement: Option<EntitlementBody>,
}

/// An entitlement: `quantity` units of `sku`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EntitlementBody {
    /// Stock-keeping unit.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$", min_length = 1, max_length = 64)]
    pub sku: String,
    /// 1 ..= 1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub quantity: u32,
}

/// An order with its payment attempts.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct OrderView {
    /// Order id.
    pub order_id: String,
    /// Buyer.
    pub user_id: String,
    /// Fen.
    pub amount: i64,
    /// `CNY`.
    pub currency: String,
    /// CREATED, PAID, SHIPPED, DELIVERED, COMPLETED, CANCELED, REFUNDING or REFUNDED.
    pub status: String,
    /// What paying grants.
    pub entitlement: Option<EntitlementBody>,
    /// Bumped by every transition.
    pub version: i64,
    /// Attempts, oldest first.
    pub payments: Vec<PaymentView>,
    /// What the merchant's server hands its checkout page so that the page, with the
    /// publishable key, can pay this order and read it (`Mideng-Client-Secret`). Shown to the
    /// secret key only; absent for orders made before client secrets existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// When the client secret stops opening anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_expires_at: Option<String>,
}

impl OrderView {
    /// What a page sees of its order: the order without its client secret (the page has it).
    pub fn for_page(order: &Order, payments: &[Payment]) -> Self {
        Self {
            client_secret: None,
            client_secret_expires_at: None,
            ..Self::of(order, payments)
        }
    }

    /// From stored rows, as the merchant's server sees them.
    pub fn of(order: &Order, payments: &[Payment]) -> Self {
        use mideng::state::StateMachine;
        Self {
            order_id: order.order_id.clone(),
            user_id: order.user_id.clone(),
            amount: order.amount_fen,
            currency: order.currency.clone(),
            status: order.status.as_str().to_owned(),
            entitlement: order
                .entitlement_sku
                .clone()
                .zip(order.entitlement_quantity)
                .map(|(sku, quantity)| EntitlementBody {
                    sku,
                    quantity: u32::try_from(quantity).unwrap_or(0),
                }),
            version: order.version,
            payments: payments.iter().map(PaymentView::of).collect(),
            client_secret: order
                .client_secret
                .as_ref()
                .map(|secret| secret.expose().to_owned()),
            client_secret_expires_at: order.client_secret_expires_at_ms.map(rfc3339),
        }
    }
}

/// `POST /v1/orders/{order_id}/transitions`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransitionBody {
    /// The target status.
    #[schema(pattern = "^(CREATED|PAID|SHIPPED|DELIVERED|COMPLETED|CANCELED|REFUNDING|REFUNDED)$")]
    pub to: String,
}

/// `POST /v1/orders/{order_id}/payments`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePayment {
    /// `alipay` or `wechat`.
    #[schema(pattern = "^(alipay|wechat)$")]
    pub channel: String,
}

/// A payment attempt.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct PaymentView {
    /// The channel's `out_trade_no`.
    pub payment_no: String,
    /// Order id.
    pub order_id: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// Fen.
    pub amount: i64,
    /// `CNY`.
    pub currency: String,
    /// PENDING, PAID, CLOSED or FAILED.
    pub status: String,
    /// What the buyer scans (absent until the channel answered).
    pub pay_url: Option<String>,
    /// When the channel stops accepting payment.
    pub expires_at: String,
    /// The channel's trade number, once paid.
    pub channel_trade_no: Option<String>,
    /// When it was paid.
    pub paid_at: Option<String>,
    /// When the attempt was created.
    pub created_at: String,
    /// Fen still refundable (the amount less every refund not closed); shown by
    /// `GET /v1/payments/{payment_no}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refundable: Option<i64>,
    /// Its refunds, oldest first (at most 100); shown by `GET /v1/payments/{payment_no}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refunds: Option<Vec<RefundView>>,
}

/// `POST /v1/webhook-endpoints`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// Where messages are posted: an absolute http(s) URL of at most 2048 bytes.
    #[schema(format = "uri", min_length = 1, max_length = 2048)]
    pub url: String,
    /// Event types: `payment.succeeded`, `payment.closed`, `refund.succeeded`.
    #[schema(value_type = Vec<EventType>, min_items = 1, max_items = 3)]
    pub events: Vec<String>,
}

/// An event type a webhook endpoint may subscribe to (documents the strings of `events`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub enum EventType {
    /// A payment succeeded.
    #[schema(rename = "payment.succeeded")]
    PaymentSucceeded,
    /// A payment was closed unpaid.
    #[schema(rename = "payment.closed")]
    PaymentClosed,
    /// A refund succeeded.
    #[schema(rename = "refund.succeeded")]
    RefundSucceeded,
}

/// A webhook endpoint, with its signing secret.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct EndpointView {
    /// Its id.
    pub endpoint_id: String,
    /// Where messages are posted.
    pub url: String,
    /// Subscribed event types.
    pub events: Vec<String>,
    /// The signing secret (`whsec_` + base64 key), for verifying `webhook-signature`.
    pub secret: String,
    /// ENABLED, or DISABLED by the tenant or after a delivery exhausted its schedule
    /// (enabling it, or a redelivery by hand, starts its waiting deliveries again).
    #[schema(pattern = "^(ENABLED|DISABLED)$")]
    pub status: String,
    /// When it was registered.
    pub created_at: String,
    /// Until when the secret before the last rotation signs too (every message carries both
    /// signatures until then); absent when it no longer does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<String>,
}

/// `PATCH /v1/webhook-endpoints/{endpoint_id}`: each field given replaces the endpoint's.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// A new URL, checked as at registration; another of the tenant's endpoints may not have it.
    #[schema(format = "uri", min_length = 1, max_length = 2048)]
    pub url: Option<String>,
    /// New event types.
    #[schema(value_type = Option<Vec<EventType>>, min_items = 1, max_items = 3)]
    pub events: Option<Vec<String>>,
    /// `ENABLED` (its waiting deliveries go out, each when due) or `DISABLED` (nothing is sent;
    /// new events still wait for it).
    #[schema(pattern = "^(ENABLED|DISABLED)$")]
    pub status: Option<String>,
}

/// `POST /v1/webhook-endpoints/{endpoint_id}/rotate-secret`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// Seconds the current secret keeps signing beside the new one, 0 ..= 604800 (a week);
    /// default 86400 (a day). 0 stops it at once.
    #[schema(minimum = 0, maximum = 604800)]
    pub previous_secret_valid_secs: Option<u64>,
}

/// One attempt of a delivery.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct AttemptView {
    /// 1, 2, …
    pub attempt: i64,
    /// When.
    pub at: String,
    /// The endpoint's HTTP status, when it answered.
    pub status_code: Option<i64>,
    /// Why it did not count (a non-2xx, a timeout, a refused connection).
    pub error: Option<String>,
    /// How long it took, ms.
    pub duration_ms: i64,
}

/// One event for one endpoint, with its attempts.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct DeliveryView {
    /// Its id.
    pub delivery_id: String,
    /// The message's `webhook-id`: the event's id, the same on every attempt.
    pub webhook_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// The event type.
    pub event_type: String,
    /// PENDING, DELIVERED or FAILED.
    pub status: String,
    /// When the next attempt is due (PENDING only).
    pub next_attempt_at: Option<String>,
    /// Every attempt, oldest first (at most 100).
    pub attempts: Vec<AttemptView>,
}

/// `GET /v1/webhook-deliveries` query.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    /// Only the deliveries of this event (its `webhook-id`); without it, all of them.
    pub event_id: Option<String>,
    /// Deliveries per page, 1 ..= 100 (default 100).
    pub limit: Option<u32>,
    /// The last delivery of the previous page.
    pub starting_after: Option<String>,
}

/// A deduction put back.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct ReversalView {
    /// The reversal's ledger entry (a credit whose reference is `reversal-<deduction_no>`).
    pub reversal_no: String,
    /// The deduction put back.
    pub deduction_no: String,
    /// Fen put back.
    pub amount: i64,
    /// Balance right after the reversal, fen.
    pub balance_after: i64,
}

/// `POST /v1/payments/{payment_no}/refunds`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRefund {
    /// Fen, 1 ..= 10^10, and at most what is left to refund of the payment.
    #[schema(value_type = i64, minimum = 1, maximum = 10_000_000_000_i64)]
    pub amount: AmountField,
    /// Why, as the buyer sees it: at most 80 characters, none of them a control character, a
    /// line separator or a bidirectional control (else 422 `invalid-request`).
    #[serde(default)]
    #[schema(
        max_length = 80,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u2028-\u202E\u2066-\u2069]{0,80}$"
    )]
    pub reason: String,
}

/// A refund.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct RefundView {
    /// The refund number: the channel's `out_request_no` (Alipay) or `out_refund_no` (WeChat).
    pub refund_no: String,
    /// The payment it refunds.
    pub payment_no: String,
    /// The payment's order.
    pub order_id: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// Fen.
    pub amount: i64,
    /// Why.
    pub reason: String,
    /// PROCESSING, SUCCESS, CLOSED or ABNORMAL.
    pub status: String,
    /// The channel's number for it, once it succeeded.
    pub channel_refund_no: Option<String>,
    /// When the money went back.
    pub refunded_at: Option<String>,
    /// When it was asked.
    pub created_at: String,
}

impl RefundView {
    /// From a stored row.
    pub fn of(refund: &crate::domain::refund::Refund) -> Self {
        use mideng::state::StateMachine;
        Self {
            refund_no: refund.refund_no.clone(),
            payment_no: refund.payment_no.clone(),
            order_id: refund.order_id.clone(),
            channel: refund.channel.clone(),
            amount: refund.amount_fen,
            reason: refund.reason.clone(),
            status: refund.status.as_str().to_owned(),
            channel_refund_no: refund.channel_refund_no.clone(),
            refunded_at: refund.refunded_at_ms.map(rfc3339),
            created_at: rfc3339(refund.created_at_ms),
        }
    }
}

impl PaymentView {
    /// From a stored row.
    pub fn of(payment: &Payment) -> Self {
        use mideng::state::StateMachine;
        Self {
            payment_no: payment.payment_no.clone(),
            order_id: payment.order_id.clone(),
            channel: payment.channel.as_str().to_owned(),
            amount: payment.amount.fen(),
            currency: payment.currency.as_str().to_owned(),
            status: payment.status.as_str().to_owned(),
            pay_url: payment.pay_url.clone(),
            expires_at: rfc3339(payment.expires_at_ms),
            channel_trade_no: payment.channel_trade_no.clone(),
            paid_at: payment.paid_at_ms.map(rfc3339),
            created_at: rfc3339(payment.created_at_ms),
            refundable: None,
            refunds: None,
        }
    }
}

/// `POST /v1/tokens` answer.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct TokenView {
    /// Send it once as `Idempotency-Token` when creating a payment.
    pub token: String,
    /// When it stops being accepted.
    pub expires_at: String,
}

/// `POST /v1/wallets/{user_id}/credit`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreditBody {
    /// Fen, 1 ..= 10^10.
    #[schema(value_type = i64, minimum = 1, maximum = 10_000_000_000_i64)]
    pub amount: AmountField,
    /// The caller's reference (top-up id): the credit's business key, one credit per user and
    /// reference whatever the `Idempotency-Key`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$", min_length = 1, max_length = 64)]
    pub reference: String,
}

/// A credit's answer (also the `existing` credit of a 409 `already-credited`).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct CreditView {
    /// Ledger entry.
    pub entry_no: String,
    /// The amount credited, fen.
    pub amount: i64,
    /// Balance right after the credit, fen.
    pub balance: i64,
}

/// `POST /v1/wallets/{user_id}/deduct`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeductBody {
    /// The order paid from the wallet: at most one debit per user and order.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$", min_length = 1, max_length = 64)]
    pub order_id: String,
    /// Fen, 1 ..= 10^10.
    #[schema(value_type = i64, minimum = 1, maximum = 10_000_000_000_i64)]
    pub amount: AmountField,
}

/// A deduction.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct DeductionView {
    /// The debit's ledger entry.
    pub deduction_no: String,
    /// Fen.
    pub amount: i64,
    /// Balance right after it, fen.
    pub balance_after: i64,
}

/// A wallet.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct WalletView {
    /// Owner.
    pub user_id: String,
    /// Fen.
    pub balance: i64,
    /// `CNY`.
    pub currency: String,
    /// Latest entries, newest first (at most 100).
    pub entries: Vec<EntryView>,
}

/// A ledger entry.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct EntryView {
    /// Entry number.
    pub entry_no: String,
    /// CREDIT or DEBIT.
    pub kind: String,
    /// Fen.
    pub amount: i64,
    /// The credit's reference or the debited order.
    pub reference: String,
    /// Balance after it.
    pub balance_after: i64,
    /// When.
    pub created_at: String,
}

impl EntryView {
    /// From a stored row.
    pub fn of(entry: &WalletEntry) -> Self {
        Self {
            entry_no: entry.entry_no.clone(),
            kind: entry.kind.clone(),
            amount: entry.amount_fen,
            reference: entry.reference.clone(),
            balance_after: entry.balance_after_fen,
            created_at: rfc3339(entry.created_at_ms),
        }
    }
}

/// An idempotency record, as its tenant may inspect it.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct RecordView {
    /// The operation (`payment.create`, `wallet.deduct`, …).
    pub operation: String,
    /// in_progress, completed or abandoned.
    pub state: String,
    /// SHA-256 of the request, hex.
    pub fingerprint: String,
    /// Fence of the current owner.
    pub fence: u64,
    /// Status of the stored response, once completed.
    pub response_status: Option<u16>,
    /// When the current owner began.
    pub created_at: String,
    /// When the record may be purged.
    pub expires_at: String,
}

/// `GET /v1/idempotency-keys/{key}` query.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordQuery {
    /// The operation the key was used for.
    pub operation: String,
}

/// Liveness and readiness answers.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct HealthView {
    /// `ok`, or what is not ready.
    pub status: String,
}

/// `GET /v1/entitlements` query.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntitlementsQuery {
    /// The holder.
    pub user_id: String,
    /// Only the grants of this order. Required with a publishable key, which sees the grant
    /// of the order its client secret opens and nothing else.
    pub order_id: Option<String>,
}

/// One grant.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct GrantView {
    /// Grant number.
    pub grant_no: String,
    /// The holder.
    pub user_id: String,
    /// The payment that paid for it.
    pub payment_no: String,
    /// Its order.
    pub order_id: String,
    /// What.
    pub sku: String,
    /// How many.
    pub quantity: i64,
    /// When it was granted.
    pub created_at: String,
    /// When it was revoked (its payment refunded in full), if it was.
    pub revoked_at: Option<String>,
}

impl GrantView {
    /// From a stored row.
    pub fn of(grant: &Grant) -> Self {
        Self {
            grant_no: grant.grant_no.clone(),
            user_id: grant.user_id.clone(),
            payment_no: grant.payment_no.clone(),
            order_id: grant.order_id.clone(),
            sku: grant.sku.clone(),
            quantity: grant.quantity,
            created_at: rfc3339(grant.created_at_ms),
            revoked_at: grant.revoked_at_ms.map(rfc3339),
        }
    }
}

/// A user's grants, newest first (at most 100).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct EntitlementsView {
    /// The grants.
    pub grants: Vec<GrantView>,
}
