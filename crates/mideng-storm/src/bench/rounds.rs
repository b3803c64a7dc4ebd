//! The rounds of one deployment pair: payment creation and its callbacks (the notifies signed
//! beforehand, in parallel), then the deducts on each kind of wallet, each first-time and
//! replayed, on and off.

use super::*;

pub(super) async fn payment_creation_and_callbacks(
    bench: &mut Bench,
    config: &SimConfig,
    on_api: &Api,
    off_api: &Api,
) -> anyhow::Result<()> {
    let (concurrency, duration) = (bench.concurrency, bench.duration);
    tracing::info!("bench: preparing orders");
    bench.step("preparing orders");
    let ((on_orders, on_prepared), (off_orders, off_prepared)) = tokio::join!(
        scenarios::prepare_orders(on_api, concurrency, duration),
        scenarios::prepare_orders(off_api, concurrency, duration),
    );
    for prepared in [&on_prepared, &off_prepared] {
        if let Some(failure) = &prepared.first_failure {
            bench.note(format!(
                "{} of {} orders could not be prepared: {failure}",
                prepared.failed,
                prepared.requests()
            ));
        }
    }

    let operation = Operation::PaymentCreation;
    bench.announce(operation, Machinery::On, PathKind::FirstTime);
    let (tally, on_created) =
        scenarios::create_payments(on_api, on_orders, concurrency, duration).await;
    bench.push(operation, Machinery::On, PathKind::FirstTime, tally);
    bench.announce(operation, Machinery::Off, PathKind::FirstTime);
    let (tally, off_created) =
        scenarios::create_payments(off_api, off_orders, concurrency, duration).await;
    bench.push(operation, Machinery::Off, PathKind::FirstTime, tally);
    let on_created = Arc::new(on_created);
    bench.announce(operation, Machinery::On, PathKind::Replay);
    let tally =
        scenarios::create_payments_again(on_api, on_created.clone(), concurrency, duration).await;
    bench.push(operation, Machinery::On, PathKind::Replay, tally);
    bench.announce(operation, Machinery::Off, PathKind::Repeat);
    let tally =
        scenarios::create_payments_again(off_api, Arc::new(off_created), concurrency, duration)
            .await;
    bench.push(operation, Machinery::Off, PathKind::Repeat, tally);

    let operation = Operation::Callback;
    tracing::info!("bench: signing notifies");
    bench.step("signing notifies");
    let forms = Arc::new(sign_in_parallel(config, &on_created, duration).await?);
    bench.announce(operation, Machinery::On, PathKind::FirstTime);
    let tally = scenarios::callbacks(on_api, forms.clone(), false, concurrency, duration).await;
    // The first-time scenario hands out the forms in order, one per request, and may end at
    // its deadline before the last: only those sent are replays the second time.
    let sent = usize::try_from(tally.requests()).unwrap_or(usize::MAX);
    let forms = Arc::new(forms.iter().take(sent).cloned().collect::<Vec<_>>());
    bench.push(operation, Machinery::On, PathKind::FirstTime, tally);
    bench.announce(operation, Machinery::On, PathKind::Replay);
    let before = notify_duplicates();
    let mut tally = scenarios::callbacks(on_api, forms, true, concurrency, duration).await;
    match (before, notify_duplicates()) {
        (Some(before), Some(after)) => tally.mark_replayed(after.saturating_sub(before)),
        _ => bench.note("no metrics recorder in this process: replays of notifies are not counted"),
    }
    bench.push(operation, Machinery::On, PathKind::Replay, tally);
    Ok(())
}

/// Signs the notifies of `created` on every core, for up to `budget`.
async fn sign_in_parallel(
    config: &SimConfig,
    created: &Arc<Vec<scenarios::Created>>,
    budget: Duration,
) -> anyhow::Result<Vec<String>> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let share = created.len().div_ceil(cores).max(1);
    let signers: Vec<_> = (0..cores)
        .map(|core| {
            let (config, created) = (config.clone(), created.clone());
            tokio::task::spawn_blocking(move || {
                let start = (core * share).min(created.len());
                let end = (start + share).min(created.len());
                scenarios::sign_notifies(&config, created.get(start..end).unwrap_or(&[]), budget)
            })
        })
        .collect();
    let mut forms = Vec::with_capacity(created.len());
    for signer in signers {
        forms.extend(signer.await.context("a signing task ended")??);
    }
    Ok(forms)
}

