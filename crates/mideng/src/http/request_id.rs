//! `Request-Id`: every answer names the request it answers, so that a support case can be
//! followed from the client's copy of an answer to the service's logs (Stripe's `Request-Id`).
//!
//! [`request_id`] (for `axum::middleware::from_fn`, outermost) gives every request a fresh id,
//! `req_` and 32 hex digits, whatever the client sent under that name (a client does not choose
//! what our logs file its request under), runs the request inside a `tracing` span `request`
//! with the field `request_id` (so every event of the request, the idempotency decisions
//! included, carries it), hands it to the handler as a [`RequestId`] extension, and sets
//! `Request-Id` on the answer.
//!
//! The idempotency layer stores the id with the answer, as `Original-Request-Id`: a replay
//! carries its own `Request-Id` and the first request's `Original-Request-Id`, so the support
//! case finds the request that had the effect. The first answer carries no
//! `Original-Request-Id`.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The response header that names the request.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");

/// On a replay, the header that names the request whose answer is replayed.
pub const ORIGINAL_REQUEST_ID: HeaderName = HeaderName::from_static("original-request-id");

/// A request's id, as a request extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// A fresh id: `req_` and 32 hex digits from the operating system's generator.
    pub fn generate() -> Self {
        Self(format!("req_{}", crate::record::new_owner()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Middleware (`axum::middleware::from_fn(request_id)`): a fresh [`RequestId`] for the
/// request, its span, and its `Request-Id` header on the answer.
pub async fn request_id(mut request: Request, next: Next) -> Response {
    let id = RequestId::generate();
    request.headers_mut().remove(REQUEST_ID);
    request.extensions_mut().insert(id.clone());
    let span = tracing::info_span!("request", request_id = id.as_str());
    let mut response = next.run(request).instrument(span).await;
    if let Ok(value) = HeaderValue::from_str(id.as_str()) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}
