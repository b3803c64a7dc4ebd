//! `mideng`: the one binary.
//!
//! Today it applies the toolkit's migrations (`mideng migrate`), walks through every mechanism
//! against a store of your choice (`mideng demo`) and runs the channel simulator standalone
//! (`mideng sim`). The payment service, the storm and the bench join it as `serve`, `storm` and
//! `bench`.

mod demo;
mod sim;
mod store_url;

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
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Migrate { database_url } => {
            store_url::migrate(&database_url).await?;
            tracing::info!(
                database = store_url::display(&database_url),
                "migrations applied"
            );
        }
        Command::Sim {
            listen,
            data_dir,
            clock_speed,
        } => sim::run(listen, data_dir, clock_speed).await?,
        Command::Demo { store, duplicates } => {
            let stores = store_url::open(&store).await?;
            demo::run(&store_url::display(&store), stores, usize::from(duplicates)).await?;
        }
    }
    Ok(())
}