/// Notifies the service recognised as duplicates by their dedup record, so far, in this
/// process; `None` without a metrics recorder.
fn notify_duplicates() -> Option<u64> {
    let handle = mideng_pay::app::metrics_handle()?;
    let operation = format!(
        "operation=\"{}\"",
        mideng_pay::flows::operation::NOTIFY_ALIPAY
    );
    let count = handle
        .render()
        .lines()
        .filter(|line| {
            line.starts_with("mideng_service_decisions_total{")
                && line.contains("layer=\"dedup\"")
                && line.contains("outcome=\"duplicate\"")
                && line.contains(&operation)
        })
        // Counters render as integers; a trailing fraction would be `.0`.
        .filter_map(|line| {
            let (_, value) = line.rsplit_once(' ')?;
            value.split('.').next()?.parse::<u64>().ok()
        })
        .sum();
    Some(count)
}

pub(super) async fn deducts(
    bench: &mut Bench,
    wallets: Wallets,
    on_api: &Api,
    off_api: &Api,
) -> anyhow::Result<()> {
    let (concurrency, duration) = (bench.concurrency, bench.duration);
    let load = Load::Closed {
        clients: concurrency,
    };
    let operation = deduct_operation(wallets);
    scenarios::fund(on_api, wallets, concurrency).await?;
    scenarios::fund(off_api, wallets, concurrency).await?;
    bench.announce(operation, Machinery::On, PathKind::FirstTime);
    let (tally, on_deducted) = scenarios::deduct(on_api, wallets, load, duration).await;
    let on_rate = tally.figures().per_second;
    bench.push(operation, Machinery::On, PathKind::FirstTime, tally);
    bench.announce(operation, Machinery::Off, PathKind::FirstTime);
    let (tally, off_deducted) = scenarios::deduct(off_api, wallets, load, duration).await;
    let off_rate = tally.figures().per_second;
    bench.push(operation, Machinery::Off, PathKind::FirstTime, tally);
    let on_deducted = Arc::new(on_deducted);
    bench.announce(operation, Machinery::On, PathKind::Replay);
    let tally = scenarios::deduct_again(on_api, on_deducted.clone(), load, duration).await;
    let replay_rate = tally.figures().per_second;
    bench.push(operation, Machinery::On, PathKind::Replay, tally);
    bench.announce(operation, Machinery::Off, PathKind::Repeat);
    let tally = scenarios::deduct_again(off_api, Arc::new(off_deducted), load, duration).await;
    bench.push(operation, Machinery::Off, PathKind::Repeat, tally);
    if wallets != Wallets::Distinct || bench.open_loop_percent == 0 {
        return Ok(());
    }

    // The same deducts on a schedule, at a share of what the closed loop reached: the
    // latency a client sees at a load the service carries.
    let share = f64::from(bench.open_loop_percent) / 100.0;
    let open = |closed: f64| Load::Open {
        per_second: closed * share,
        slots: concurrency,
    };
    bench.step("deduct, distinct wallets · machinery on · first-time · open loop");
    let (tally, _) = scenarios::deduct(on_api, wallets, open(on_rate), duration).await;
    bench.push_open(
        operation,
        Machinery::On,
        PathKind::FirstTime,
        on_rate,
        open(on_rate),
        tally,
    );
    bench.step("deduct, distinct wallets · machinery off · first-time · open loop");
    let (tally, _) = scenarios::deduct(off_api, wallets, open(off_rate), duration).await;
    bench.push_open(
        operation,
        Machinery::Off,
        PathKind::FirstTime,
        off_rate,
        open(off_rate),
        tally,
    );
    bench.step("deduct, distinct wallets · machinery on · replay · open loop");
    let tally = scenarios::deduct_again(on_api, on_deducted, open(replay_rate), duration).await;
    bench.push_open(
        operation,
        Machinery::On,
        PathKind::Replay,
        replay_rate,
        open(replay_rate),
        tally,
    );
    Ok(())
}
