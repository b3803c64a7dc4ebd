//! The CI-sized storm: seconds of duplicates and faults, then the audit must find nothing, and
//! every source of duplicates must actually have occurred.

mod support;

use std::path::Path;

use mideng_storm::storm::{BreakLayer, StackKind, StormArgs, StormReport, run};

fn assert_clean(report: &StormReport) {
    let table = report.table();
    // The report is the point of a storm: keep it in the test's output.
    eprintln!("{table}");
    assert!(report.passed(), "{table}");
    assert!(report.audit.paid > 0, "nothing was paid: {table}");
    assert!(report.audit.grants > 0, "nothing was granted: {table}");
    assert!(report.audit.deducts > 0, "nothing was deducted: {table}");
    for source in ["double click", "manual replay", "replayed byte for byte"] {
        assert!(
            report.duplicates.get(source).copied().unwrap_or(0) > 0,
            "{source} never happened: {table}"
        );
    }
    for layer in ["key", "dedup", "cas"] {
        assert!(
            report.layers.contains_key(layer),
            "the {layer} layer caught nothing: {table}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_storm_leaves_every_invariant_intact() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("storm");
    let report = run(
        StormArgs {
            seed: Some(20_261_201),
            stack: StackKind::Embedded,
            duration_secs: 8,
            concurrency: 6,
            tenants: 2,
            fault_every_secs: 3,
            dir,
            ..StormArgs::default()
        },
        support::identity(),
        false,
    )
    .await
    .expect("the storm ran");
    assert_clean(&report);
    assert!(
        report.faults.values().sum::<u64>() > 0,
        "no fault was injected: {}",
        report.table()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_redis_rabbitmq_storm_leaves_every_invariant_intact() {
    let report = run(
        StormArgs {
            seed: Some(1_201),
            stack: StackKind::Servers,
            instances: 2,
            duration_secs: 10,
            concurrency: 6,
            tenants: 2,
            fault_every_secs: 2,
            ..StormArgs::default()
        },
        support::identity(),
        false,
    )
    .await
    .expect("the storm ran");
    assert_clean(&report);
    assert!(
        report
            .duplicates
            .get("same request to two instances")
            .copied()
            .unwrap_or(0)
            > 0,
        "{}",
        report.table()
    );
}

/// Layer by layer: with the `Idempotency-Key` records off, the audit reports what they prevent
/// (a retried credit applied twice, a replay that differs); with the notify dedup off, nothing
/// breaks because the payment's compare-and-set catches every duplicate notify, and the report
/// says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_broken_layer_is_caught_by_the_audit_or_by_a_deeper_layer() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("storm-broken");
    let storm = |layer| StormArgs {
        seed: Some(7),
        stack: StackKind::Embedded,
        duration_secs: 5,
        concurrency: 6,
        tenants: 2,
        fault_every_secs: 0,
        dir: dir.clone(),
        break_layer: Some(layer),
        ..StormArgs::default()
    };
    let keys = run(storm(BreakLayer::Keys), support::identity(), false)
        .await
        .expect("the storm ran");
    let table = keys.table();
    eprintln!("{table}");
    assert!(!keys.passed(), "{table}");
    assert!(
        keys.violations.iter().any(|violation| matches!(
            violation.invariant,
            "every credit key credited exactly once" | "every replay byte-identical"
        )),
        "{table}"
    );
    assert!(table.contains("layer keys was OFF: the audit found what it prevents"));

    let notify = run(storm(BreakLayer::NotifyDedup), support::identity(), false)
        .await
        .expect("the storm ran");
    let table = notify.table();
    eprintln!("{table}");
    assert!(notify.passed(), "{table}");
    let caught: u64 = notify
        .layers
        .get("cas")
        .map(|outcomes| {
            outcomes
                .iter()
                .filter(|(outcome, _)| outcome.starts_with("notify."))
                .map(|(_, count)| count)
                .sum()
        })
        .unwrap_or(0);
    assert!(caught > 0, "{table}");
    assert!(
        table.contains("the deeper layers held (cas caught"),
        "{table}"
    );
}
