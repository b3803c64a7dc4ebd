//! The reader: one more client, for the whole workload, that reads the wallets the others
//! race on (`GET /v1/wallets/{user}`) at a modest rate, faults included, so that the history
//! holds what a wallet showed between its moves and the linearizability check
//! ([`crate::audit::linearizable`]) can hold every balance read to some order of them.

use std::time::Duration;

use super::Shared;
use super::workload_end::WorkloadEnd;

/// The pause between two reads, milliseconds: about twenty reads a second in all, a small
/// share of the workload's requests.
const READ_PAUSE_MS: std::ops::Range<u64> = 20..80;

/// How long a read waits for its answer: a read is not retried, and one without an answer is
/// recorded as such.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads a tenant's hot or lean wallet (and now and then a buyer's) until the workload ends.
pub(super) async fn read_until(shared: &Shared, rng: &mut fastrand::Rng, end: &WorkloadEnd) {
    while !end.passed() {
        let tenant = rng.usize(..shared.tenants.len());
        let user = match rng.u8(..10) {
            0..4 => shared.lean(),
            4..8 => shared.hot(),
            _ => format!("{}-u{}", shared.run, rng.u16(..200)),
        };
        let invoked_ns = shared.elapsed_ns();
        let answer = shared
            .send(
                rng.usize(..shared.bases.len()),
                tenant,
                reqwest::Method::GET,
                &format!("/v1/wallets/{user}"),
                None,
                &[],
                READ_TIMEOUT,
            )
            .await;
        shared.read_recorded(tenant, &user, invoked_ns, answer.as_ref());
        tokio::time::sleep(Duration::from_millis(rng.u64(READ_PAUSE_MS))).await;
    }
}
