//! Quiescence: after the workload, what the storm waits for and settles before the audit —
//! unanswered keyed requests answered, notifies settled, reconciliation rounds and the bills,
//! webhooks and events drained.

use std::time::{Duration, Instant};

use mideng_pay::domain::events::{PAYMENT_SUCCEEDED, REFUND_SUCCEEDED};
use mideng_pay::workers::reconcile::{ReconcileSettings, reconcile_once};
use serde_json::Value;

use super::clients::{Pending, Shared, keyed};

/// Answers every keyed request that had none when its client gave up (leases of crashed
/// owners run out, then the key is taken over).
pub(super) async fn finish_pending(shared: &Shared) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rng = fastrand::Rng::with_seed(7);
    loop {
        let pending: Vec<Pending> = std::mem::take(&mut shared.log().unresolved);
        if pending.is_empty() || Instant::now() > deadline {
            shared.log().unresolved.extend(pending);
            return;
        }
        for request in pending {
            keyed(shared, &mut rng, request, None, Duration::from_secs(20), 3).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The channel's time, from the simulator's clock (0 if it does not answer: the bills of the
/// day of the Unix epoch are then asked for, and the run reports them missing).
pub(super) async fn channel_now_ms(shared: &Shared) -> i64 {
    shared
        .sim(reqwest::Method::GET, "/sim/clock", Value::Null)
        .await
        .and_then(|clock| clock["now_ms"].as_i64())
        .unwrap_or(0)
}

/// Reconciliation rounds over everything until one changes nothing. Payments: until a round
/// moves none and has no answer missing, or until three rounds in a row moved none and left the
/// same number without a definite answer (a payment the channel answers the same way every
/// time is not settled by a fourth round: the audit judges it), 20 rounds at most. On a grown
/// database a round takes about a minute, so the rule matters. Refunds and refund cases: until
/// none is PROCESSING and none was refunded by the round (a WeChat refund takes 5 s of channel
/// time; a lost answer is asked again), for at most a minute after the last round that refunded
/// a case or settled a refund — the audit reports any left. (A minute from the first round was
/// too short once the payment rounds stopped early: the cases' refunds, made by a late round,
/// were still PROCESSING when the rounds ended, and the bills then disagreed with them.)
pub(super) async fn settle_by_reconciliation(
    ports: &mideng_pay::flows::Ports,
    everything: &ReconcileSettings,
) -> anyhow::Result<()> {
    const SAME_ROUNDS: u32 = 3;
    const REFUNDS_WAIT: Duration = Duration::from_secs(60);
    let mut refunds_until = Instant::now() + REFUNDS_WAIT;
    let mut still = (0_u32, None::<u32>);
    for round_number in 1.. {
        let round = reconcile_once(ports, everything).await?;
        if round.cases_refunded > 0 || round.refunds_settled > 0 {
            refunds_until = Instant::now() + REFUNDS_WAIT;
        }
        let moved = round.paid > 0 || round.closed > 0 || round.cases > 0 || round.busy > 0;
        still = if !moved && still.1 == Some(round.unknown) {
            (still.0 + 1, still.1)
        } else if moved {
            (0, None)
        } else {
            (1, Some(round.unknown))
        };
        if round.unknown > 0 {
            tracing::info!(
                round = round_number,
                unknown = round.unknown,
                "reconciliation: payments without a definite answer"
            );
        }
        let payments_settled =
            round_number >= 20 || !moved && round.unknown == 0 || still.0 >= SAME_ROUNDS;
        let refunds_settled = round.refunds_examined == 0 && round.cases_refunded == 0
            || Instant::now() >= refunds_until;
        if payments_settled && refunds_settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Reconciles every configured channel's bill of every channel day from `from_ms` to `to_ms`
/// (Beijing days), through the service's own bill run; a run that fails is reported as a bill
/// not published, with its error in the log.
pub(super) async fn reconcile_bills(
    operator: &mideng_pay::state::AppState,
    from_ms: i64,
    to_ms: i64,
) -> Vec<mideng_pay::workers::bill::BillReport> {
    use mideng_channel::ChannelKind;
    use mideng_channel::bill::BillDate;
    use mideng_pay::workers::bill::{BillReport, reconcile_bill};
    let mut days = Vec::new();
    if let (Some(first), Some(last)) = (BillDate::containing(from_ms), BillDate::containing(to_ms))
    {
        let mut day = last;
        days.push(day);
        // At most a month of days: the channel's clock is not moved that far by a storm.
        while day > first && days.len() < 31 {
            match day.previous() {
                Some(previous) => {
                    day = previous;
                    days.push(day);
                }
                None => break,
            }
        }
    }
    days.reverse();
    let mut reports = Vec::new();
    for date in days {
        for channel in [ChannelKind::Alipay, ChannelKind::Wechat] {
            if operator.ports.channels.get(channel).is_none() {
                continue;
            }
            match reconcile_bill(&operator.ports, channel, date).await {
                Ok(report) => reports.push(report),
                Err(error) => {
                    tracing::error!(channel = channel.as_str(), %date, %error, "bill run failed");
                    reports.push(BillReport {
                        channel: channel.as_str().to_owned(),
                        date: date.to_string(),
                        ..BillReport::default()
                    });
                }
            }
        }
    }
    reports
}

/// Waits until no notify of these trades is being delivered or due within a few seconds.
/// Later retries of the channels' schedules (minutes apart) are not waited for: whatever they
/// would bring, reconciliation asks the channel for it, and a late duplicate changes nothing.
pub(super) async fn settle_notifies(shared: &Shared, payments: &[String]) {
    let now = shared
        .sim(reqwest::Method::GET, "/sim/clock", Value::Null)
        .await
        .and_then(|clock| clock["now_ms"].as_i64())
        .unwrap_or(0);
    let horizon = now.saturating_add(10_000);
    let deadline = Instant::now() + Duration::from_secs(60);
    for number in payments {
        loop {
            let trade = shared
                .sim(
                    reqwest::Method::GET,
                    &format!("/sim/trades/{number}"),
                    Value::Null,
                )
                .await
                .unwrap_or(Value::Null);
            let busy = trade["notifies"].as_array().is_some_and(|notifies| {
                notifies
                    .iter()
                    .any(|notify| match notify["state"].as_str() {
                        Some("delivering") => true,
                        Some("scheduled") => notify["next_delivery_at_ms"]
                            .as_i64()
                            .is_some_and(|due| due <= horizon),
                        _ => false,
                    })
            });
            if !busy || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Waits until no webhook delivery is pending (the merchant fails some on purpose: they are
/// retried within seconds on the storm's schedule).
pub(super) async fn drain_webhooks(operator: &mideng_pay::state::AppState) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !operator
        .ports
        .store
        .webhooks
        .due(&mideng_pay::store::webhooks::DueQuery::all(i64::MAX, 1))
        .await?
        .is_empty()
    {
        if Instant::now() > deadline {
            // The audit names what is left.
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Waits until the outbox is empty (every event relayed, whatever its topic) and the
/// in-database queues of the consumed topics drained — `payment.succeeded` (the entitlement
/// consumer) and `refund.succeeded` (the revocation consumer: the audit checks each grant of a
/// payment refunded in full is revoked) — then a moment for the consumers' last
/// acknowledgements. `payment.closed` has no consumer in the storm's deployment, so its queue is
/// not waited for.
pub(super) async fn drain_events(operator: &mideng_pay::state::AppState) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let backlog = operator.ports.store.events.outbox_backlog().await?;
        let mut queued = 0;
        for topic in [PAYMENT_SUCCEEDED, REFUND_SUCCEEDED] {
            queued += operator.ports.store.events.queue_depth(topic).await?;
        }
        if backlog.unsent == 0 && queued == 0 {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("events never drained: {backlog:?}, {queued} queued");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}
