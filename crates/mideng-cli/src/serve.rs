//! `mideng serve`: the payment service. With no configuration it runs embedded (SQLite in the
//! data directory, in-process tokens and locks, the channel simulator in-process with notifies
//! pointing back at the service, a demo tenant); `mideng.toml`, `MIDENG__*` variables and flags
//! turn it into a production deployment (see `mideng_pay::config`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use mideng_channel::adapter::Channel;
use mideng_pay::api::{api_key_hash, generate_api_key};
use mideng_pay::config::{Overrides, ServeConfig};
use mideng_pay::domain::keys::{KeyKind, generate_key};
use mideng_pay::flows::SystemClock;
use mideng_pay::web::journal::Journal;
use mideng_pay::web::{CheckoutSettings, ConsoleSettings, PageSettings};
use mideng_pay::{Application, Settings, TenantSeed};
use mideng_sim::Simulator;

/// Runs the service until Ctrl-C.
///
/// `journal` is the operator console's memory of decisions; the caller installed its layer in
/// the `tracing` subscriber.
/// Serves `config`; `break_fences` is the storm's negative control (`mideng serve
/// --break-fences`, hidden): the order lock's fences not enforced.
pub(crate) async fn run(
    config: ServeConfig,
    journal: Journal,
    break_fences: bool,
) -> anyhow::Result<()> {
    crate::memory::start_trimming();
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let api_address = listener.local_addr()?;
    // The counters name every tenant's volumes: they get a listener of their own, loopback
    // unless the operator says otherwise.
    let metrics_listener = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .with_context(|| format!("binding the metrics listener to {}", config.metrics_listen))?;
    let metrics_address = metrics_listener.local_addr()?;
    let configured = config.channels()?;
    let (mut alipay, mut wechat) = (configured.alipay, configured.wechat);

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut simulator_task = None;
    let mut sim_address = None;
    if config.simulator_enabled() {
        let (sim_config, merchant) = crate::sim::load_or_generate(&config.data_dir.join("sim"), 1)?;
        let sim_listener = tokio::net::TcpListener::bind(config.simulator.listen)
            .await
            .with_context(|| format!("binding the simulator to {}", config.simulator.listen))?;
        let address = sim_listener.local_addr()?;
        let (sim_alipay, sim_wechat) = mideng_sim::merchant_channels(
            &sim_config,
            &merchant,
            &format!("http://{address}"),
            &format!("http://{api_address}"),
        )?;
        alipay.get_or_insert_with(|| Arc::new(sim_alipay) as Arc<dyn Channel>);
        wechat.get_or_insert_with(|| Arc::new(sim_wechat) as Arc<dyn Channel>);
        // The embedded simulator is a demo: a day's bill is out while the day runs, so that
        // `mideng reconcile --bill <today>` has something to match on a laptop.
        let simulator = Simulator::new(mideng_sim::SimConfig {
            bills_as_the_day_runs: true,
            ..sim_config
        })?;
        let mut sim_stop = stopped.clone();
        simulator_task = Some(tokio::spawn(simulator.serve(sim_listener, async move {
            let _ = sim_stop.wait_for(|stop| *stop).await;
        })));
        sim_address = Some(address);
    }

    let demo_keys = config.demo.enabled.then(|| DemoKeys {
        secret: config.demo.api_key.clone().unwrap_or_else(generate_api_key),
        publishable: config
            .demo
            .publishable_key
            .clone()
            .unwrap_or_else(|| generate_key(KeyKind::Publishable)),
    });
    let demo_key = demo_keys.as_ref().map(|keys| keys.secret.as_str());
    let mut settings = settings(&config, alipay, wechat, demo_keys.as_ref());
    if break_fences {
        tracing::warn!("the order lock's fences are OFF (--break-fences): a test switch");
        settings.payments.broken = Some(mideng_pay::flows::BrokenLayer::Fences);
    }
    settings.pages = pages(&config, demo_keys.as_ref(), sim_address, journal);
    let pages = Urls {
        checkout: settings.pages.checkout.is_some(),
        console: settings.pages.console.is_some(),
    };
    let traces = config.telemetry.otlp_endpoint.as_deref().map_or_else(
        || "traces off".to_owned(),
        |endpoint| format!("traces to {endpoint}"),
    );
    tracing::info!(settings = %format!("{}; {traces}", settings.summary()), "starting");
    let application = Application::build(settings, listener)
        .await?
        .with_metrics_listener(metrics_listener);
    banner(api_address, metrics_address, sim_address, demo_key, pages)?;

    let mut api_stop = stopped.clone();
    let served = application.run_until(async move {
        let _ = api_stop.wait_for(|stop| *stop).await;
    });
    let signal = async {
        // Ctrl-C failing to install leaves no way to stop but a signal; treat it as a stop.
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("stopping");
    };
    tokio::pin!(served);
    tokio::select! {
        result = &mut served => result?,
        () = signal => {
            stop.send_replace(true);
            served.await?;
        }
    }
    stop.send_replace(true);
    if let Some(task) = simulator_task {
        task.await??;
    }
    Ok(())
}

