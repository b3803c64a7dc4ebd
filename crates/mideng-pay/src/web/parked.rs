//! The console's parked events: what a consumer failed too often, with its last error, and an
//! operator's replay or discard of one, each with its reason recorded
//! (`POST /console/events/replay` and `/console/events/discard`, `{message_id, reason}`, to the
//! console key only).

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::cases::operator;
use crate::api::{ApiError, AppState, Code};
use crate::domain::rfc3339;
use crate::store::FailedEvent;
use crate::workers::ConsumerSettings;
use crate::workers::consumer::{self, ConsumerPorts, Replayed};

/// Most parked events the console shows.
pub(super) const CONSOLE_PARKED_MAX: u32 = 50;

/// One parked event as the console shows it (its payload stays in the database).
#[derive(Clone, Debug, Serialize)]
pub struct ParkedView {
    /// The message id.
    pub message_id: String,
    /// Which consumer parked it.
    pub consumer: String,
    /// Its topic.
    pub topic: String,
    /// Failed deliveries.
    pub attempts: i64,
    /// The last failure.
    pub last_error: String,
    /// `PARKED`, `REPLAYED` or `DISCARDED`.
    pub status: String,
    /// What an operator did, and why.
    pub resolution: Option<String>,
    /// Last change.
    pub updated_at: String,
}

impl ParkedView {
    fn of(event: &FailedEvent) -> Self {
        Self {
            message_id: event.message_id.clone(),
            consumer: event.consumer.clone(),
            topic: event.topic.clone(),
            attempts: event.attempts,
            last_error: event.last_error.clone(),
            status: event.status.as_str().to_owned(),
            resolution: event.resolution.clone(),
            updated_at: rfc3339(event.updated_at_ms),
        }
    }
}

/// What an operator sends.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Act {
    message_id: String,
    reason: String,
}

/// The parked events, oldest first.
pub(super) async fn parked(state: &AppState) -> Result<Vec<ParkedView>, ApiError> {
    Ok(state
        .ports
        .store
        .event_failures
        .parked(CONSOLE_PARKED_MAX)
        .await?
        .iter()
        .map(ParkedView::of)
        .collect())
}

/// `POST /console/events/replay`.
pub(super) async fn replay(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<axum::Json<Act>, JsonRejection>,
) -> Response {
    respond(act(&state, &headers, body, true).await)
}

/// `POST /console/events/discard`.
pub(super) async fn discard(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<axum::Json<Act>, JsonRejection>,
) -> Response {
    respond(act(&state, &headers, body, false).await)
}

fn respond(result: Result<ParkedView, ApiError>) -> Response {
    match result {
        Ok(view) => axum::Json(view).into_response(),
        Err(error) => error.into_response(),
    }
}

async fn act(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<axum::Json<Act>, JsonRejection>,
    replaying: bool,
) -> Result<ParkedView, ApiError> {
    operator(state, headers)?;
    let axum::Json(act) = body?;
    let reason = super::cases::reason(&act.reason)?;
    let failures = state.ports.store.event_failures.clone();
    if failures.failed_event(&act.message_id).await?.is_none() {
        return Err(ApiError::not_found("event"));
    }
    if replaying {
        let ports = ConsumerPorts {
            grants: state.ports.store.grants.clone(),
            failures: failures.clone(),
        };
        match consumer::replay(
            &ports,
            &act.message_id,
            reason,
            &ConsumerSettings::default(),
        )
        .await?
        {
            Replayed::Processed => {}
            Replayed::FailedAgain => {
                return Err(ApiError::new(
                    Code::EventNotParked,
                    "the replay failed again: the event stays parked with the new error",
                ));
            }
            Replayed::NotParked => {
                return Err(ApiError::new(
                    Code::EventNotParked,
                    "the event is not parked",
                ));
            }
        }
    } else if !consumer::discard(failures.as_ref(), &act.message_id, reason).await? {
        return Err(ApiError::new(
            Code::EventNotParked,
            "the event is not parked",
        ));
    }
    tracing::info!(message_id = %act.message_id, replaying, "parked event settled by an operator");
    let event = failures
        .failed_event(&act.message_id)
        .await?
        .ok_or_else(|| ApiError::not_found("event"))?;
    Ok(ParkedView::of(&event))
}
