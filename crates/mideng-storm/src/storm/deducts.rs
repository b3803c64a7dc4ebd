//! The wallet's deduct script: a deduct with its duplicates, racing on the hot and the lean
//! wallets, some put back by the reversal script.

use std::time::Duration;

use serde_json::json;

use super::clients::{Pending, PendingKind, Shared, keyed, keyed_with_duplicates};
use super::refunds;

/// Of ten deducts, how many go to the lean wallet: with the top-ups the workload sends it
/// (a third of the credits, `storm::run`), more money leaves it than arrives, so it stays
/// near zero and refusals happen in every run.
const LEAN_DEDUCTS_IN_TEN: u8 = 4;

/// One deduct, with its duplicates: some on the lean wallet where the money often does not
/// cover it, some put back, some sent again under a new key or long after.
pub(super) async fn deduct_script(shared: &Shared, rng: &mut fastrand::Rng, tenant: usize, n: u64) {
    let order = format!("{}-do-{n}", shared.run);
    let key = format!("{}-dd-{n}", shared.run);
    // Some deducts race on the lean wallet, where the money often does not cover them.
    let wallet = if rng.u8(..10) < LEAN_DEDUCTS_IN_TEN {
        shared.lean()
    } else {
        shared.hot()
    };
    let amount = rng.i64(1..5_000);
    let pending = Pending {
        label: format!("deduct/{tenant}/{key}"),
        tenant,
        path: format!("/v1/wallets/{wallet}/deduct"),
        body: json!({"order_id": order, "amount": amount}),
        key: key.clone(),
        token_needed: false,
        kind: PendingKind::Deduct {
            user: wallet.clone(),
            order,
            amount,
        },
    };
    let (answer, _) = keyed_with_duplicates(shared, rng, pending.clone()).await;
    if let Some(answer) = answer
        && answer.status == 200
        && let Some(deduction) = answer.json()["deduction_no"].as_str()
        && rng.u8(..10) < 2
    {
        refunds::reverse_script(shared, rng, tenant, &wallet, deduction).await;
    }
    if rng.u8(..10) == 0 {
        // The same order under a new request key: the business key refuses a second debit.
        shared.count("same order, new key");
        let again = Pending {
            label: format!("deduct/{tenant}/{key}-again"),
            key: format!("{key}-again"),
            ..pending.clone()
        };
        keyed(shared, rng, again, None, Duration::from_secs(20), 8).await;
    }
    if rng.u8(..10) < 2 {
        // The same request again, long after its answer.
        shared.count("manual replay");
        keyed(shared, rng, pending, None, Duration::from_secs(20), 8).await;
    }
}