/// The demo tenant's keys in use: the secret one printed on the terminal, the publishable one
/// shown by the checkout.
struct DemoKeys {
    secret: String,
    publishable: String,
}

/// The pages `config` asks for: the checkout pays as the demo tenant with its publishable key
/// (and, in the embedded mode, asks the in-process simulator to pay); the console opens with
/// the configured key only, and is off without one.
fn pages(
    config: &ServeConfig,
    demo_keys: Option<&DemoKeys>,
    sim_address: Option<std::net::SocketAddr>,
    journal: Journal,
) -> PageSettings {
    PageSettings {
        checkout: demo_keys
            .filter(|_| config.checkout_enabled())
            .map(|keys| CheckoutSettings {
                tenant_id: config.demo.tenant_id.clone(),
                publishable_key: keys.publishable.clone(),
                simulator_url: sim_address.map(|address| format!("http://{address}")),
            }),
        console: config
            .console_key_sha256()
            .map(|api_key_sha256| ConsoleSettings {
                api_key_sha256,
                journal,
            }),
    }
}

/// Which pages the banner names.
#[derive(Clone, Copy)]
struct Urls {
    checkout: bool,
    console: bool,
}

/// The service's settings from the configuration and the channel adapters.
fn settings(
    config: &ServeConfig,
    alipay: Option<Arc<dyn Channel>>,
    wechat: Option<Arc<dyn Channel>>,
    demo_keys: Option<&DemoKeys>,
) -> Settings {
    let mut tenants: Vec<TenantSeed> = config
        .tenants
        .iter()
        .map(|tenant| TenantSeed {
            tenant_id: tenant.id.clone(),
            api_key_sha256: tenant.api_key_sha256.to_ascii_lowercase(),
            publishable_key_sha256: tenant
                .publishable_key_sha256
                .as_ref()
                .map(|digest| digest.to_ascii_lowercase()),
            webhooks: tenant
                .webhooks
                .iter()
                .map(|webhook| (webhook.url.clone(), webhook.events.clone()))
                .collect(),
        })
        .collect();
    if let Some(keys) = demo_keys {
        tenants.push(TenantSeed {
            tenant_id: config.demo.tenant_id.clone(),
            api_key_sha256: api_key_hash(&keys.secret),
            publishable_key_sha256: Some(api_key_hash(&keys.publishable)),
            webhooks: Vec::new(),
        });
    }
    Settings {
        database_url: config.database_url(),
        database_connections_max: config.database.connections_max,
        redis_url: config.redis.url.clone(),
        redis_cluster: config.redis.cluster.clone(),
        redis_prefix: config.redis.prefix.clone(),
        alipay,
        wechat,
        payments: config.payment_settings(),
        tenants,
        reconcile: Some(config.reconcile_settings()),
        purge: Some(config.purge_settings()),
        bills: config.bill_settings(),
        events: config.event_settings(),
        transport: config.transport_settings(),
        pages: PageSettings::default(),
        clock: Arc::new(SystemClock),
    }
}

