//! The handler's answer after `Proceed`: stored for replay when it is the request's outcome,
//! or the key freed so that a retry runs again.
//!
//! An answer is **final** unless one of these says otherwise:
//! - its status: a 5xx is a failure, and 408, 425 and 429 say "try again" in HTTP's own words;
//! - the handler: [`not_final`] (or a [`Finality::NotFinal`] response extension) marks an answer
//!   that is not the outcome yet, such as a 202 "accepted, the outcome is not known, come back
//!   after `Retry-After`". Stored, that answer would be replayed to every retry for the key's
//!   whole retention and the client would never see the outcome; freed, the retry with the same
//!   key runs the handler again, and the handler's own guards (business key, state machine)
//!   keep that run from repeating the effect.
//!
//! A non-final answer is sent to its client as it is, without `Idempotent-Replayed`.

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;

use super::config::RouteConfig;
use super::observe::Outcome;
use super::problem::Problem;
use super::service::{DecisionLog, abandon};
use crate::error::StoreError;
use crate::limits::RESPONSE_BODY_BYTES_MAX;
use crate::record::{Lease, StoredResponse};

/// The response header that marks a replay.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Whether a handler's answer is the outcome of the request, as a response extension. A
/// response without one is final unless its status says otherwise (see the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finality {
    /// The outcome: stored and replayed to every retry with the key.
    Final,
    /// Not the outcome yet: sent, not stored; the key is freed for the retry.
    NotFinal,
}

/// Marks `response` as not final: the layer sends it and frees the key instead of storing it,
/// so that the client's retry with the same key (after the `Retry-After` the handler sets) runs
/// the handler again.
pub fn not_final(response: impl IntoResponse) -> Response<Body> {
    let mut response = response.into_response();
    response.extensions_mut().insert(Finality::NotFinal);
    response
}

/// Whether `response` is the request's outcome, and so stored.
pub(crate) fn is_final<B>(response: &Response<B>) -> bool {
    let status = response.status();
    let says_try_again = status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_EARLY
        || status == StatusCode::TOO_MANY_REQUESTS;
    !says_try_again && response.extensions().get::<Finality>() != Some(&Finality::NotFinal)
}

/// Builds the replayed response.
pub(crate) fn replay(stored: StoredResponse) -> Response<Body> {
    let mut response = Response::new(Body::from(stored.body));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            headers.append(name, value);
        }
    }
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// A stored answer sent for the first time (no replay mark).
pub(crate) fn replay_free(stored: StoredResponse) -> Response<Body> {
    let mut response = replay(stored);
    response.headers_mut().remove(IDEMPOTENT_REPLAYED);
    response
}

/// How often storing a response is retried on a transient store failure, and the pause
/// (growing linearly) between attempts: about 3 s in all, within any lease.
const COMPLETE_RETRIES_MAX: u32 = 5;
const COMPLETE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Stores the handler's response (or frees the key) and returns the response to send.
pub(crate) async fn finish(
    config: &RouteConfig,
    lease: &Lease,
    response: Response<Body>,
    log: &DecisionLog<'_>,
) -> Response<Body> {
    if !is_final(&response) {
        abandon(config, lease).await;
        log.record(if response.status().is_server_error() {
            Outcome::Abandoned
        } else {
            Outcome::NotFinal
        });
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, RESPONSE_BODY_BYTES_MAX).await {
        Ok(bytes) => bytes,
        Err(_) => {
            abandon(config, lease).await;
            log.record(Outcome::Abandoned);
            return Problem::ResponseTooLarge.into_response();
        }
    };
    let mut headers: Vec<(String, String)> = config
        .replay_headers
        .iter()
        .flat_map(|name| {
            parts.headers.get_all(name).iter().filter_map(move |value| {
                value
                    .to_str()
                    .ok()
                    .map(|value| (name.as_str().to_owned(), value.to_owned()))
            })
        })
        .collect();
    // The request that had the effect, named on every replay of its answer.
    if let Some(id) = &log.request_id {
        headers.push((
            super::ORIGINAL_REQUEST_ID.as_str().to_owned(),
            id.as_str().to_owned(),
        ));
    }
    let stored = StoredResponse {
        status: parts.status.as_u16(),
        headers,
        body: bytes.to_vec(),
    };
    let mut attempt = 0_u32;
    loop {
        match config.records.complete(lease, &stored).await {
            Ok(()) => {
                log.record(Outcome::Stored);
                break;
            }
            Err(StoreError::StaleLease) => {
                log.record(Outcome::LeaseLost);
                break;
            }
            Err(error) if error.is_transient() && attempt < COMPLETE_RETRIES_MAX => {
                attempt += 1;
                tokio::time::sleep(COMPLETE_RETRY_PAUSE * attempt).await;
            }
            Err(error) => {
                // The effect happened but its answer cannot be stored. Sending it anyway would
                // give this client an answer that its own retry contradicts (the retry runs the
                // handler again and finds the effect): withhold it, free the key if the store
                // lets us, and let the retry answer. Loud, because the store is failing.
                tracing::error!(target: "mideng::idempotency", %error, "response could not be stored; answered 503");
                abandon(config, lease).await;
                log.record(Outcome::StoreUnavailable);
                return Problem::ResponseNotStored.into_response();
            }
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: StatusCode) -> Response<Body> {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = status;
        response
    }

    #[test]
    fn the_status_and_the_handler_say_what_is_final() {
        assert!(is_final(&answer(StatusCode::CREATED)));
        assert!(is_final(&answer(StatusCode::UNPROCESSABLE_ENTITY)));
        assert!(is_final(&answer(StatusCode::ACCEPTED)));
        assert!(!is_final(&answer(StatusCode::INTERNAL_SERVER_ERROR)));
        assert!(!is_final(&answer(StatusCode::TOO_MANY_REQUESTS)));
        assert!(!is_final(&answer(StatusCode::REQUEST_TIMEOUT)));
        assert!(!is_final(&not_final(answer(StatusCode::ACCEPTED))));
        let mut marked_final = answer(StatusCode::OK);
        marked_final.extensions_mut().insert(Finality::Final);
        assert!(is_final(&marked_final));
    }
}
