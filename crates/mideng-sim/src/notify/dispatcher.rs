//! The dispatcher: a background task that sends due notify deliveries to the merchant and
//! records what the merchant answered.
//!
//! It sleeps until the next delivery or expiry is due on the simulator's clock (converted to
//! real time by the clock's speed), or until woken because work arrived or the clock was
//! advanced. Deliveries run concurrently, at most [`DELIVERIES_IN_FLIGHT_MAX`] at once, each
//! bounded by the HTTP client's [`DELIVERY_TIMEOUT`](crate::limits::DELIVERY_TIMEOUT). On
//! shutdown it stops taking work and aborts deliveries in flight; those notifies stay in the
//! `delivering` state, as a channel that went down mid-delivery would leave them.

use std::sync::Arc;

use axum::http::{HeaderValue, header};
use mideng_channel::keys::random_nonce;
use mideng_channel::{ChannelKind, alipay, wechat};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::queue::{Copies, DeliveryJob, DeliveryRecord, Payload};
use crate::limits::{
    DELIVERIES_IN_FLIGHT_MAX, DELIVERY_ANSWER_BYTES_MAX, DELIVERY_ANSWER_RECORDED_BYTES_MAX,
    DISPATCHER_IDLE_MAX,
};
use crate::shared::Shared;

/// Runs until `stop` turns true (or its sender is dropped).
pub(crate) async fn run_dispatcher(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // Bounds deliveries in flight; a permit travels with each delivery task.
    let permits = Arc::new(Semaphore::new(DELIVERIES_IN_FLIGHT_MAX));
    let mut deliveries = JoinSet::new();
    loop {
        if *stop.borrow() {
            break;
        }
        // Reap finished deliveries so that the set does not grow.
        while deliveries.try_join_next().is_some() {}
        // Take the permits first, then only as many jobs as there are permits.
        let mut taken_permits = Vec::new();
        while let Ok(permit) = Arc::clone(&permits).try_acquire_owned() {
            taken_permits.push(permit);
        }
        let (jobs, next_wake_ms) = {
            let mut world = shared.settled_world();
            let now_ms = world.now_ms();
            let jobs = world.notifies.take_due(now_ms, taken_permits.len());
            (jobs, world.next_wake_ms())
        };
        for (job, permit) in jobs.into_iter().zip(taken_permits.drain(..)) {
            deliveries.spawn(deliver(Arc::clone(&shared), job, permit));
        }
        // Unused permits go back to the semaphore here.
        drop(taken_permits);
        let sleep = if permits.available_permits() == 0 {
            // Saturated: a finishing delivery wakes the loop.
            DISPATCHER_IDLE_MAX
        } else {
            next_wake_ms
                .map_or(DISPATCHER_IDLE_MAX, |due_ms| {
                    shared.clock.real_time_until(due_ms)
                })
                .min(DISPATCHER_IDLE_MAX)
        };
        tokio::select! {
            changed = stop.changed() => {
                // A dropped sender means nobody can stop us any more: stop now.
                if changed.is_err() {
                    break;
                }
            }
            () = tokio::time::sleep(sleep) => {}
            () = shared.wake.notified() => {}
        }
    }
    deliveries.shutdown().await;
}

/// Sends one delivery (one or two copies) and records the answers.
async fn deliver(shared: Arc<Shared>, job: DeliveryJob, permit: OwnedSemaphorePermit) {
    let records = match job.copies {
        Copies::One => vec![send_copy(&shared, &job, 1).await],
        Copies::TwoInSequence => {
            let first = send_copy(&shared, &job, 1).await;
            let second = send_copy(&shared, &job, 2).await;
            vec![first, second]
        }
        Copies::TwoAtOnce => {
            let (first, second) =
                tokio::join!(send_copy(&shared, &job, 1), send_copy(&shared, &job, 2));
            vec![first, second]
        }
    };
    shared
        .settled_world()
        .notifies
        .record_delivery(job.key, records);
    drop(permit);
    shared.wake.notify_one();
}