/// `mideng purge`: one purge round by hand (records and tokens past their retention).
pub(crate) async fn purge(
    config_file: Option<PathBuf>,
    overrides: Overrides,
) -> anyhow::Result<()> {
    let config = ServeConfig::load(config_file.as_deref(), &overrides)?;
    let mut settings = settings(&config, None, None, None);
    settings.tenants.clear();
    let state = mideng_pay::app::connect(&settings).await?;
    let report =
        mideng_pay::workers::purge::purge_once(&state.retained(), &config.purge_settings()).await?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "purged {} records, {} tokens, {} sent events",
        report.records, report.tokens, report.events
    )?;
    out.flush()?;
    Ok(())
}

/// What `mideng reconcile` does.
pub(crate) enum Round {
    /// One round over the pending payments.
    Pending {
        tenant: Option<String>,
        min_age_secs: Option<u64>,
    },
    /// The bills of one day.
    Bill { date: String, html: Option<PathBuf> },
}

/// What `mideng events` does.
pub(crate) enum EventsAction {
    /// List the parked events.
    List,
    /// Replay one, with a reason.
    Replay { message_id: String, reason: String },
    /// Discard one, with a reason.
    Discard { message_id: String, reason: String },
}

/// `mideng events list|replay|discard`: the events a consumer parked and the outbox rows the
/// relay parked, on the configured database; a replay runs the consumer's own effect
/// (deduplicated), or puts the outbox row back in the relay's way. Exit status 1 when the
/// event is not parked or its replay failed again.
pub(crate) async fn events(
    config_file: Option<PathBuf>,
    overrides: Overrides,
    action: EventsAction,
) -> anyhow::Result<()> {
    use mideng_pay::flows::operator::{self, ParkedSettled};
    let config = ServeConfig::load(config_file.as_deref(), &overrides)?;
    let mut settings = settings(&config, None, None, None);
    settings.tenants.clear();
    let state = mideng_pay::app::connect(&settings).await?;
    let mut out = std::io::stdout().lock();
    let (message_id, reason, replaying) = match action {
        EventsAction::List => {
            let (parked, rows) = operator::parked(&state.ports, 1_000).await?;
            for event in &parked {
                writeln!(
                    out,
                    "{} {} {} attempts {}: {}",
                    event.message_id, event.consumer, event.topic, event.attempts, event.last_error
                )?;
            }
            writeln!(out, "{} parked event(s)", parked.len())?;
            for row in &rows {
                writeln!(
                    out,
                    "{} outbox.relay {} refusals {}: {}",
                    row.id, row.topic, row.refusals, row.last_error
                )?;
            }
            writeln!(out, "{} parked outbox row(s)", rows.len())?;
            out.flush()?;
            return Ok(());
        }
        EventsAction::Replay { message_id, reason } => (message_id, reason, true),
        EventsAction::Discard { message_id, reason } => (message_id, reason, false),
    };
    let reason = checked_reason(&reason)?;
    let dedup = config.event_settings().consumer.unwrap_or_default().dedup;
    match operator::settle_parked(&state.ports, &message_id, reason, replaying, dedup).await? {
        ParkedSettled::Event(_) if replaying => writeln!(out, "{message_id} replayed")?,
        ParkedSettled::Outbox(_) if replaying => {
            writeln!(out, "{message_id} put back in the outbox")?
        }
        ParkedSettled::Event(_) | ParkedSettled::Outbox(_) => {
            writeln!(out, "{message_id} discarded")?
        }
        ParkedSettled::FailedAgain => anyhow::bail!("{message_id} failed again and stays parked"),
        ParkedSettled::NotFound | ParkedSettled::NotParked => {
            anyhow::bail!("{message_id} is not parked")
        }
    }
    out.flush()?;
    Ok(())
}

/// An operator's reason: 1 to 80 characters, no control or bidirectional ones.
fn checked_reason(reason: &str) -> anyhow::Result<&str> {
    mideng_pay::domain::refund::checked_reason(reason.trim())
        .filter(|reason| !reason.is_empty())
        .context("--reason must be 1 to 80 characters, without control or bidirectional characters")
}

