//! `mideng`: the one binary.
//!
//! It runs the payment service (`mideng serve`), proves it under duplicates and faults
//! (`mideng storm`) and measures it (`mideng bench`), runs a reconciliation or purge round by
//! hand (`mideng reconcile`, `mideng purge`), applies the toolkit's migrations (`mideng
//! migrate`), walks through every mechanism against a store of your choice (`mideng demo`),
//! runs the channel simulator standalone (`mideng sim`), makes tenant API keys (`mideng
//! api-key`) and prints the OpenAPI document (`mideng openapi`).

mod demo;
mod memory;
mod serve;
mod sim;
mod store_url;

use std::io::Write;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Exactly-once effects for money-moving APIs.
#[derive(Debug, Parser)]
#[command(name = "mideng", version, about)]
struct Cli {
    /// How the log is written: `text`, readable, or `json`, one object per line with the
    /// event's level, target, fields and spans, for a log shipper.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per event.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the payment service (embedded by default: SQLite, in-process stores, the simulator).
    Serve {
        /// Configuration file (default: `mideng.toml` when present).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Address of the API (default 127.0.0.1:8080).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Address of the embedded simulator (default 127.0.0.1:8090).
        #[arg(long)]
        sim_listen: Option<std::net::SocketAddr>,
        /// Address of `/metrics`, apart from the API (default 127.0.0.1:9090; keep it private).
        #[arg(long)]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Where the embedded database and the simulator's keys live (default `.mideng`).
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// A fixed API key for the demo tenant (otherwise one is generated and printed).
        #[arg(long, env = "MIDENG_DEMO_API_KEY")]
        demo_api_key: Option<String>,
        /// Test switch of `mideng storm --processes --break-layer fences`, never for
        /// production: writes under an order lock commit even when a later holder has used
        /// the lock (counted and logged as fenced-off writes). A flag, not a configuration
        /// setting, so that no deployed file can carry it.
        #[arg(long, hide = true)]
        break_fences: bool,
    },
    /// Run one reconciliation round with the channels (the configuration of `serve`).
    Reconcile {
        /// Configuration file (default: `mideng.toml` when present).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Where the embedded database and the simulator's keys live (default `.mideng`).
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// Only this tenant's payments.
        #[arg(long)]
        tenant: Option<String>,
        /// The embedded simulator to ask (default: `[simulator] listen`, 127.0.0.1:8090).
        #[arg(long)]
        sim_listen: Option<std::net::SocketAddr>,
        /// Examine payments pending for longer than this (default: `[reconcile] min_age_secs`).
        #[arg(long)]
        min_age_secs: Option<u64>,
        /// Instead of a round over pending payments, match this day's bills (`yyyy-MM-dd`,
        /// Beijing time; `today` or `yesterday`) of every configured channel.
        #[arg(long, value_name = "DATE")]
        bill: Option<String>,
        /// With `--bill`: also write the run's report as an HTML page here.
        #[arg(long, requires = "bill")]
        html: Option<std::path::PathBuf>,
    },
    /// The events a consumer parked: list them, replay one or discard one (with a reason).
    Events {
        /// Configuration file (default: `mideng.toml` when present).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Where the embedded database lives (default `.mideng`).
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        #[command(subcommand)]
        action: EventsCommand,
    },
    /// Delete idempotency records and tokens past their retention (one round).
    Purge {
        /// Configuration file (default: `mideng.toml` when present).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Where the embedded database lives (default `.mideng`).
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
    },
    /// Print a new tenant API key and the hash to put in `[[tenants]]`.
    ApiKey,
    /// Print the service's OpenAPI document.
    Openapi,
    /// Create or upgrade the toolkit's tables in a SQL database.
    Migrate {
        /// `sqlite://file.db`, `postgres://…` or `mysql://…`.
        #[arg(long, env = "MIDENG_DATABASE_URL")]
        database_url: String,
    },
    /// Show each idempotency mechanism deciding duplicates, concurrently, on a real store.
    Demo {
        /// `memory`, `sqlite://file.db`, `postgres://…`, `mysql://…` or `redis://…`.
        #[arg(
            long,
            env = "MIDENG_STORE_URL",
            default_value = "sqlite://mideng-demo.db"
        )]
        store: String,
        /// How many concurrent duplicates to send at each mechanism (1 to 1000).
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1000))]
        duplicates: u16,
    },
    /// Prove exactly-once under duplicates and faults: deploy, storm, settle, audit (exit 1 on
    /// any violation).
    Storm {
        #[command(flatten)]
        args: mideng_storm::storm::StormArgs,
        /// Where the simulator's keys live (generated on the first run).
        #[arg(long, default_value = ".mideng")]
        data_dir: std::path::PathBuf,
    },
    /// Measure the idempotency machinery: first-time and replay paths, on and off, next to the
    /// machine's limits, in one run (a table of throughput, latency and ratios).
    Bench {
        #[command(flatten)]
        args: mideng_storm::bench::BenchArgs,
        /// Where the simulator's keys live (generated on the first run).
        #[arg(long, default_value = ".mideng")]
        data_dir: std::path::PathBuf,
    },
    /// Run the Alipay- and WeChat-Pay-like channel simulator.
    Sim {
        /// Address to listen on.
        #[arg(long, env = "MIDENG_SIM_LISTEN", default_value = "127.0.0.1:8090")]
        listen: std::net::SocketAddr,
        /// Where the simulator keeps its keys and identities (generated on the first start).
        #[arg(long, env = "MIDENG_SIM_DATA_DIR", default_value = "data/sim")]
        data_dir: std::path::PathBuf,
        /// Channel seconds per real second (1 = real time; 600 = ten channel minutes a second).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        clock_speed: u32,
        /// How merchants verify WeChat Pay's signatures, chosen when the data directory is
        /// generated: `public-key` (a PUB_KEY_ID_ serial; the default) or `certificate`
        /// (platform certificates from GET /v3/certificates).
        #[arg(long, value_parser = ["public-key", "certificate"])]
        wechat_platform_mode: Option<String>,
        /// Serve a day's bill while the day runs, for reconciling the day a test or storm made
        /// (the channels publish it the next morning: Alipay from 09:00, WeChat Pay from 10:00).
        #[arg(long)]
        bills_as_the_day_runs: bool,
    },
}

