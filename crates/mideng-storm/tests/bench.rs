//! The bench runs every scenario and its answers are the expected ones (speed is never
//! asserted).

mod support;

use mideng_storm::bench::{BenchArgs, Machinery, Operation, PathKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_runs_and_replays_are_replays() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench");
    let json = dir.join("report.json");
    std::fs::create_dir_all(&dir).expect("dir");
    let args = BenchArgs {
        concurrency: 2,
        duration_secs: 1,
        dir: dir.clone(),
        json: Some(json.clone()),
        ..BenchArgs::default()
    };
    let report = mideng_storm::bench::run(args, support::identity())
        .await
        .expect("the bench runs");
    let table = report.table();

    let mut expected = Vec::new();
    for operation in Operation::ALL {
        expected.push((operation, Machinery::On, PathKind::FirstTime));
        expected.push((operation, Machinery::On, PathKind::Replay));
        // The notify path has no switch.
        if operation != Operation::Callback {
            expected.push((operation, Machinery::Off, PathKind::FirstTime));
            expected.push((operation, Machinery::Off, PathKind::Repeat));
        }
    }
    assert_eq!(report.scenarios.len(), expected.len(), "{table}");
    for (operation, machinery, path) in expected {
        let scenario = report
            .scenario(operation, machinery, path)
            .unwrap_or_else(|| panic!("no {operation:?} {machinery:?} {path:?}\n{table}"));
        let figures = &scenario.figures;
        assert!(
            figures.requests > 0,
            "{operation:?} {machinery:?} {path:?}\n{table}"
        );
        assert_eq!(
            figures.errors, 0,
            "{operation:?} {machinery:?} {path:?}\n{table}"
        );
        match (machinery, path) {
            // Every replay was answered from the record and said so.
            (Machinery::On, PathKind::Replay) => {
                assert_eq!(
                    scenario.replayed, figures.requests,
                    "{operation:?}\n{table}"
                );
            }
            (_, PathKind::FirstTime) => {
                assert_eq!(scenario.replayed, 0, "{operation:?}\n{table}");
                assert_eq!(scenario.refused, 0, "{operation:?}\n{table}");
            }
            // Without a record, the ledger's constraint refuses a repeated deduct.
            (Machinery::Off, PathKind::Repeat) if operation != Operation::PaymentCreation => {
                assert_eq!(scenario.refused, figures.requests, "{operation:?}\n{table}");
            }
            _ => {}
        }
    }
    assert_eq!(
        report.limits.len(),
        1,
        "embedded: the database only\n{table}"
    );
    assert!(report.limits[0].figures.requests > 0, "{table}");
    assert_eq!(report.limits[0].figures.errors, 0, "{table}");
    assert!(
        report
            .ratios
            .iter()
            .any(|ratio| ratio.name.starts_with("fraction of the database limit")),
        "{table}"
    );
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON report")).expect("JSON");
    assert_eq!(
        written["scenarios"].as_array().map(Vec::len),
        Some(report.scenarios.len())
    );
    // The deployments' databases are gone.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".db"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