/// (the embedded default asks the simulator of a running `mideng serve`). Prints the round's
/// figures; exit status 0 even when some answers were unknown (they are asked again). With
/// `--bill`, the day's bills instead ([`reconcile_bills`]).
pub(crate) async fn reconcile(
    config_file: Option<PathBuf>,
    overrides: Overrides,
    round: Round,
) -> anyhow::Result<()> {
    let config = ServeConfig::load(config_file.as_deref(), &overrides)?;
    let configured = config.channels()?;
    let (mut alipay, mut wechat) = (configured.alipay, configured.wechat);
    if config.simulator_enabled() {
        let (sim_config, merchant) = crate::sim::load_or_generate(&config.data_dir.join("sim"), 1)?;
        let (sim_alipay, sim_wechat) = mideng_sim::merchant_channels(
            &sim_config,
            &merchant,
            &format!("http://{}", config.simulator.listen),
            &format!("http://{}", config.listen),
        )?;
        alipay.get_or_insert_with(|| Arc::new(sim_alipay) as Arc<dyn Channel>);
        wechat.get_or_insert_with(|| Arc::new(sim_wechat) as Arc<dyn Channel>);
    }
    let mut settings = settings(&config, alipay, wechat, None);
    settings.tenants.clear();
    let state = mideng_pay::app::connect(&settings).await?;
    let (tenant, min_age_secs) = match round {
        Round::Pending {
            tenant,
            min_age_secs,
        } => (tenant, min_age_secs),
        Round::Bill { date, html } => return reconcile_bills(&state, &date, html).await,
    };
    let mut round = mideng_pay::workers::reconcile::ReconcileSettings {
        tenant,
        ..config.reconcile_settings()
    };
    if let Some(seconds) = min_age_secs {
        round.min_age = std::time::Duration::from_secs(seconds);
    }
    let report = mideng_pay::workers::reconcile::reconcile_once(&state.ports, &round).await?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "examined {}, paid {}, refund cases found {}, closed {}, left pending {}, unknown {}, busy {}; refunds examined {}, settled {}; refund cases refunded {}",
        report.examined,
        report.paid,
        report.cases,
        report.closed,
        report.left,
        report.unknown,
        report.busy,
        report.refunds_examined,
        report.refunds_settled,
        report.cases_refunded
    )?;
    out.flush()?;
    Ok(())
}

