//! The fault schedule's faults, and the clock that excuses a 5xx while one is active.
//!
//! A fault is held for a moment and then undone. The embedded stack has only the instance crash
//! and the lost channel answer; the servers stack adds Redis and the broker cut off and every
//! database connection terminated; a deployment the storm did not start gets the simulator's
//! fault only.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use super::clients::Shared;
use crate::deploy::Deployment;

/// Time windows of active faults; a 5xx inside one (plus a grace) is excused.
#[derive(Default)]
pub(super) struct FaultClock {
    windows: Mutex<Vec<(Instant, Option<Instant>)>>,
}

const FAULT_GRACE: Duration = Duration::from_secs(3);

impl FaultClock {
    pub(super) fn open(&self) -> usize {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.push((Instant::now(), None));
        windows.len() - 1
    }

    pub(super) fn close(&self, index: usize) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(window) = windows.get_mut(index) {
            window.1 = Some(Instant::now());
        }
    }

    pub(super) fn excused(&self, started: Instant, ended: Instant) -> bool {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.iter().any(|(from, to)| {
            let to = to.map_or(ended, |to| to + FAULT_GRACE);
            started <= to && ended + FAULT_GRACE >= *from
        })
    }
}

/// The channel applies the next creation but its answer is lost.
async fn lose_next_channel_answer(shared: &Shared, rng: &mut fastrand::Rng) {
    let method = if rng.bool() {
        "alipay.trade.precreate"
    } else {
        "wechat.native"
    };
    shared
        .sim(
            reqwest::Method::POST,
            "/sim/fail-next",
            json!({"method": method, "apply_anyway": true}),
        )
        .await;
}

/// One fault, held for a moment, then undone; its name.
pub(super) async fn inject(
    deployment: Option<&mut Deployment>,
    shared: &Shared,
    rng: &mut fastrand::Rng,
    cycle: u64,
) -> anyhow::Result<&'static str> {
    // A deployment the storm did not start gets the simulator's faults only.
    let Some(deployment) = deployment else {
        let window = shared.faults.open();
        lose_next_channel_answer(shared, rng).await;
        shared.faults.close(window);
        return Ok("channel answer lost after applying");
    };
    let kinds: u8 = if deployment.has_servers() { 5 } else { 2 };
    let choice = u8::try_from(cycle % u64::from(kinds)).unwrap_or(0);
    let hold = Duration::from_millis(rng.u64(500..2000));
    let window = shared.faults.open();
    let kind = match choice {
        0 => {
            let index = rng.usize(..deployment.instance_count());
            deployment.crash(index);
            tokio::time::sleep(hold).await;
            deployment.restart(index).await?;
            "instance killed mid-request"
        }
        1 => {
            lose_next_channel_answer(shared, rng).await;
            "channel answer lost after applying"
        }
        2 => {
            deployment.cut_redis();
            tokio::time::sleep(hold).await;
            deployment.restore_redis();
            "Redis cut off"
        }
        3 => {
            deployment.cut_broker();
            tokio::time::sleep(hold).await;
            deployment.restore_broker();
            "broker cut off"
        }
        _ => {
            deployment.kill_database_connections().await?;
            "database connections killed"
        }
    };
    shared.faults.close(window);
    Ok(kind)
}