/// Sends one copy: signs it with the current channel time and posts it.
async fn send_copy(shared: &Shared, job: &DeliveryJob, copy: u32) -> DeliveryRecord {
    let at_ms = shared.clock.now_ms();
    let mut record = DeliveryRecord {
        delivery: job.delivery_number,
        copy,
        at_ms,
        status: None,
        answer: None,
        error: None,
        acknowledged: false,
    };
    let request = match signed_request(shared, job, at_ms) {
        Ok(request) => request,
        Err(reason) => {
            record.error = Some(reason.to_owned());
            return record;
        }
    };
    match request.send().await {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let mut answer = Vec::new();
            let mut read_error = None;
            // Read at most DELIVERY_ANSWER_BYTES_MAX: an acknowledgement is one word.
            while answer.len() < DELIVERY_ANSWER_BYTES_MAX {
                match response.chunk().await {
                    Ok(Some(chunk)) => answer.extend_from_slice(&chunk),
                    Ok(None) => break,
                    Err(error) => {
                        read_error = Some(describe(&error));
                        break;
                    }
                }
            }
            record.status = Some(status);
            record.acknowledged = read_error.is_none()
                && match job.channel {
                    // Alipay: only the exact body `success` acknowledges.
                    ChannelKind::Alipay => status == 200 && answer == alipay::NOTIFY_ACK.as_bytes(),
                    // WeChat Pay: 200 or 204, whatever the body.
                    ChannelKind::Wechat => status == 200 || status == 204,
                };
            answer.truncate(DELIVERY_ANSWER_RECORDED_BYTES_MAX);
            record.answer = Some(String::from_utf8_lossy(&answer).into_owned());
            record.error = read_error;
        }
        Err(error) => record.error = Some(describe(&error)),
    }
    tracing::debug!(
        url = %job.url,
        delivery = job.delivery_number,
        copy,
        status = ?record.status,
        acknowledged = record.acknowledged,
        "notify delivered"
    );
    record
}

/// The request for one copy: Alipay gets a fresh `notify_time` and signature, WeChat Pay fresh
/// signed headers over the unchanged body.
fn signed_request(
    shared: &Shared,
    job: &DeliveryJob,
    at_ms: i64,
) -> Result<reqwest::RequestBuilder, &'static str> {
    let config = &shared.config;
    match &job.payload {
        Payload::AlipayForm(params) => {
            let mut params = params.clone();
            params.push(("notify_time".to_owned(), alipay::format_timestamp(at_ms)));
            let content = alipay::notify_sign_content(
                params
                    .iter()
                    .map(|(key, value)| (key.as_str(), value.as_str())),
            );
            let sign = config
                .alipay_gateway_key
                .sign(content.as_bytes())
                .map_err(|_| "signing failed")?;
            params.push(("sign".to_owned(), sign));
            let body = serde_urlencoded::to_string(&params).map_err(|_| "encoding failed")?;
            Ok(shared
                .client
                .post(&job.url)
                .header(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
                )
                .body(body))
        }
        Payload::WechatJson(body) => {
            // The signing timestamp is the moment the message leaves, on the wall clock, as a
            // receiver's five-minute freshness check sees it; the simulated clock (which may
            // run fast or jump) schedules the deliveries and dates what they report.
            let timestamp = crate::clock::wall_clock_ms().div_euclid(1000).to_string();
            let nonce = random_nonce(32);
            let (signature, serial) = shared
                .sign_as_wechat_platform(
                    wechat::notify_message(&timestamp, &nonce, body).as_bytes(),
                )
                .map_err(|_| "signing failed")?;
            Ok(shared
                .client
                .post(&job.url)
                .header(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )
                .header(wechat::HEADER_TIMESTAMP, timestamp)
                .header(wechat::HEADER_NONCE, nonce)
                .header(wechat::HEADER_SIGNATURE, signature)
                .header(wechat::HEADER_SIGNATURE_TYPE, wechat::AUTHORIZATION_SCHEME)
                .header(wechat::HEADER_REQUEST_ID, random_nonce(32))
                .header(wechat::HEADER_SERIAL, serial)
                .body(body.clone()))
        }
    }
}

/// A short reason for a failed delivery.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "timeout".to_owned()
    } else if error.is_connect() {
        "connection failed".to_owned()
    } else {
        "transport error".to_owned()
    }
}
