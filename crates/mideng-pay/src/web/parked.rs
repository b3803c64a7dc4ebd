//! The console's parked events: what a consumer failed too often and what the broker refused
//! too often (outbox rows the relay parked), each with its last error, and an operator's replay
//! or discard of one, with its reason recorded (`POST /console/events/replay` and
//! `/console/events/discard`, `{message_id, reason}`, to the console key only).

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::cases::operator;
use crate::api::{ApiError, Code};
use crate::domain::rfc3339;
use crate::flows::operator::{self, FailedEvent, ParkedSettled};
use crate::state::AppState;
use crate::workers::ConsumerSettings;

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

/// What the console calls the relay, as the consumer of a parked outbox row.
const OUTBOX_RELAY: &str = "outbox.relay";

impl ParkedView {
    fn of_row(row: &mideng::outbox::sql::ParkedRow) -> Self {
        Self {
            message_id: row.id.clone(),
            consumer: OUTBOX_RELAY.to_owned(),
            topic: row.topic.clone(),
            attempts: row.refusals,
            last_error: row.last_error.clone(),
            status: "PARKED".to_owned(),
            resolution: None,
            updated_at: rfc3339(row.parked_at_ms),
        }
    }

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

/// The parked events, oldest first, then the parked outbox rows, oldest first.
pub(super) async fn parked(state: &AppState) -> Result<Vec<ParkedView>, ApiError> {
    let (events, rows) = operator::parked(&state.ports, CONSOLE_PARKED_MAX).await?;
    Ok(events
        .iter()
        .map(ParkedView::of)
        .chain(rows.iter().map(ParkedView::of_row))
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
    let dedup = ConsumerSettings::default().dedup;
    let not_parked = || ApiError::new(Code::EventNotParked, "the event is not parked");
    match operator::settle_parked(&state.ports, &act.message_id, reason, replaying, dedup).await? {
        ParkedSettled::Event(event) => Ok(ParkedView::of(&event)),
        ParkedSettled::Outbox(row) => {
            let action = if replaying { "replayed" } else { "discarded" };
            Ok(ParkedView {
                status: action.to_ascii_uppercase(),
                resolution: Some(format!("{action}: {reason}")),
                updated_at: rfc3339(state.ports.clock.now_ms()),
                ..ParkedView::of_row(&row)
            })
        }
        ParkedSettled::NotFound => Err(ApiError::not_found("event")),
        ParkedSettled::NotParked => Err(not_parked()),
        ParkedSettled::FailedAgain => Err(ApiError::new(
            Code::EventNotParked,
            "the replay failed again: the event stays parked with the new error",
        )),
    }
}
