//! The contract at the edge of the router: every error the service answers is a problem
//! document with a stable `code`, including the ones axum produces before any handler runs.
//!
//! Before routing to a handler: a path that is not valid percent-encoded UTF-8 is refused (400
//! `invalid-path`: `%FF` would otherwise reach axum's plain-text rejection, and a path the
//! service cannot decode is not one it can route honestly), and a `Content-Length` over the
//! body limit is refused at once (413 `payload-too-large`), before the body arrives. A refusal
//! that may come before a body is read (401, 403, 404, 405, 429, 503, 408, 413) closes the
//! connection and says so (`Connection: close`) when the request carried one. After:
//! a client error that is not JSON (axum's 405, a plain-text extractor rejection, a 413 for a
//! chunked body over the limit) becomes the problem document for its status, keeping `Allow`.
//! JSON answers are left alone: they are the API's own, or a channel's protocol answer.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mideng::http::Problem;

use super::ApiError;
use super::error::Code;
use crate::limits::BODY_BYTES_MAX;

/// The middleware; see the module documentation.
pub(super) async fn contract(request: Request, next: Next) -> Response {
    if !is_well_encoded(request.uri().path()) {
        return ApiError::new(
            Code::InvalidPath,
            "the path is not valid percent-encoded UTF-8",
        )
        .into_response();
    }
    if announces_more_than(request.headers(), BODY_BYTES_MAX) {
        return closing(too_large().into_response());
    }
    let sent_a_body = announces_a_body(request.headers());
    let response = as_problem(next.run(request).await);
    match response.status() {
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT => closing(response),
        // Refusals decided before the body is read (the key, its kind, the client secret, the
        // route, the rates, the clock): the body may still be on the wire, so the connection
        // is closed and says so, rather than dropped under the client's next request.
        StatusCode::UNAUTHORIZED
        | StatusCode::FORBIDDEN
        | StatusCode::NOT_FOUND
        | StatusCode::METHOD_NOT_ALLOWED
        | StatusCode::TOO_MANY_REQUESTS
        | StatusCode::SERVICE_UNAVAILABLE
            if sent_a_body =>
        {
            closing(response)
        }
        _ => response,
    }
}

/// Whether a request carries a body: a `Content-Length` above zero, or a transfer coding.
fn announces_a_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.parse::<u64>().ok())
            .is_some_and(|length| length > 0)
}

/// `response` with `Connection: close`: the request's body was not read to its end, so the
/// connection cannot carry another request, and a client that reused it would see its next
/// request cut off.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

fn too_large() -> ApiError {
    ApiError::new(
        Code::Shared(Problem::PayloadTooLarge),
        "the body is larger than the service accepts",
    )
}

/// Whether every `%` starts two hexadecimal digits and the decoded bytes are UTF-8.
fn is_well_encoded(path: &str) -> bool {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        if byte == b'%' {
            let Some(pair) = bytes.get(index + 1..index + 3) else {
                return false;
            };
            let (Some(high), Some(low)) = (hex_digit(pair[0]), hex_digit(pair[1])) else {
                return false;
            };
            decoded.push(high << 4 | low);
            index += 3;
        } else {
            decoded.push(byte);
            index += 1;
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|digit| u8::try_from(digit).ok())
}

fn announces_more_than(headers: &HeaderMap, limit: usize) -> bool {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<u64>().ok())
        .is_some_and(|length| length > u64::try_from(limit).unwrap_or(u64::MAX))
}

/// A non-JSON client error as the problem document for its status.
fn as_problem(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|kind| {
            kind.starts_with("application/json") || kind.starts_with("application/problem+json")
        });
    if !status.is_client_error() || is_json {
        return response;
    }
    let (code, detail) = match status {
        StatusCode::BAD_REQUEST => (Code::BadRequest, "the request could not be read"),
        StatusCode::NOT_FOUND => (Code::NotFound, "no such resource"),
        StatusCode::METHOD_NOT_ALLOWED => (Code::MethodNotAllowed, "see the Allow header"),
        StatusCode::REQUEST_TIMEOUT => (Code::RequestTimeout, "the request did not arrive in time"),
        StatusCode::PAYLOAD_TOO_LARGE => return with_allow(response, too_large()),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            Code::UnsupportedMediaType,
            "send Content-Type: application/json",
        ),
        StatusCode::UNPROCESSABLE_ENTITY => (Code::InvalidRequest, "the request is not valid"),
        other => (Code::ClientError(other), "the request was refused"),
    };
    with_allow(response, ApiError::new(code, detail))
}

/// `problem` in place of `original`, keeping the original's `Allow` header.
fn with_allow(original: Response, problem: ApiError) -> Response {
    let allow = original.headers().get(header::ALLOW).cloned();
    let mut replaced = problem.into_response();
    if let Some(allow) = allow {
        replaced.headers_mut().insert(header::ALLOW, allow);
    }
    replaced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_valid_percent_encoded_utf8_paths_pass() {
        assert!(is_well_encoded("/v1/orders/o-1"));
        assert!(is_well_encoded("/v1/orders/%E5%B9%82"));
        assert!(!is_well_encoded("/v1/orders/%FF"));
        assert!(!is_well_encoded("/v1/orders/%G1"));
        assert!(!is_well_encoded("/v1/orders/%+1"));
        assert!(!is_well_encoded("/v1/orders/%4"));
    }
}
