//! PostgreSQL's own figures: the limits' statements run by `pgbench` (prepared statements, one
//! connection per client, each statement its own transaction), the database's speed without
//! our driver, pool or transaction shape in the way.
//!
//! `pgbench -n -M prepared -c <clients> -j <threads> -T <secs> -f <script> -l <database URI>`:
//! the throughput is its `tps` (without the initial connection time), and the percentiles come
//! from its per-transaction log (`-l`), so that they read like the same driver's. The password
//! travels in `PGPASSWORD`, not on the command line where any process can read it. A missing or
//! failing pgbench is an `Err` with the reason, which the bench reports as a note, never a
//! failed bench.

use super::cpu::CpuSample;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::load::percentiles_ms;
use super::report::Figures;

/// How long after pgbench ended its backends' time is read: the postmaster reaps them a
/// moment after they exit, and only then is their time its children's.
const REAP_WAIT: Duration = Duration::from_millis(300);
/// pgbench's worker threads: the machine's cores are shared with the rest of the run, and two
/// are enough to keep up with a database on the same machine.
const THREADS_MAX: usize = 2;
/// How long pgbench may take beyond its `-T`: connecting its clients, the last transactions.
const GRACE: Duration = Duration::from_secs(60);
/// How much of pgbench's error output goes into a note.
const STDERR_EXCERPT_CHARS: usize = 300;

