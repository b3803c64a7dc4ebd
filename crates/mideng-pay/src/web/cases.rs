//! The console's reconciliation cases: the open ones beside the overview, and an operator's
//! resolution of one, with its reason recorded on the case (`POST /console/cases/resolve`,
//! `{case_id, reason}`, to the console key only).

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::console::authorized;
use crate::api::reconciliation::CaseView;
use crate::api::{ApiError, Code};
use crate::domain::bill::BillCaseStatus;
use crate::domain::refund::checked_reason;
use crate::flows::operator::{self, CaseResolution};
use crate::state::AppState;

/// Most open cases the console shows.
pub(super) const CONSOLE_CASES_MAX: u32 = 50;

/// What an operator sends to resolve a case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Resolve {
    case_id: String,
    reason: String,
}

/// The open cases, newest first.
pub(super) async fn open_cases(state: &AppState) -> Result<Vec<CaseView>, ApiError> {
    let cases = operator::cases(
        &state.ports,
        None,
        Some(BillCaseStatus::Open),
        CONSOLE_CASES_MAX,
    )
    .await?;
    Ok(cases.iter().map(CaseView::of).collect())
}

/// `POST /console/cases/resolve`.
pub(super) async fn resolve(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<axum::Json<Resolve>, JsonRejection>,
) -> Response {
    match resolved(&state, &headers, body).await {
        Ok(case) => axum::Json(case).into_response(),
        Err(error) => error.into_response(),
    }
}

/// Refuses a request without the console key (and everything when the console is off).
pub(super) fn operator(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let console = state
        .pages
        .settings
        .console
        .as_ref()
        .ok_or_else(|| ApiError::not_found("resource"))?;
    if !authorized(headers, &console.api_key_sha256) {
        return Err(ApiError::new(
            Code::Unauthorized,
            "send Authorization: Bearer <console key>",
        ));
    }
    Ok(())
}

/// An operator's reason, checked: 1 to 80 characters, no control or bidirectional ones.
pub(super) fn reason(text: &str) -> Result<&str, ApiError> {
    checked_reason(text.trim())
        .filter(|reason| !reason.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidRequest,
                "reason must be 1 to 80 characters, without control or bidirectional characters",
            )
        })
}

async fn resolved(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<axum::Json<Resolve>, JsonRejection>,
) -> Result<CaseView, ApiError> {
    operator(state, headers)?;
    let axum::Json(resolve) = body?;
    let reason = reason(&resolve.reason)?;
    match operator::resolve_case(&state.ports, &resolve.case_id, reason).await? {
        CaseResolution::Resolved(case) => Ok(CaseView::of(&case)),
        CaseResolution::NotFound => Err(ApiError::not_found("case")),
        CaseResolution::NotOpen => Err(ApiError::new(Code::CaseNotOpen, "the case is not open")),
    }
}
