//! The operator console: one page and one JSON document it polls.
//!
//! `GET /console` is the page alone (no data); `GET /console/overview` answers, to
//! `Authorization: Bearer <console key>` only, the [`journal`](super::journal) of this
//! instance (what each layer caught, over time, the latest decisions and reconciliation
//! rounds) and the database's counts by state over every tenant ([`crate::store::Overview`],
//! reused for [`CONSOLE_OVERVIEW_TTL`]). The console key is an operator's: it sees every
//! tenant's volumes, as `/metrics` does. Beside them, the open reconciliation cases, which an
//! operator resolves with a reason (`web/cases.rs`).

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::html;
use super::journal::Snapshot;
use crate::api::{ApiError, Code};
use crate::flows::operator::{self, Overview};
use crate::limits::CONSOLE_OVERVIEW_TTL;
use crate::state::AppState;

/// `GET /console`.
pub(super) async fn page() -> Response {
    html(include_str!("assets/console.html").to_owned())
}

/// The counts by state last read, and when.
#[derive(Debug, Default)]
pub(super) struct OverviewCache {
    last: tokio::sync::Mutex<Option<(i64, Overview)>>,
}

/// What `GET /console/overview` answers.
#[derive(Debug, Serialize)]
pub struct ConsoleView {
    /// Now, Unix milliseconds.
    pub now_ms: i64,
    /// This instance's journal.
    pub journal: Snapshot,
    /// The database's counts by state.
    pub store: Overview,
    /// When `store` was read, Unix milliseconds.
    pub store_read_at_ms: i64,
    /// The open reconciliation cases, newest first (at most 50).
    pub cases: Vec<crate::api::reconciliation::CaseView>,
    /// The refund cases whose refund has not succeeded (money owed back), every tenant's,
    /// oldest first (at most 50), each with its tenant.
    pub refund_cases: Vec<UnsettledRefundView>,
    /// The parked events, oldest first (at most 50).
    pub parked_events: Vec<super::parked::ParkedView>,
}

/// A refund case not settled yet, with its tenant (the operator sees every tenant's).
#[derive(Clone, Debug, Serialize)]
pub struct UnsettledRefundView {
    /// Its tenant.
    pub tenant_id: String,
    /// The case, as its tenant's API shows it.
    #[serde(flatten)]
    pub case: crate::api::reconciliation::RefundCaseView,
}

/// `GET /console/overview`.
pub(super) async fn overview(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match view(&state, &headers).await {
        Ok(view) => {
            let mut response = axum::Json(view).into_response();
            response.headers_mut().insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-store"),
            );
            response
        }
        Err(error) => error.into_response(),
    }
}

async fn view(state: &AppState, headers: &HeaderMap) -> Result<ConsoleView, ApiError> {
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
    let now_ms = state.ports.clock.now_ms();
    // One reader at a time refreshes; the others wait for it and reuse its answer.
    let mut last = state.pages.overview.last.lock().await;
    let fresh = last.as_ref().filter(|(read_at_ms, _)| {
        now_ms.saturating_sub(*read_at_ms) < millis(CONSOLE_OVERVIEW_TTL) && *read_at_ms <= now_ms
    });
    let (store_read_at_ms, store) = match fresh {
        Some((read_at_ms, overview)) => (*read_at_ms, overview.clone()),
        None => {
            let overview = operator::overview(&state.ports, now_ms).await?;
            *last = Some((now_ms, overview.clone()));
            (now_ms, overview)
        }
    };
    drop(last);
    Ok(ConsoleView {
        now_ms,
        journal: console.journal.snapshot(),
        store,
        store_read_at_ms,
        cases: super::cases::open_cases(state).await?,
        refund_cases: state
            .ports
            .store
            .refund_cases
            .unsettled_oldest(super::cases::CONSOLE_CASES_MAX)
            .await?
            .iter()
            .map(|case| UnsettledRefundView {
                tenant_id: case.case.tenant_id.clone(),
                case: crate::api::reconciliation::RefundCaseView::of(case),
            })
            .collect(),
        parked_events: super::parked::parked(state).await?,
    })
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Whether the request carries the console key (compared by digest, in constant time).
pub(super) fn authorized(headers: &HeaderMap, api_key_sha256: &str) -> bool {
    // None, or two (ambiguous): refused.
    let Some(key) = crate::api::bearer_key(headers) else {
        return false;
    };
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    let expected = api_key_sha256.as_bytes();
    digest.len() == expected.len()
        && digest
            .bytes()
            .zip(expected)
            .fold(0_u8, |difference, (left, right)| {
                difference | (left ^ right)
            })
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_console_key_once_opens_the_console() {
        let expected = hex::encode(Sha256::digest(b"console-key-0123456789"));
        let mut headers = HeaderMap::new();
        assert!(!authorized(&headers, &expected), "no key");
        headers.insert(
            header::AUTHORIZATION,
            "Bearer console-key-0123456789".parse().expect("value"),
        );
        assert!(authorized(&headers, &expected));
        headers.insert(
            header::AUTHORIZATION,
            "Bearer another-key-0123456789".parse().expect("value"),
        );
        assert!(!authorized(&headers, &expected), "another key");
        headers.insert(
            header::AUTHORIZATION,
            "Bearer console-key-0123456789".parse().expect("value"),
        );
        headers.append(
            header::AUTHORIZATION,
            "Bearer console-key-0123456789".parse().expect("value"),
        );
        assert!(
            !authorized(&headers, &expected),
            "two headers are ambiguous"
        );
    }
}
