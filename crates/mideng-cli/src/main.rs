//! `mideng`: the one binary.
//!
//! It runs the payment service (`mideng serve`), proves it under duplicates and faults
//! (`mideng storm`) and measures it (`mideng bench`), runs a reconciliation or purge round by
//! hand (`mideng reconcile`, `mideng purge`), applies the toolkit's migrations (`mideng
//! migrate`), walks through every mechanism against a store of your choice (`mideng demo`),
//! runs the channel simulator standalone (`mideng sim`), makes tenant API keys (`mideng
//! api-key`) and prints the OpenAPI document (`mideng openapi`).

mod demo;
mod serve;
mod sim;
mod store_url;

use std::io::Write;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Exactly-once effects for money-moving APIs.
#[derive(Debug, Parser)]
#[command(name = "mideng", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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

async fn run(cli: Cli) -> anyhow::Result<()> {
    // The bench's and the storm's services would log every decision of thousands of requests
    // a second, and the storm's attacker would make every refused notify a warning; the
    // report counts those.
    let default_filter = if matches!(cli.command, Command::Bench { .. } | Command::Storm { .. }) {
        "warn,mideng_storm=info,mideng_pay::api::notify=error"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve {
            config,
            listen,
            sim_listen,
            metrics_listen,
            data_dir,
            demo_api_key,
        } => {
            let overrides = mideng_pay::config::Overrides {
                listen,
                metrics_listen,
                data_dir,
                sim_listen,
                demo_api_key,
            };
            serve::run(config, overrides).await?;
        }
        Command::Reconcile {
            config,
            data_dir,
            tenant,
            sim_listen,
            min_age_secs,
        } => {
            let overrides = mideng_pay::config::Overrides {
                data_dir,
                sim_listen,
                ..mideng_pay::config::Overrides::default()
            };
            serve::reconcile(config, overrides, tenant, min_age_secs).await?;
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
        } => {
            let mode = wechat_platform_mode.map(|mode| match mode.as_str() {
                "certificate" => mideng_sim::WechatPlatformMode::Certificate,
                _ => mideng_sim::WechatPlatformMode::PublicKey,
            });
            sim::run(listen, data_dir, clock_speed, mode).await?;
        }
        Command::Storm { args, data_dir } => {
            let identity = sim::load_or_generate(&data_dir.join("sim"), 1)?;
            let report = mideng_storm::storm::run(args, identity, true).await?;
            let mut out = std::io::stdout().lock();
            write!(out, "{}", report.table())?;
            out.flush()?;
            if !report.passed() {
                anyhow::bail!("{} invariant violation(s)", report.violations.len());
            }
        }
        Command::Bench { args, data_dir } => {
            let identity = sim::load_or_generate(&data_dir.join("sim"), 1)?;
            let report = mideng_storm::bench::run(args, identity).await?;
            let mut out = std::io::stdout().lock();
            write!(out, "{}", report.table())?;
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