/// `mideng reconcile --bill <date>`: the day's bills of every configured channel; exit status 1
/// when a bill could not be read or a line disagrees.
async fn reconcile_bills(
    state: &mideng_pay::state::AppState,
    date: &str,
    html: Option<PathBuf>,
) -> anyhow::Result<()> {
    use mideng_channel::ChannelKind;
    use mideng_channel::bill::BillDate;
    let now_ms = state.ports.clock.now_ms();
    let today = BillDate::containing(now_ms).context("the clock is out of range")?;
    let date = match date {
        "today" => today,
        "yesterday" => today.previous().context("no day before today")?,
        text => BillDate::parse(text)
            .with_context(|| format!("--bill {text:?}: expected yyyy-MM-dd, today or yesterday"))?,
    };
    anyhow::ensure!(
        date <= today,
        "--bill {date}: that day has not begun (Beijing time)"
    );
    let mut reports = Vec::new();
    let mut failed = Vec::new();
    for channel in [ChannelKind::Alipay, ChannelKind::Wechat] {
        if state.ports.channels.get(channel).is_none() {
            continue;
        }
        match mideng_pay::workers::bill::reconcile_bill(&state.ports, channel, date).await {
            Ok(report) => reports.push(report),
            Err(error) => failed.push(format!("{}: {error}", channel.as_str())),
        }
    }
    let cases: Vec<_> = state
        .ports
        .store
        .bill_cases
        .cases(None, None, 1_000)
        .await?
        .into_iter()
        .filter(|case| case.bill_date == date.to_string())
        .collect();
    let mut out = std::io::stdout().lock();
    for report in &reports {
        if report.published {
            writeln!(
                out,
                "{} {}: lines {}, matched {}, repaired {}, disagreements {} ({} new cases); charged {} fen, refunded {} fen",
                report.channel,
                report.date,
                report.lines,
                report.matched,
                report.repaired,
                report.disagreements,
                report.cases_found,
                report.charged_fen,
                report.refunded_fen
            )?;
        } else {
            writeln!(
                out,
                "{} {}: the channel has not published this bill yet",
                report.channel, report.date
            )?;
        }
    }
    for case in cases
        .iter()
        .filter(|case| case.status == mideng_pay::domain::bill::BillCaseStatus::Open)
    {
        writeln!(out, "open case {}: {}", case.case_id, case.detail)?;
    }
    for failure in &failed {
        writeln!(out, "failed {failure}")?;
    }
    out.flush()?;
    if let Some(path) = html {
        std::fs::write(
            &path,
            mideng_pay::web::bill_report::render(&reports, &cases),
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    let disagreements: u64 = reports.iter().map(|report| report.disagreements).sum();
    anyhow::ensure!(
        failed.is_empty(),
        "{} bill(s) could not be reconciled",
        failed.len()
    );
    anyhow::ensure!(
        disagreements == 0,
        "{disagreements} disagreement(s) with the bills"
    );
    Ok(())
}

/// What a newcomer needs: where things listen, the demo key, a first command.
fn banner(
    api: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
    sim: Option<std::net::SocketAddr>,
    demo_key: Option<&str>,
    pages: Urls,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "mideng payment service listening on http://{api}")?;
    if pages.checkout {
        writeln!(out, "demo checkout: open http://{api}/ in a browser")?;
    }
    if pages.console {
        // The key travels in the URL's fragment (`#key=`), which the browser never sends.
        writeln!(
            out,
            "operator console: http://{api}/console#key=<the key whose SHA-256 is [console] api_key_sha256>"
        )?;
    } else {
        writeln!(
            out,
            "operator console: off (set [console] api_key_sha256; `mideng api-key` makes a key)"
        )?;
    }
    writeln!(out, "metrics (Prometheus) on http://{metrics}/metrics")?;
    if let Some(sim) = sim {
        writeln!(
            out,
            "channel simulator (Alipay + WeChat Pay) on http://{sim}"
        )?;
    }
    if let Some(key) = demo_key {
        writeln!(out, "demo tenant API key: {key}")?;
        writeln!(out, "try:")?;
        writeln!(
            out,
            "  curl -s -X POST http://{api}/v1/orders -H 'Authorization: Bearer {key}' \
             -H 'Content-Type: application/json' \
             -d '{{\"order_id\":\"o-1\",\"user_id\":\"u-1\",\"amount\":1999,\"currency\":\"CNY\"}}'"
        )?;
    }
    out.flush()
}

/// `mideng api-key`: a new tenant key and the hash that goes into `[[tenants]]`.
pub(crate) fn api_key() -> std::io::Result<()> {
    let key = generate_api_key();
    let mut out = std::io::stdout().lock();
    writeln!(out, "api_key        = {key}")?;
    writeln!(out, "api_key_sha256 = {}", api_key_hash(&key))?;
    out.flush()
}

/// `mideng openapi`: the OpenAPI document of the v1 API.
pub(crate) fn openapi() -> anyhow::Result<()> {
    let document = mideng_pay::api::openapi_json()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{document}")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use mideng_pay::config::{BrokerKind, ServeConfig};

    /// What `mideng serve` logs at start (the summary) and what a `{:?}` of its settings shows:
    /// the URLs' passwords never, where each connection goes always.
    #[test]
    fn the_start_up_line_names_every_server_without_its_password() {
        let mut config = ServeConfig::default();
        config.database.url = Some("postgres://app:hunter2@db.internal:5432/pay".into());
        config.redis.url = Some("redis://:hunter2@cache.internal:6379/0".into());
        config.events.broker = BrokerKind::Nats;
        config.events.nats.url = "nats://app:hunter2@a:4222,nats://app:hunter2@b:4222".into();
        let settings = super::settings(&config, None, None, None);

        let summary = settings.summary();
        let debug = format!("{settings:?}");
        for shown in [&summary, &debug] {
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        assert!(
            summary.contains("database postgres://app:***@db.internal:5432/pay"),
            "{summary}"
        );
        assert!(
            summary.contains("redis://:***@cache.internal:6379/0"),
            "{summary}"
        );
        assert!(summary.contains("broker nats"), "{summary}");
        assert!(
            summary.lines().count() == 1 && summary.len() < 400,
            "{summary}"
        );
        assert!(
            debug.contains("nats://app:***@a:4222,nats://app:***@b:4222"),
            "{debug}"
        );
    }
}
