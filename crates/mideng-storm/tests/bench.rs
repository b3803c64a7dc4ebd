//! The bench runs every scenario, every limit its stack can measure and every wallet strategy,
//! its answers are the expected ones, and it reports each goal (speed is never asserted).

mod support;

use mideng_pay::domain::wallet::WalletStrategy;
use mideng_storm::bench::{
    BenchArgs, BenchReport, BenchRun, GoalKind, LimitKind, Machinery, Operation, PathKind, Via,
};
use mideng_storm::deploy::{ServerArgs, StackKind};

/// Every scenario of the two deployments ran, without errors, and replays were replays.
fn assert_every_scenario_ran(run: &BenchRun, table: &str) {
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
    assert_eq!(run.scenarios.len(), expected.len(), "{table}");
    for (operation, machinery, path) in expected {
        let scenario = run
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
        // Every request went through the service's threads, and the kernel counted it there.
        let cpu = figures.cpu.unwrap_or_else(|| {
            panic!("no CPU figures: {operation:?} {machinery:?} {path:?}\n{table}")
        });
        assert!(
            cpu.service_us > 0.0 && cpu.client_us > 0.0,
            "{operation:?} {machinery:?} {path:?}: {cpu:?}\n{table}"
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
}

/// The limit of `kind` measured `via` ran without errors.
fn assert_limit_measured(run: &BenchRun, kind: LimitKind, via: Via, table: &str) {
    let limit = run
        .limit(kind, via)
        .unwrap_or_else(|| panic!("no {kind:?} limit {via:?}\n{table}"));
    let figures = &limit.figures;
    assert!(
        figures.requests > 0 && figures.per_second > 0.0,
        "{kind:?} {via:?}\n{table}"
    );
    assert!(figures.p50_ms > 0.0, "{kind:?} {via:?}\n{table}");
    assert_eq!(figures.errors, 0, "{kind:?} {via:?}\n{table}");
}

/// Each strategy's deducts ran on both kinds of wallet, its replays were replays, and it is read
/// against its limit.
fn assert_strategies_ran(run: &BenchRun, strategies: &[WalletStrategy], table: &str) {
    assert_eq!(run.strategies.len(), strategies.len() * 2, "{table}");
    for &strategy in strategies {
        for operation in Operation::DEDUCTS {
            let row = run
                .strategy(strategy, operation)
                .unwrap_or_else(|| panic!("no {strategy} {operation:?}\n{table}"));
            assert!(row.first_time.figures.requests > 0, "{strategy}\n{table}");
            assert_eq!(row.first_time.figures.errors, 0, "{strategy}\n{table}");
            assert!(row.replay.figures.requests > 0, "{strategy}\n{table}");
            assert_eq!(
                row.replay.replayed, row.replay.figures.requests,
                "{strategy}\n{table}"
            );
            assert!(
                row.fraction_of_limit.is_some_and(|fraction| fraction > 0.0),
                "{strategy} {operation:?}\n{table}"
            );
        }
    }
    assert!(run.fastest_on_distinct_wallets.is_some(), "{table}");
    assert!(run.fastest_on_hot_wallet.is_some(), "{table}");
}

/// The goals of `kinds` were measured (positive) and the others were not.
fn assert_goals(run: &BenchRun, kinds: &[GoalKind], table: &str) {
    for &kind in kinds {
        let goal = run
            .goal(kind)
            .unwrap_or_else(|| panic!("no goal {kind:?}\n{table}"));
        assert!(goal.value > 0.0 && goal.goal > 0.0, "{kind:?}\n{table}");
        assert!(!goal.detail.is_empty(), "{kind:?}\n{table}");
    }
    assert_eq!(run.goals.len(), kinds.len(), "{table}");
}

/// The deducts on distinct wallets ran again on a schedule at `percent` of their closed
/// loop's rate: first-time on and off, and replayed (every answer a replay).
fn assert_open_loop_ran(run: &BenchRun, percent: u8, table: &str) {
    let ran: Vec<(Machinery, PathKind)> = run
        .open_loop
        .iter()
        .map(|row| (row.machinery, row.path))
        .collect();
    assert_eq!(
        ran,
        [
            (Machinery::On, PathKind::FirstTime),
            (Machinery::Off, PathKind::FirstTime),
            (Machinery::On, PathKind::Replay),
        ],
        "{table}"
    );
    for row in &run.open_loop {
        let closed = run
            .scenario(row.operation, row.machinery, row.path)
            .expect("its closed loop");
        assert_eq!(row.operation, Operation::DeductDistinctWallets);
        assert_eq!(row.closed_per_second, closed.figures.per_second, "{table}");
        let offered = closed.figures.per_second * f64::from(percent) / 100.0;
        assert!((row.offered_per_second - offered).abs() < 1e-6, "{table}");
        let figures = &row.figures;
        assert!(
            figures.requests > 0 && figures.errors == 0,
            "{row:?}\n{table}"
        );
        assert!(
            0.0 < figures.p50_ms
                && figures.p50_ms <= figures.p99_ms
                && figures.p99_ms <= row.p999_ms
                && row.p999_ms <= row.max_ms,
            "{row:?}\n{table}"
        );
        let replays = if row.path == PathKind::Replay {
            figures.requests
        } else {
            0
        };
        assert_eq!(row.replayed, replays, "{row:?}\n{table}");
    }
    assert!(
        table.contains("open loop (requests on a fixed schedule"),
        "{table}"
    );
}

fn only_run(report: &BenchReport, concurrency: u16) -> &BenchRun {
    assert_eq!(report.runs.len(), 1, "{}", report.table());
    report
        .run(concurrency)
        .unwrap_or_else(|| panic!("no run at {concurrency}\n{}", report.table()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_limit_and_strategy_runs_and_replays_are_replays() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench");
    let json = dir.join("report.json");
    std::fs::create_dir_all(&dir).expect("dir");
    let flamegraphs = dir.join("flamegraphs");
    let _ = std::fs::remove_dir_all(&flamegraphs);
    let args = BenchArgs {
        concurrency: vec![2],
        duration_secs: 1,
        dir: dir.clone(),
        json: Some(json.clone()),
        profile: Some(flamegraphs.clone()),
        ..BenchArgs::default()
    };
    let report = mideng_storm::bench::run(args, support::identity(), false)
        .await
        .expect("the bench runs");
    let table = report.table();
    // The process's resident memory, before, at the peak of and after the run.
    let memory = report.memory.expect("Linux has /proc");
    assert!(
        memory.peak_kib >= memory.before_kib.max(memory.after_kib) && memory.before_kib > 0,
        "{memory:?}"
    );
    assert!(table.contains("resident memory"), "{table}");
    let run = only_run(&report, 2);

    assert_every_scenario_ran(run, &table);
    assert_open_loop_ran(run, BenchArgs::default().open_loop_percent, &table);
    // SQLite: the same driver's limits only (no pgbench, no Redis).
    assert_eq!(run.limits.len(), 3, "{table}");
    for kind in [
        LimitKind::OneRowInsert,
        LimitKind::HotRowUpdate,
        LimitKind::SqlDeduct,
    ] {
        assert_limit_measured(run, kind, Via::SameDriver, &table);
    }
    assert_strategies_ran(run, &WalletStrategy::ALL, &table);
    assert_goals(
        run,
        &[
            GoalKind::DeductVsSqlDeduct,
            GoalKind::DeductVsInsertCommit,
            GoalKind::DeductOnOff,
            GoalKind::HotDeductVsHotRowUpdate,
            GoalKind::ReplayVsFirstTime,
            GoalKind::PaymentCreationOnOff,
        ],
        &table,
    );
    let sql_deduct = run.goal(GoalKind::DeductVsSqlDeduct).expect("measured");
    assert!(sql_deduct.detail.contains("same driver"), "{table}");
    assert!(
        run.ratios
            .iter()
            .any(|ratio| ratio.name.starts_with("fraction of the database limit")),
        "{table}"
    );
    assert!(table.contains("goals at 2 concurrent clients"), "{table}");
    assert!(table.contains("CPU µs per request"), "{table}");

    // --profile: a flamegraph of each scenario, with the service's tower in it.
    let svgs: Vec<String> = std::fs::read_dir(&flamegraphs)
        .expect("the flamegraphs' directory")
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .collect();
    assert_eq!(svgs.len(), run.scenarios.len(), "{table}");
    assert!(
        svgs.iter()
            .all(|svg| svg.contains("<svg") && svg.contains("<title>service (")),
        "every flamegraph shows the service's tower"
    );

    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON report")).expect("JSON");
    let written_run = &written["runs"][0];
    assert_eq!(written_run["concurrency"], 2);
    for (field, count) in [
        ("scenarios", run.scenarios.len()),
        ("limits", run.limits.len()),
        ("strategies", run.strategies.len()),
        ("open_loop", run.open_loop.len()),
        ("goals", run.goals.len()),
    ] {
        assert_eq!(
            written_run[field].as_array().map(Vec::len),
            Some(count),
            "{field}"
        );
    }
    // The deployments' databases are gone.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".db"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn servers(database_variable: &str, default: &str) -> BenchArgs {
    BenchArgs {
        stack: StackKind::Servers,
        concurrency: vec![2],
        duration_secs: 1,
        // The default strategy's rows come from the main deployment: no deployment more.
        wallet_strategies: vec![WalletStrategy::default()],
        // The run creates its own databases next to this one.
        servers: ServerArgs {
            database: std::env::var(database_variable).unwrap_or_else(|_| default.to_owned()),
            ..ServerArgs::default()
        },
        ..BenchArgs::default()
    }
}

fn pgbench_on_path() -> bool {
    std::process::Command::new("pgbench")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_bench_has_pgbench_figures_beside_the_same_drivers() {
    let args = servers("MIDENG_TEST_POSTGRES_URL", &ServerArgs::default().database);
    let report = mideng_storm::bench::run(args, support::identity(), false)
        .await
        .expect("the bench runs");
    let table = report.table();
    let run = only_run(&report, 2);

    assert_every_scenario_ran(run, &table);
    assert_open_loop_ran(run, BenchArgs::default().open_loop_percent, &table);
    // PostgreSQL's own processes worked for the deducts, and the kernel counted it.
    let deduct = run
        .scenario(
            Operation::DeductDistinctWallets,
            Machinery::On,
            PathKind::FirstTime,
        )
        .and_then(|scenario| scenario.figures.cpu)
        .expect("CPU figures");
    assert!(deduct.database_us > 0.0, "{deduct:?}\n{table}");
    for kind in [
        LimitKind::OneRowInsert,
        LimitKind::HotRowUpdate,
        LimitKind::SqlDeduct,
        LimitKind::RedisRoundTrip,
    ] {
        assert_limit_measured(run, kind, Via::SameDriver, &table);
    }
    assert_strategies_ran(run, &[WalletStrategy::default()], &table);
    let mut goals = vec![
        GoalKind::DeductVsSqlDeduct,
        GoalKind::DeductVsInsertCommit,
        GoalKind::DeductOnOff,
        GoalKind::HotDeductVsHotRowUpdate,
        GoalKind::ReplayVsFirstTime,
        GoalKind::ReplayVsRedis,
        GoalKind::PaymentCreationOnOff,
    ];
    if pgbench_on_path() {
        for kind in [
            LimitKind::OneRowInsert,
            LimitKind::HotRowUpdate,
            LimitKind::SqlDeduct,
        ] {
            assert_limit_measured(run, kind, Via::Pgbench, &table);
        }
        goals.push(GoalKind::DeductVsInsertCommitSameDriver);
        goals.push(GoalKind::DeductVsSqlDeductPgbench);
        let sql_deduct = run
            .goal(GoalKind::DeductVsSqlDeductPgbench)
            .expect("measured");
        assert!(
            sql_deduct.detail.contains("one statement") && sql_deduct.detail.contains("pgbench"),
            "{table}"
        );
    } else {
        assert!(
            run.notes.iter().any(|note| note.contains("pgbench")),
            "{table}"
        );
    }
    assert_goals(run, &goals, &table);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_bench_measures_the_same_driver_limits() {
    let args = servers(
        "MIDENG_TEST_MYSQL_URL",
        "mysql://mideng:mideng@127.0.0.1:3306/mideng_test",
    );
    let report = mideng_storm::bench::run(args, support::identity(), false)
        .await
        .expect("the bench runs (scripts/services up grants the storm_% databases)");
    let table = report.table();
    let run = only_run(&report, 2);

    assert!(report.stack.contains("MySQL"), "{table}");
    assert_every_scenario_ran(run, &table);
    for kind in [
        LimitKind::OneRowInsert,
        LimitKind::HotRowUpdate,
        LimitKind::SqlDeduct,
        LimitKind::RedisRoundTrip,
    ] {
        assert_limit_measured(run, kind, Via::SameDriver, &table);
    }
    // No writable CTEs: the SQL deduct is three statements, and its name says so.
    let sql_deduct = run
        .limit(LimitKind::SqlDeduct, Via::SameDriver)
        .expect("measured");
    assert!(sql_deduct.name.contains("three statements"), "{table}");
    assert!(run.limit(LimitKind::OneRowInsert, Via::Pgbench).is_none());
    assert_strategies_ran(run, &[WalletStrategy::default()], &table);
    assert_goals(
        run,
        &[
            GoalKind::DeductVsSqlDeduct,
            GoalKind::DeductVsInsertCommit,
            GoalKind::DeductOnOff,
            GoalKind::HotDeductVsHotRowUpdate,
            GoalKind::ReplayVsFirstTime,
            GoalKind::ReplayVsRedis,
            GoalKind::PaymentCreationOnOff,
        ],
        &table,
    );
}
