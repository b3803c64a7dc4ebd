//! Errors as `application/problem+json` (RFC 9457) with a stable `type` and `code`.
//!
//! Clients branch on `code`; it never changes once published. `detail` is for humans and never
//! carries store internals, keys or tokens.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};

/// Every answer the layer gives on its own (without running the handler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The route requires `Idempotency-Key` and the request has none. 400.
    KeyMissing,
    /// The key is empty, longer than 255 bytes or not visible ASCII. 400.
    KeyMalformed,
    /// No tenant could be resolved for the request. 401.
    TenantMissing,
    /// The resolved tenant is not a valid tenant name. 400.
    TenantInvalid,
    /// The body is larger than the route allows. 413.
    PayloadTooLarge,
    /// The body could not be read. 400.
    BodyUnreadable,
    /// The JSON body names a member twice in one object, on a route that reads the body's
    /// fields (its key, or the fields of its fingerprint): JSON parsers disagree on which of
    /// the two counts, so the layer and the handler could read two different requests. 400.
    BodyAmbiguous,
    /// The body did not arrive in full before its deadline
    /// ([`super::RequestBodyDeadlineLayer`]). 408.
    BodyTimeout,
    /// The same key is being processed by another request. 409 with `Retry-After`.
    InProgress {
        /// When to try again.
        retry_after: Duration,
    },
    /// The key was used for a request with a different fingerprint. 422.
    KeyReused,
    /// The route requires `Idempotency-Token` and the request has none. 400.
    TokenMissing,
    /// The token is not a valid token. 400.
    TokenMalformed,
    /// The token was consumed by an earlier submission. 409.
    DuplicateSubmission,
    /// The token was never issued for this tenant and operation, or it expired. 400.
    TokenUnknown,
    /// The token store cannot be reached and the route fails closed. 503.
    TokenStoreUnavailable,
    /// The idempotency store cannot be reached or kept conflicting. 503.
    StoreUnavailable,
    /// The handler ran past the route's timeout; the key was freed. 503.
    HandlerTimeout,
    /// The handler panicked; the key was freed. 500.
    HandlerPanicked,
    /// The service stopped while the handler ran (its runtime shut down under it): the
    /// request may or may not have been applied, as with a crash; the retry under the same key
    /// finds out. 503 with `Retry-After`.
    Stopping,
    /// The handler's response is too large to store for replay. 500.
    ResponseTooLarge,
    /// The handler's effect happened but its response could not be stored (the store failed
    /// after retries): the response is withheld so that no client holds an answer that a
    /// replay would contradict; the retry finds the effect. 503.
    ResponseNotStored,
    /// An unexpected failure of the store. 500.
    Internal,
}

