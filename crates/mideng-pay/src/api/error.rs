//! Every refusal of the API as `application/problem+json` (RFC 9457): `{type, code, title,
//! detail}`, with a stable `code` clients branch on. Client mistakes are 4xx; a 5xx means the
//! service or a dependency failed, and its detail never carries internals.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mideng::StoreError;
use mideng::http::Problem;
use serde::Serialize;
use utoipa::ToSchema;

/// A problem document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = Problem)]
pub struct ProblemBody {
    /// `urn:mideng:problem:<code>`, as the toolkit's own refusals.
    #[serde(rename = "type")]
    pub kind: String,
    /// Stable machine-readable code.
    pub code: String,
    /// The HTTP status.
    pub status: u16,
    /// Short summary.
    pub title: String,
    /// What happened, for humans.
    pub detail: String,
    /// For conflicts that name an existing resource (the paid payment, the earlier deduction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub existing: Option<serde_json::Value>,
}

/// Every code the service answers with besides the toolkit's own (which its idempotency layer
/// answers itself, [`Problem`]): stable, one HTTP status each, listed in docs/api.md. Clients
/// branch on the code; the detail is for people.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// 400: the body is not JSON.
    MalformedJson,
    /// 400: the path is not valid percent-encoded UTF-8, or a path parameter is unreadable.
    InvalidPath,
    /// 400: the query string is unreadable.
    InvalidQuery,
    /// 400: a request axum could not read, for another reason.
    BadRequest,
    /// 401: no valid `Authorization: Bearer <API key>`.
    Unauthorized,
    /// 401: a publishable key without a valid client secret (`Mideng-Client-Secret`: missing,
    /// sent twice, unknown, or expired): a page pays only the order the merchant's server gave
    /// it the secret of.
    ClientSecretInvalid,
    /// 403: the key is valid but of a kind this route does not take (a publishable key on a
    /// route that only a secret key may call).
    KeyNotAllowed,
    /// 404: no such resource (in this tenant).
    NotFound,
    /// 405: the path exists, the method does not (see `Allow`).
    MethodNotAllowed,
    /// 408: the request's head did not arrive in time.
    RequestTimeout,
    /// 409: the order is paid (creating a payment for it).
    OrderAlreadyPaid,
    /// 409: the payment is paid (closing it): the buyer paid first.
    AlreadyPaid,
    /// 409: the order takes no payment in its status.
    OrderNotPayable,
    /// 409: the channel closed this attempt; create another one.
    PaymentClosed,
    /// 409: the payment is not pending, so it cannot be closed.
    PaymentNotPending,
    /// 409: the order's transition is not allowed from its status.
    IllegalTransition,
    /// 409: the order was debited under another key (`existing`: that debit).
    AlreadyDeducted,
    /// 409: the reference was credited under another key (`existing`: that credit).
    AlreadyCredited,
    /// 409: the payment is not PAID, so there is nothing to refund.
    PaymentNotRefundable,
    /// 409: the refund is more than is left to refund of the payment.
    RefundExceedsPayment,
    /// 409: the tenant has as many webhook endpoints as it may.
    TooManyEndpoints,
    /// 409: another of the tenant's webhook endpoints has this URL.
    EndpointUrlTaken,
    /// 409: the delivery has as many attempts as a delivery may have; its history stays
    /// readable.
    AttemptsExhausted,
    /// 409: the reconciliation case is no longer open (repaired, or resolved before).
    CaseNotOpen,
    /// 409: the event is not parked (replayed or discarded before), or its replay failed again.
    EventNotParked,
    /// 415: the body is not declared as JSON.
    UnsupportedMediaType,
    /// 422: a field is not valid.
    InvalidRequest,
    /// 422: an amount is not a positive integer number of fen within the bound.
    InvalidAmount,
    /// 422: the currency is not one the service takes.
    UnsupportedCurrency,
    /// 422: an order with this id and a different content exists.
    OrderIdReused,
    /// 422: the balance would exceed its bound.
    BalanceLimit,
    /// 422: the balance is too small (stored and replayed).
    InsufficientFunds,
    /// 422: the `Idempotency-Key` made a refund of another payment or amount (`existing`).
    RefundKeyReused,
    /// 422: the channel asked for is not configured on this service.
    ChannelNotConfigured,
    /// 422: a webhook URL names an address that is not globally routable (loopback, private,
    /// link-local, any special-purpose range) or a local name; nothing was connected to.
    PrivateTarget,
    /// 429: the tenant holds as many unspent one-time tokens as it may (or the store as many
    /// as it holds for everyone); spend or let some expire (`Retry-After`).
    TooManyTokens,
    /// 429: a page sent more requests of one kind for its order than a page may in a minute
    /// (`Retry-After`).
    RateLimited,
    /// 429: the order had as many new payment attempts from its page as it may in an hour
    /// (each is a trade at the channel); `Retry-After` says when the oldest leaves the window.
    TooManyAttempts,
    /// 502: the channel refused the payment or the close.
    ChannelRejected,
    /// 503: the channel gave no definite answer; retry (the payment number stays the same).
    ChannelUnavailable,
    /// 503: the database is unavailable or busy; retry.
    DatabaseUnavailable,
    /// 503: this instance's clock disagrees with the database's by more than its bound
    /// ([`crate::flows::clock_guard`]); retry (on another instance).
    ClockUnsynchronised,
    /// 500: a failure of ours; the detail says nothing more.
    Internal,
    /// A code the toolkit defines, answered by the service too (`in-progress`,
    /// `payload-too-large`, `body-unreadable`, `request-body-timeout`,
    /// `idempotency-key-malformed`, `tenant-invalid`, `token-store-unavailable`): the toolkit's
    /// code and status.
    Shared(Problem),
    /// 4xx: any other client error axum answers before a handler runs, with its own status.
    ClientError(StatusCode),
}

