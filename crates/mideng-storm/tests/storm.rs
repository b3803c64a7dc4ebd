//! The CI-sized storm: seconds of duplicates and faults, then the audit must find nothing, and
//! every source of duplicates must actually have occurred.

use std::path::Path;

use mideng_channel::keys::PrivateKey;
use mideng_sim::{MerchantKeys, SimConfig};
use mideng_storm::storm::{BreakLayer, StackKind, StormArgs, StormReport, run};

fn fixture(name: &str) -> PrivateKey {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mideng-channel/tests/fixtures")
        .join(name);
    let pem = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    PrivateKey::from_pem(&pem).expect("fixture key")
}

/// The simulator's identity from the fixture keys (generating RSA keys would take longer than
/// the storm).
fn identity() -> (SimConfig, MerchantKeys) {
    let merchant = fixture("merchant-private.pem");
    let channel = fixture("channel-private.pem");
    let config = SimConfig {
        alipay_app_id: "2021000000000001".to_owned(),
        alipay_merchant_public_key: merchant.public_key(),
        alipay_gateway_key: channel.clone(),
        wechat_mchid: "1230000109".to_owned(),
        wechat_appid: "wxd678efh567hg6787".to_owned(),
        wechat_merchant_public_key: merchant.public_key(),
        wechat_merchant_serial: "5157F09EFDC096DE15EBE81A47057A7232F1B8E1".to_owned(),
        wechat_platform_key: channel,
        wechat_platform_serial: "PLATFORM0000000000000000000000000000000001".to_owned(),
        wechat_api_v3_key: "0123456789abcdefghijklmnopqrstuv".to_owned(),
        clock_speed: 1,
    };
    let keys = MerchantKeys {
        alipay_private: merchant.clone(),
        wechat_private: merchant,
    };
    (config, keys)
}

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
        identity(),
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
        identity(),
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
    let keys = run(storm(BreakLayer::Keys), identity(), false)
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

    let notify = run(storm(BreakLayer::NotifyDedup), identity(), false)
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