impl Problem {
    /// The stable machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            Problem::KeyMissing => "idempotency-key-missing",
            Problem::KeyMalformed => "idempotency-key-malformed",
            Problem::TenantMissing => "tenant-missing",
            Problem::TenantInvalid => "tenant-invalid",
            Problem::PayloadTooLarge => "payload-too-large",
            Problem::BodyUnreadable => "body-unreadable",
            Problem::BodyAmbiguous => "body-ambiguous",
            Problem::BodyTimeout => "request-body-timeout",
            Problem::InProgress { .. } => "in-progress",
            Problem::KeyReused => "idempotency-key-reused",
            Problem::TokenMissing => "idempotency-token-missing",
            Problem::TokenMalformed => "idempotency-token-malformed",
            Problem::DuplicateSubmission => "duplicate-submission",
            Problem::TokenUnknown => "idempotency-token-unknown",
            Problem::TokenStoreUnavailable => "token-store-unavailable",
            Problem::StoreUnavailable => "idempotency-store-unavailable",
            Problem::HandlerTimeout => "handler-timeout",
            Problem::Stopping => "service-stopping",
            Problem::HandlerPanicked => "internal-error",
            Problem::ResponseTooLarge => "response-too-large",
            Problem::ResponseNotStored => "response-not-stored",
            Problem::Internal => "internal-error",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            Problem::KeyMissing
            | Problem::KeyMalformed
            | Problem::TenantInvalid
            | Problem::BodyUnreadable
            | Problem::BodyAmbiguous
            | Problem::TokenMissing
            | Problem::TokenMalformed
            | Problem::TokenUnknown => StatusCode::BAD_REQUEST,
            Problem::TenantMissing => StatusCode::UNAUTHORIZED,
            Problem::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Problem::InProgress { .. } | Problem::DuplicateSubmission => StatusCode::CONFLICT,
            Problem::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Problem::TokenStoreUnavailable
            | Problem::StoreUnavailable
            | Problem::ResponseNotStored
            | Problem::HandlerTimeout
            | Problem::Stopping => StatusCode::SERVICE_UNAVAILABLE,
            Problem::HandlerPanicked | Problem::ResponseTooLarge | Problem::Internal => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn title(self) -> &'static str {
        match self {
            Problem::KeyMissing => "This operation requires an Idempotency-Key header.",
            Problem::KeyMalformed => "The Idempotency-Key must be 1 to 255 bytes of visible ASCII.",
            Problem::TenantMissing => "The request is not authenticated.",
            Problem::TenantInvalid => "The tenant is not valid.",
            Problem::PayloadTooLarge => "The request body is too large.",
            Problem::BodyUnreadable => "The request body could not be read.",
            Problem::BodyAmbiguous => {
                "The JSON body names the same member twice in one object; send it once."
            }
            Problem::BodyTimeout => "The request body did not arrive in time.",
            Problem::InProgress { .. } => {
                "A request with this Idempotency-Key is still being processed."
            }
            Problem::KeyReused => "This Idempotency-Key was used for a different request.",
            Problem::TokenMissing => "This operation requires an Idempotency-Token header.",
            Problem::TokenMalformed => "The Idempotency-Token is not valid.",
            Problem::DuplicateSubmission => "This form was already submitted.",
            Problem::TokenUnknown => "The Idempotency-Token is unknown or expired.",
            Problem::TokenStoreUnavailable => "Submissions cannot be checked right now.",
            Problem::StoreUnavailable => "Idempotency cannot be guaranteed right now.",
            Problem::HandlerTimeout => {
                "The request took too long and was abandoned; it may be retried."
            }
            Problem::HandlerPanicked | Problem::Internal => "An internal error occurred.",
            Problem::Stopping => "The service stopped while handling the request.",
            Problem::ResponseTooLarge => "The response is too large to be stored for replay.",
            Problem::ResponseNotStored => {
                "The request was processed, but its answer could not be stored for replay."
            }
        }
    }

    /// A short hint on what to do, where one helps.
    fn detail(self) -> &'static str {
        match self {
            Problem::InProgress { .. } => "Retry after the time in the Retry-After header.",
            Problem::KeyReused => {
                "Use a new key for a new request; retry a request only with its own key and body."
            }
            Problem::StoreUnavailable
            | Problem::TokenStoreUnavailable
            | Problem::HandlerTimeout => {
                "Nothing was applied. Retry with the same key after the time in the Retry-After header."
            }
            Problem::DuplicateSubmission => "Reload the form to submit again.",
            Problem::ResponseNotStored | Problem::Stopping => {
                "Retry with the same key after the time in the Retry-After header: the retry finds what was done."
            }
            _ => "",
        }
    }

    /// Seconds for `Retry-After`, where the problem has one (rounded up, at least 1).
    fn retry_after_seconds(self) -> Option<u64> {
        match self {
            Problem::InProgress { retry_after } => Some(
                u64::try_from(retry_after.as_millis().div_ceil(1000))
                    .unwrap_or(u64::MAX)
                    .max(1),
            ),
            Problem::StoreUnavailable
            | Problem::TokenStoreUnavailable
            | Problem::ResponseNotStored
            | Problem::HandlerTimeout
            | Problem::Stopping => Some(1),
            _ => None,
        }
    }

    /// The response: problem+json body, and `Retry-After` where it applies.
    pub fn into_response(self) -> Response<Body> {
        let body = serde_json::json!({
            "type": format!("urn:mideng:problem:{}", self.code()),
            "code": self.code(),
            "title": self.title(),
            "status": self.status().as_u16(),
            "detail": self.detail(),
        });
        let mut response = Response::new(Body::from(body.to_string()));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after_seconds() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if matches!(
            self,
            Problem::PayloadTooLarge | Problem::BodyTimeout | Problem::BodyUnreadable
        ) {
            // The body was not read to its end, so the connection cannot carry another
            // request: say so, or a client reuses it and its next request fails mid-way.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let problem = Problem::InProgress {
            retry_after: Duration::from_millis(1200),
        };
        let response = problem.into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        let tiny = Problem::InProgress {
            retry_after: Duration::from_millis(3),
        }
        .into_response();
        assert_eq!(tiny.headers()[header::RETRY_AFTER], "1");
    }
}
