//! Every refusal of the API as `application/problem+json` (RFC 9457): `{type, code, title,
//! detail}`, with a stable `code` clients branch on. Client mistakes are 4xx; a 5xx means the
//! service or a dependency failed, and its detail never carries internals.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mideng::StoreError;
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

/// An API error: status, code and detail.
#[derive(Clone, Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    detail: String,
    retry_after_secs: Option<u64>,
    existing: Option<serde_json::Value>,
}

impl ApiError {
    /// An error with this status, code and detail.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            retry_after_secs: None,
            existing: None,
        }
    }

    /// 400 with `code`.
    pub fn bad_request(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// 404 `not-found`.
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("no such {what}"),
        )
    }

    /// 422 with `code`.
    pub fn unprocessable(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, detail)
    }

    /// 409 with `code`.
    pub fn conflict(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, detail)
    }

    /// 503 with `code` and a `Retry-After`.
    pub fn unavailable(
        code: &'static str,
        detail: impl Into<String>,
        retry_after_secs: u64,
    ) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, detail).retry_after(retry_after_secs)
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
        self.status
    }

    /// The code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The body.
    pub fn body(&self) -> ProblemBody {
        ProblemBody {
            kind: format!("urn:mideng:problem:{}", self.code),
            code: self.code.to_owned(),
            status: self.status.as_u16(),
            title: self.status.canonical_reason().unwrap_or("Error").to_owned(),
            detail: self.detail.clone(),
            existing: self.existing.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after_secs
            && let Ok(value) = HeaderValue::try_from(seconds.to_string())
        {
            headers.insert(header::RETRY_AFTER, value);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(_) | StoreError::Conflict(_) => {
                tracing::warn!(%error, "database unavailable or contended");
                ApiError::unavailable(
                    "database-unavailable",
                    "the database is unavailable or busy; retry",
                    1,
                )
            }
            StoreError::Invalid(invalid) => {
                ApiError::unprocessable("invalid-request", invalid.to_string())
            }
            other => {
                tracing::error!(error = %other, "storage failure");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal-error",
                    "internal error",
                )
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonDataError(error) => {
                ApiError::unprocessable("invalid-request", error.body_text())
            }
            JsonRejection::JsonSyntaxError(error) => {
                ApiError::bad_request("malformed-json", error.body_text())
            }
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "send Content-Type: application/json",
            ),
            other if mideng::http::is_body_deadline(&other) => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request-body-timeout",
                "the body did not arrive in time",
            ),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "the body is larger than the service accepts",
            ),
            other => ApiError::bad_request("body-unreadable", other.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::bad_request("invalid-path", rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request("invalid-query", rejection.body_text())
    }
}