/// pgbench's version line, or why there is no pgbench to run.
pub(super) async fn version() -> Result<String, String> {
    let output = tokio::process::Command::new("pgbench")
        .arg("--version")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(GRACE, output)
        .await
        .map_err(|_| "pgbench --version did not answer".to_owned())?
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => "pgbench is not on PATH".to_owned(),
            _ => format!("pgbench could not start: {error}"),
        })?;
    if !output.status.success() {
        return Err(format!("pgbench --version: {}", output.status));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Runs `script` (named `name`, written to `workdir`) against `database_url` with `clients`
/// connections for `duration`.
pub(super) async fn run(
    database_url: &str,
    name: &str,
    script: &str,
    clients: usize,
    duration: Duration,
    workdir: &Path,
) -> Result<Figures, String> {
    let script_path = workdir.join(format!("{name}.sql"));
    std::fs::write(&script_path, script)
        .map_err(|error| format!("writing {}: {error}", script_path.display()))?;
    let log_prefix = workdir.join(format!("{name}-log"));
    let (uri, password) = split_password(database_url)?;
    let mut command = tokio::process::Command::new("pgbench");
    command
        .args(["-n", "-M", "prepared", "-l"])
        .arg(format!("--log-prefix={}", log_prefix.display()))
        .arg(format!("--client={}", clients.max(1)))
        .arg(format!("--jobs={}", clients.clamp(1, THREADS_MAX)))
        .arg(format!("--time={}", duration.as_secs().max(1)))
        .arg(format!("--file={}", script_path.display()))
        .arg(uri)
        .current_dir(workdir)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(password) = password {
        command.env("PGPASSWORD", password);
    }
    let cpu_before = CpuSample::now();
    let output = tokio::time::timeout(duration + GRACE, command.output())
        .await
        .map_err(|_| {
            format!(
                "pgbench did not end within {} s",
                (duration + GRACE).as_secs()
            )
        })?
        .map_err(|error| format!("pgbench could not start: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr: String = String::from_utf8_lossy(&output.stderr)
            .trim()
            .chars()
            .take(STDERR_EXCERPT_CHARS)
            .collect();
        return Err(format!("pgbench {}: {stderr}", output.status));
    }
    let summary = Summary::parse(&stdout)?;
    // pgbench is waited for (its time is this process's children's); its connections' backends
    // end with it, and the postmaster reaps them a moment later.
    tokio::time::sleep(REAP_WAIT).await;
    let cpu = cpu_before.per_request(&CpuSample::now(), summary.processed + summary.failed);
    let latencies = read_latencies(workdir, &format!("{name}-log"));
    let (p50_ms, p99_ms) = percentiles_ms(latencies);
    Ok(Figures {
        requests: summary.processed + summary.failed,
        errors: summary.failed,
        seconds: if summary.tps > 0.0 {
            summary.processed as f64 / summary.tps
        } else {
            0.0
        },
        per_second: summary.tps,
        p50_ms,
        p99_ms,
        cpu,
    })
}

/// The lines of pgbench's report the bench reads.
#[derive(Debug, PartialEq)]
struct Summary {
    processed: u64,
    failed: u64,
    tps: f64,
}

impl Summary {
    fn parse(stdout: &str) -> Result<Self, String> {
        let mut processed = None;
        let mut failed = 0;
        let mut tps = None;
        for line in stdout.lines() {
            if let Some(rest) = line.strip_prefix("number of transactions actually processed: ") {
                // `N`, or `N/M` when a number of transactions was asked for.
                processed = rest
                    .split('/')
                    .next()
                    .and_then(|count| count.trim().parse().ok());
            } else if let Some(rest) = line.strip_prefix("number of failed transactions: ") {
                failed = rest
                    .split_whitespace()
                    .next()
                    .and_then(|count| count.parse().ok())
                    .unwrap_or(0);
            } else if let Some(rest) = line.strip_prefix("tps = ") {
                tps = rest
                    .split_whitespace()
                    .next()
                    .and_then(|rate| rate.parse::<f64>().ok());
            }
        }
        match (processed, tps) {
            (Some(processed), Some(tps)) => Ok(Self {
                processed,
                failed,
                tps,
            }),
            _ => Err(format!(
                "no transaction count or tps in pgbench's report: {}",
                stdout.trim()
            )),
        }
    }
}

/// The latencies of pgbench's per-transaction logs in `workdir` (`<prefix>.<pid>` and
/// `<prefix>.<pid>.<thread>`): the third field of each line, microseconds; a failed
/// transaction's line has a word there and is left out.
fn read_latencies(workdir: &Path, prefix: &str) -> Vec<Duration> {
    let Ok(entries) = std::fs::read_dir(workdir) else {
        return Vec::new();
    };
    let mut latencies = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let is_log = entry
            .file_name()
            .to_str()
            .is_some_and(|file| file.starts_with(&format!("{prefix}.")));
        if !is_log {
            continue;
        }
        let Ok(log) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in log.lines() {
            if let Some(micros) = line
                .split_whitespace()
                .nth(2)
                .and_then(|field| field.parse::<u64>().ok())
            {
                latencies.push(Duration::from_micros(micros));
            }
        }
    }
    latencies
}

/// The URL without its password, and the password (percent-decoded), for `PGPASSWORD`.
fn split_password(database_url: &str) -> Result<(String, Option<String>), String> {
    let mut url = reqwest::Url::parse(database_url)
        .map_err(|error| format!("the database URL does not parse: {error}"))?;
    let Some(password) = url.password().map(percent_decoded) else {
        return Ok((url.to_string(), None));
    };
    url.set_password(None)
        .map_err(|()| "the database URL cannot lose its password".to_owned())?;
    Ok((url.to_string(), Some(password)))
}

/// `text` with its `%XX` escapes decoded (a `%` not followed by two hex digits stays).
fn percent_decoded(text: &str) -> String {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        let escaped = (first == b'%')
            .then(|| tail.get(..2))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                bytes.push(byte);
                rest = tail.get(2..).unwrap_or_default();
            }
            None => {
                bytes.push(first);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_report_gives_transactions_failures_and_tps() {
        let report = "transaction type: deduct.sql\nscaling factor: 1\nquery mode: prepared\n\
                      number of clients: 16\nnumber of threads: 2\nmaximum number of tries: 1\n\
                      duration: 5 s\nnumber of transactions actually processed: 61234\n\
                      number of failed transactions: 2 (0.003%)\nlatency average = 1.305 ms\n\
                      initial connection time = 12.345 ms\n\
                      tps = 12258.812345 (without initial connection time)\n";
        assert_eq!(
            Summary::parse(report),
            Ok(Summary {
                processed: 61_234,
                failed: 2,
                tps: 12_258.812_345
            })
        );
        assert!(Summary::parse("pgbench: error: connection refused").is_err());
    }

    #[test]
    fn the_password_leaves_the_url_decoded() {
        assert_eq!(
            split_password("postgres://mideng:p%40ss%2Fw@127.0.0.1:5432/storm_x"),
            Ok((
                "postgres://mideng@127.0.0.1:5432/storm_x".to_owned(),
                Some("p@ss/w".to_owned())
            ))
        );
        assert_eq!(
            split_password("postgres://mideng@127.0.0.1/db"),
            Ok(("postgres://mideng@127.0.0.1/db".to_owned(), None))
        );
        assert_eq!(percent_decoded("100%"), "100%");
    }
}
