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
use mideng_pay::web::journal::Journal;
use mideng_pay::web::{CheckoutSettings, ConsoleSettings, PageSettings};
use mideng_pay::{Application, Settings, TenantSeed};
use mideng_sim::Simulator;

/// Runs the service until Ctrl-C.
///
/// `journal` is the operator console's memory of decisions; the caller installed its layer in
/// the `tracing` subscriber.
pub(crate) async fn run(
    config_file: Option<PathBuf>,
    overrides: Overrides,
    journal: Journal,
) -> anyhow::Result<()> {
    let config = ServeConfig::load(config_file.as_deref(), &overrides)?;
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
        let simulator = Simulator::new(sim_config)?;
        let mut sim_stop = stopped.clone();
        simulator_task = Some(tokio::spawn(simulator.serve(sim_listener, async move {
            let _ = sim_stop.wait_for(|stop| *stop).await;
        })));
        sim_address = Some(address);
    }

    let demo_key = config
        .demo
        .enabled
        .then(|| config.demo.api_key.clone().unwrap_or_else(generate_api_key));
    let mut settings = settings(&config, alipay, wechat, demo_key.as_deref());
    settings.pages = pages(&config, demo_key.as_deref(), sim_address, journal);
    let pages = Urls {
        checkout: settings.pages.checkout.is_some(),
        console: settings.pages.console.is_some(),
        console_by_demo_key: config.console.api_key_sha256.is_none(),
    };
    tracing::info!(?settings, "starting");
    let application = Application::build(settings, listener)
        .await?
        .with_metrics_listener(metrics_listener);
    banner(
        api_address,
        metrics_address,
        sim_address,
        demo_key.as_deref(),
        pages,
    )?;

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

/// The pages `config` asks for: the checkout pays as the demo tenant (and, in the embedded
/// mode, asks the in-process simulator to pay), the console opens with the configured key or
/// else the demo tenant's.
fn pages(
    config: &ServeConfig,
    demo_key: Option<&str>,
    sim_address: Option<std::net::SocketAddr>,
    journal: Journal,
) -> PageSettings {
    PageSettings {
        checkout: demo_key
            .filter(|_| config.checkout_enabled())
            .map(|key| CheckoutSettings {
                tenant_id: config.demo.tenant_id.clone(),
                api_key: key.to_owned(),
                simulator_url: sim_address.map(|address| format!("http://{address}")),
            }),
        console: config
            .console_key_sha256(demo_key)
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
    console_by_demo_key: bool,
}

/// The service's settings from the configuration and the channel adapters.
fn settings(
    config: &ServeConfig,
    alipay: Option<Arc<dyn Channel>>,
    wechat: Option<Arc<dyn Channel>>,
    demo_key: Option<&str>,
) -> Settings {
    let mut tenants: Vec<TenantSeed> = config
        .tenants
        .iter()
        .map(|tenant| TenantSeed {
            tenant_id: tenant.id.clone(),
            api_key_sha256: tenant.api_key_sha256.to_ascii_lowercase(),
            webhooks: tenant
                .webhooks
                .iter()
                .map(|webhook| (webhook.url.clone(), webhook.events.clone()))
                .collect(),
        })
        .collect();
    if let Some(key) = demo_key {
        tenants.push(TenantSeed {
            tenant_id: config.demo.tenant_id.clone(),
            api_key_sha256: api_key_hash(key),
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
        events: config.event_settings(),
        transport: config.transport_settings(),
        pages: PageSettings::default(),
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

/// `mideng reconcile`: one reconciliation round by hand, with the configuration `serve` uses
/// (the embedded default asks the simulator of a running `mideng serve`). Prints the round's
/// figures; exit status 0 even when some answers were unknown (they are asked again).
pub(crate) async fn reconcile(
    config_file: Option<PathBuf>,
    overrides: Overrides,
    tenant: Option<String>,
    min_age_secs: Option<u64>,
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
        "examined {}, paid {}, closed {}, left pending {}, unknown {}, busy {}; refunds examined {}, settled {}; refund cases refunded {}",
        report.examined,
        report.paid,
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
        match demo_key.filter(|_| pages.console_by_demo_key) {
            // The key travels in the fragment, which the browser never sends to a server.
            Some(key) => writeln!(out, "operator console: http://{api}/console#key={key}")?,
            None => writeln!(
                out,
                "operator console: http://{api}/console (the [console] key opens it)"
            )?,
        }
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
    use utoipa::OpenApi;
    let document = mideng_pay::api::ApiDoc::openapi().to_pretty_json()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{document}")?;
    out.flush()?;
    Ok(())
}