/// `mideng events …`.
#[derive(Debug, clap::Subcommand)]
enum EventsCommand {
    /// The parked events, oldest first.
    List,
    /// Run a parked event through its consumer's effect again (deduplicated).
    Replay {
        /// The event's message id.
        message_id: String,
        /// Why, kept with the event.
        #[arg(long)]
        reason: String,
    },
    /// Drop a parked event for good.
    Discard {
        /// The event's message id.
        message_id: String,
        /// Why, kept with the event.
        #[arg(long)]
        reason: String,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The whole chain of causes on one line; a backtrace helps developers, not operators.
            tracing::error!("{error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The default filter of the storm's and the bench's log: their services would log every
/// decision of thousands of requests a second, and the storm's attacker would make every
/// refused notify a warning; the report counts those.
const RUN_LOG_FILTER: &str = "warn,mideng_storm=info,mideng_pay::flows::notify=error";

/// Installs the tracing subscriber: the registry, one fmt layer under a filter of its own
/// (`RUST_LOG`, else the command's default) and, when serving, the operator console's journal
/// with its own filter. Another layer is one more `.with(…)`.
///
/// The fmt layer writes to the terminal, except for the storm and the bench: their services
/// run in this process and the faults they inject make thousands of warnings, so their log
/// goes to a file (`--log-file`, else a new one in the run's `--dir`), whose path this returns;
/// the terminal keeps the progress bar and the report. When that file cannot be created, the
/// log goes to the terminal and the error is returned.
fn init_logging(
    command: &Command,
    format: LogFormat,
    journal: &mideng_pay::web::journal::Journal,
    telemetry: Option<&mideng_pay::telemetry::TelemetryConfig>,
) -> anyhow::Result<(
    Option<std::path::PathBuf>,
    Option<mideng_pay::telemetry::Pipeline>,
)> {
    use tracing_subscriber::Layer as _;

    let (default_filter, log_file) = match command {
        Command::Storm { args, .. } => (
            RUN_LOG_FILTER,
            Some(
                args.log_file
                    .clone()
                    .unwrap_or_else(|| mideng_storm::default_log_file(&args.dir, "storm")),
            ),
        ),
        Command::Bench { args, .. } => (
            RUN_LOG_FILTER,
            Some(
                args.log_file
                    .clone()
                    .unwrap_or_else(|| mideng_storm::default_log_file(&args.dir, "bench")),
            ),
        ),
        _ => ("info", None),
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let opened = log_file
        .as_deref()
        .map(|path| {
            if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|error| anyhow::anyhow!("creating {}: {error}", dir.display()))?;
            }
            std::fs::File::create(path)
                .map_err(|error| anyhow::anyhow!("creating {}: {error}", path.display()))
        })
        .transpose();
    let (file, failure) = match opened {
        Ok(file) => (file, None),
        Err(error) => (None, Some(error)),
    };
    let written_to = file.as_ref().and(log_file);
    let fmt_layer = match (file, format) {
        (Some(file), LogFormat::Text) => tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .with_filter(filter)
            .boxed(),
        (Some(file), LogFormat::Json) => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::sync::Mutex::new(file))
            .with_filter(filter)
            .boxed(),
        (None, LogFormat::Text) => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        (None, LogFormat::Json) => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    // The journal only where the console reads it: elsewhere its decisions would cost the
    // bench and the storm a record per request.
    let journal_layer = matches!(command, Command::Serve { .. }).then(|| journal.layer());
    // Traces over OTLP when `[telemetry] otlp_endpoint` is set (serve only).
    let (trace_layer, pipeline) = match telemetry {
        Some(config) => mideng_pay::telemetry::layer(config)
            .map_err(|error| anyhow::anyhow!(error))?
            .unzip(),
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(fmt_layer)
        .with(journal_layer)
        .with(trace_layer)
        .init();
    match failure {
        Some(error) => Err(error),
        None => Ok((written_to, pipeline)),
    }
}

/// A storm or bench that failed: the error on the terminal (the log, where it is recorded
/// too, is a file), and where the log is.
fn show_failure(error: &anyhow::Error, log_file: Option<&std::path::Path>) {
    eprintln!("error: {error:#}");
    if let Some(path) = log_file {
        eprintln!("log: {}", path.display());
    }
}

/// Where a storm's or a bench's other outputs went, after its report.
fn show_outputs(
    out: &mut impl Write,
    html: Option<&std::path::Path>,
    history: Option<&std::path::Path>,
    log_file: Option<&std::path::Path>,
) -> std::io::Result<()> {
    if let Some(path) = html {
        writeln!(out, "html report: {}", path.display())?;
    }
    if let Some(path) = history {
        writeln!(out, "history: {}", path.display())?;
    }
    if let Some(path) = log_file {
        writeln!(out, "log: {}", path.display())?;
    }
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // The operator console's memory of decisions, filled by its own layer of the subscriber.
    let journal = mideng_pay::web::journal::Journal::new(mideng::clock::now_ms());
    // `serve` reads its configuration first: its telemetry section shapes the subscriber.
    let serve_config = match &cli.command {
        Command::Serve {
            config,
            listen,
            sim_listen,
            metrics_listen,
            data_dir,
            demo_api_key,
            ..
        } => {
            let overrides = mideng_pay::config::Overrides {
                listen: *listen,
                metrics_listen: *metrics_listen,
                data_dir: data_dir.clone(),
                sim_listen: *sim_listen,
                demo_api_key: demo_api_key.clone(),
            };
            Some(mideng_pay::config::ServeConfig::load(
                config.as_deref(),
                &overrides,
            )?)
        }
        _ => None,
    };
    let (log_file, _pipeline) = init_logging(
        &cli.command,
        cli.log_format,
        &journal,
        serve_config.as_ref().map(|config| &config.telemetry),
    )?;
    match cli.command {
        Command::Serve { break_fences, .. } => {
            let config = serve_config.expect("read above for serve");
            serve::run(config, journal.clone(), break_fences).await?;
        }
        Command::Reconcile {
            config,
            data_dir,
            tenant,
            sim_listen,
            min_age_secs,
            bill,
            html,
        } => {
            let overrides = mideng_pay::config::Overrides {
                data_dir,
                sim_listen,
                ..mideng_pay::config::Overrides::default()
            };
            let mode = match bill {
                Some(date) => serve::Round::Bill { date, html },
                None => serve::Round::Pending {
                    tenant,
                    min_age_secs,
                },
            };
            serve::reconcile(config, overrides, mode).await?;
        }
        Command::Events {
            config,
            data_dir,
            action,
        } => {
            let overrides = mideng_pay::config::Overrides {
                data_dir,
                ..mideng_pay::config::Overrides::default()
            };
            let action = match action {
                EventsCommand::List => serve::EventsAction::List,
                EventsCommand::Replay { message_id, reason } => {
                    serve::EventsAction::Replay { message_id, reason }
                }
                EventsCommand::Discard { message_id, reason } => {
                    serve::EventsAction::Discard { message_id, reason }
                }
            };
            serve::events(config, overrides, action).await?;
        }
        Command::Purge { config, data_dir } => {
            let overrides = mideng_pay::config::Overrides {
                data_dir,
                ..mideng_pay::config::Overrides::default()
            };
            serve::purge(config, overrides).await?;
        }
        Command::ApiKey => serve::api_key()?,
        Command::Openapi => serve::openapi()?,
        Command::Migrate { database_url } => {
            store_url::migrate(&database_url).await?;
            tracing::info!(
                database = mideng::redact::url(&database_url),
                "migrations applied"
            );
        }
        Command::Sim {
            listen,
            data_dir,
            clock_speed,
            wechat_platform_mode,
            bills_as_the_day_runs,
        } => {
            let mode = wechat_platform_mode.map(|mode| match mode.as_str() {
                "certificate" => mideng_sim::WechatPlatformMode::Certificate,
                _ => mideng_sim::WechatPlatformMode::PublicKey,
            });
            sim::run(listen, data_dir, clock_speed, mode, bills_as_the_day_runs).await?;
        }
        Command::Storm { mut args, data_dir } => {
            let html = args.html.clone();
            let history = args.history.clone();
            // `--processes` starts `mideng sim` on this identity.
            args.identity_dir = Some(data_dir.join("sim"));
            let ran = async {
                let identity = sim::load_or_generate(&data_dir.join("sim"), 1)?;
                mideng_storm::storm::run(args, identity, true).await
            }
            .await;
            let report = ran.inspect_err(|error| show_failure(error, log_file.as_deref()))?;
            let mut out = std::io::stdout().lock();
            write!(out, "{}", report.table())?;
            show_outputs(
                &mut out,
                html.as_deref(),
                history.as_deref(),
                log_file.as_deref(),
            )?;
            out.flush()?;
            if !report.passed() {
                anyhow::bail!("{} invariant violation(s)", report.violations.len());
            }
        }
        Command::Bench { args, data_dir } => {
            let html = args.html.clone();
            let ran = async {
                let identity = sim::load_or_generate(&data_dir.join("sim"), 1)?;
                mideng_storm::bench::run(args, identity, true).await
            }
            .await;
            let report = ran.inspect_err(|error| show_failure(error, log_file.as_deref()))?;
            let mut out = std::io::stdout().lock();
            write!(out, "{}", report.table())?;
            show_outputs(&mut out, html.as_deref(), None, log_file.as_deref())?;
            out.flush()?;
        }
        Command::Demo { store, duplicates } => {
            let stores = store_url::open(&store).await?;
            demo::run(
                &mideng::redact::url(&store),
                stores,
                usize::from(duplicates),
            )
            .await?;
        }
    }
    Ok(())
}