impl Code {
    /// The stable machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            Code::MalformedJson => "malformed-json",
            Code::InvalidPath => "invalid-path",
            Code::InvalidQuery => "invalid-query",
            Code::BadRequest => "bad-request",
            Code::Unauthorized => "unauthorized",
            Code::ClientSecretInvalid => "client-secret-invalid",
            Code::KeyNotAllowed => "key-not-allowed",
            Code::NotFound => "not-found",
            Code::MethodNotAllowed => "method-not-allowed",
            Code::RequestTimeout => "request-timeout",
            Code::OrderAlreadyPaid => "order-already-paid",
            Code::AlreadyPaid => "already-paid",
            Code::OrderNotPayable => "order-not-payable",
            Code::PaymentClosed => "payment-closed",
            Code::PaymentNotPending => "payment-not-pending",
            Code::IllegalTransition => "illegal-transition",
            Code::AlreadyDeducted => "already-deducted",
            Code::AlreadyCredited => "already-credited",
            Code::PaymentNotRefundable => "payment-not-refundable",
            Code::RefundExceedsPayment => "refund-exceeds-payment",
            Code::RefundKeyReused => "refund-key-reused",
            Code::TooManyEndpoints => "too-many-endpoints",
            Code::EndpointUrlTaken => "endpoint-url-taken",
            Code::AttemptsExhausted => "attempts-exhausted",
            Code::CaseNotOpen => "case-not-open",
            Code::EventNotParked => "event-not-parked",
            Code::UnsupportedMediaType => "unsupported-media-type",
            Code::InvalidRequest => "invalid-request",
            Code::InvalidAmount => "invalid-amount",
            Code::UnsupportedCurrency => "unsupported-currency",
            Code::OrderIdReused => "order-id-reused",
            Code::BalanceLimit => "balance-limit",
            Code::InsufficientFunds => "insufficient-funds",
            Code::ChannelNotConfigured => "channel-not-configured",
            Code::PrivateTarget => "private-target",
            Code::TooManyTokens => "too-many-tokens",
            Code::RateLimited => "rate-limited",
            Code::TooManyAttempts => "too-many-attempts",
            Code::ChannelRejected => "channel-rejected",
            Code::ChannelUnavailable => "channel-unavailable",
            Code::DatabaseUnavailable => "database-unavailable",
            Code::ClockUnsynchronised => "clock-unsynchronised",
            Code::Internal => "internal-error",
            Code::Shared(problem) => problem.code(),
            Code::ClientError(_) => "client-error",
        }
    }

    /// The HTTP status that goes with the code.
    pub fn status(self) -> StatusCode {
        match self {
            Code::MalformedJson | Code::InvalidPath | Code::InvalidQuery | Code::BadRequest => {
                StatusCode::BAD_REQUEST
            }
            Code::Unauthorized | Code::ClientSecretInvalid => StatusCode::UNAUTHORIZED,
            Code::KeyNotAllowed => StatusCode::FORBIDDEN,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Code::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Code::OrderAlreadyPaid
            | Code::AlreadyPaid
            | Code::OrderNotPayable
            | Code::PaymentClosed
            | Code::PaymentNotPending
            | Code::IllegalTransition
            | Code::AlreadyDeducted
            | Code::AlreadyCredited
            | Code::PaymentNotRefundable
            | Code::RefundExceedsPayment
            | Code::TooManyEndpoints
            | Code::EndpointUrlTaken
            | Code::AttemptsExhausted
            | Code::CaseNotOpen
            | Code::EventNotParked => StatusCode::CONFLICT,
            Code::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::InvalidRequest
            | Code::InvalidAmount
            | Code::UnsupportedCurrency
            | Code::OrderIdReused
            | Code::BalanceLimit
            | Code::InsufficientFunds
            | Code::RefundKeyReused
            | Code::ChannelNotConfigured
            | Code::PrivateTarget => StatusCode::UNPROCESSABLE_ENTITY,
            Code::TooManyTokens | Code::RateLimited | Code::TooManyAttempts => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Code::ChannelRejected => StatusCode::BAD_GATEWAY,
            Code::ChannelUnavailable | Code::DatabaseUnavailable | Code::ClockUnsynchronised => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::Shared(problem) => problem.status(),
            Code::ClientError(status) if status.is_client_error() => status,
            Code::ClientError(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// An API error: its code (which fixes its status), a detail, and optionally the existing
/// resource a conflict is about and a `Retry-After`.
#[derive(Clone, Debug)]
pub struct ApiError {
    code: Code,
    detail: String,
    retry_after_secs: Option<u64>,
    existing: Option<serde_json::Value>,
}

impl ApiError {
    /// An error with this code and detail.
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            retry_after_secs: None,
            existing: None,
        }
    }

    /// 404 `not-found`.
    pub fn not_found(what: &str) -> Self {
        Self::new(Code::NotFound, format!("no such {what}"))
    }

    /// Adds a `Retry-After`.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_secs = Some(seconds.max(1));
        self
    }

    /// Names the existing resource the conflict is about.
    pub fn with_existing(mut self, existing: impl Serialize) -> Self {
        self.existing = serde_json::to_value(existing).ok();
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// The code.
    pub fn code(&self) -> &'static str {
        self.code.code()
    }

    /// The body.
    pub fn body(&self) -> ProblemBody {
        let status = self.status();
        ProblemBody {
            kind: format!("urn:mideng:problem:{}", self.code()),
            code: self.code().to_owned(),
            status: status.as_u16(),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            detail: self.detail.clone(),
            existing: self.existing.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.body())).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after_secs
            && let Ok(value) = HeaderValue::try_from(seconds.to_string())
        {
            headers.insert(header::RETRY_AFTER, value);
            // An answer that asks to be retried is not the request's last word: not stored
            // under the key, so that the retry runs again.
            return mideng::http::not_final(response);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(_) | StoreError::Conflict(_) => {
                tracing::warn!(%error, "database unavailable or contended");
                ApiError::new(
                    Code::DatabaseUnavailable,
                    "the database is unavailable or busy; retry",
                )
                .retry_after(1)
            }
            // The database may have committed the request's work, record and answer with it,
            // or not: the retry under the same key finds out (a replay, or the work done once).
            StoreError::OutcomeUnknown(_) => {
                tracing::warn!(%error, "the request's commit went unanswered");
                ApiError::new(
                    Code::DatabaseUnavailable,
                    "the database did not answer the commit; retry with the same key",
                )
                .retry_after(1)
            }
            StoreError::Invalid(invalid) => {
                ApiError::new(Code::InvalidRequest, invalid.to_string())
            }
            // A write under a lock that a later holder took over: that holder is doing the
            // work.
            StoreError::StaleFence { .. } => ApiError::new(
                Code::Shared(Problem::InProgress {
                    retry_after: std::time::Duration::from_secs(1),
                }),
                "another request is working on this; retry",
            )
            .retry_after(1),
            // A record's lease taken over under this request: the guard of the key says a
            // later owner runs the work, so nothing here may answer for it; a bug if it arrives.
            StoreError::StaleLease => {
                tracing::error!(%error, "a record's lease lost under a request");
                ApiError::new(Code::Internal, "internal error")
            }
            // Data that breaks an invariant the schema should hold: a person must look.
            StoreError::Corrupt(_) => {
                tracing::error!(%error, "stored data breaks an invariant");
                ApiError::new(Code::Internal, "internal error")
            }
            StoreError::Backend(_) => {
                tracing::error!(%error, "storage failure");
                ApiError::new(Code::Internal, "internal error")
            }
            // `StoreError` is non-exhaustive: a kind added later is a failure until it is
            // named here.
            _ => {
                tracing::error!(%error, "storage failure of an unknown kind");
                ApiError::new(Code::Internal, "internal error")
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonDataError(error) => {
                ApiError::new(Code::InvalidRequest, error.body_text())
            }
            JsonRejection::JsonSyntaxError(error) => {
                ApiError::new(Code::MalformedJson, error.body_text())
            }
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                Code::UnsupportedMediaType,
                "send Content-Type: application/json",
            ),
            other if mideng::http::is_body_deadline(&other) => ApiError::new(
                Code::Shared(Problem::BodyTimeout),
                "the body did not arrive in time",
            ),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                Code::Shared(Problem::PayloadTooLarge),
                "the body is larger than the service accepts",
            ),
            other => ApiError::new(Code::Shared(Problem::BodyUnreadable), other.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::new(Code::InvalidPath, rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::new(Code::InvalidQuery, rejection.body_text())
    }
}
