//! The simulator and the service instances as processes of the `mideng` executable (`mideng
//! sim`, `mideng serve`), for `mideng storm --processes`: an instance is crashed with SIGKILL
//! and started again as a new process, as an orchestrator restarts a container.
//!
//! Each instance runs from a configuration file written here (`instance-N.toml`), made from
//! the same [`Blueprint`] the in-process instances start from: the run's database, Redis,
//! broker, tenants (their keys' digests), the channels pointed at the simulator's process
//! (keys written beside the configuration), and the storm's fast schedules (reconciliation,
//! relay, consumer visibility, webhook retries), and an order lock lease of
//! [`PROCESS_ORDER_LOCK_LEASE`] so that a process paused past it stays paused for seconds, not
//! a minute. What the configuration cannot say (a layer turned off by `--break-layer`, the wait
//! for a concurrent duplicate) the processes run with the service's defaults; the storm refuses
//! `--break-layer` with `--processes`, but for `fences`, which `mideng serve` takes as a hidden
//! test flag (`--break-fences`) rather than a setting any deployed file could carry.
//!
//! Every process writes its log to a file of its own in the run's directory (appended across
//! restarts), and gets `RUST_LOG` from the storm (else `warn`) and none of the storm's `MIDENG_*`
//! variables, so that its configuration is the file's alone.
//!
//! With a clock skew ([`Processes::clock_skew_secs`]), instance 0 (and each of its restarts)
//! runs under Debian's libfaketime: its wall clock is that many seconds off, its monotonic
//! clock (timers, timeouts) is not. The skew is checked once the instance answers, by the
//! `Date` header of its answer, so that a library that did not take fails the start instead
//! of leaving a run that claims a skew it never had.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use mideng_pay::api::api_key_hash;
use mideng_pay::config::{
    AlipayApiFile, AlipayFile, BrokerKind, ChannelsConfig, DatabaseConfig, NatsConfig,
    RabbitConfig, ReconcileConfig, RedisConfig, ServeConfig, TenantConfig, WechatFile,
    WechatPlatformMode,
};
use mideng_pay::testing::Blueprint;
use mideng_pay::workers::Broker;
use tokio::process::{Child, Command};

/// Where the processes come from, and where their files go.
#[derive(Clone, Debug)]
pub struct Processes {
    /// The `mideng` executable.
    pub binary: PathBuf,
    /// The simulator's data directory: the identity the storm signs with and the instances
    /// verify (`mideng storm --data-dir`'s `sim`).
    pub identity_dir: PathBuf,
    /// Where the instances' configurations, the channel keys and the processes' logs go.
    pub dir: PathBuf,
    /// Seconds instance 0's wall clock runs ahead of the machine's (negative: behind); 0: none.
    pub clock_skew_secs: i64,
    /// Every instance started with `--break-fences` (`--break-layer fences`): the order lock's
    /// fences not enforced.
    pub break_fences: bool,
}

/// The order lock's lease of the storm's processes (the service's default is 30 s): short, so
/// that the schedule's process pause outlasts it by a margin in about 12 s
/// (`storm/faults.rs`), renewed every 1.7 s by a live holder, and above the order lock's
/// 2 s wait so that a writer waiting for a live holder still gives up before the lease ends.
pub const PROCESS_ORDER_LOCK_LEASE: Duration = Duration::from_secs(5);

/// The largest clock skew the storm makes, either way: ten minutes, past WeChat's five-minute
/// notify freshness and the expiry grace.
pub const CLOCK_SKEW_SECS_MAX: i64 = 600;

/// Where Debian's `faketime` package puts the library (the thread-safe build, for a
/// multi-threaded runtime).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// How far the skew read back from an instance's `Date` header (whole seconds, and a request's
/// time) may be from the one asked.
const SKEW_TOLERANCE_SECS: i64 = 2;

/// How long a process may take from its start to its first answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A free loopback port: bound, then released for the process to bind (another process could
/// take it in between; the start then fails and says so).
pub(super) fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

impl Processes {
    /// The log file of the process `name`.
    pub(super) fn log(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// `mideng <args>` with its output appended to `name`'s log, killed if the storm drops it.
    fn command(&self, name: &str) -> anyhow::Result<Command> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(name))
            .with_context(|| format!("opening {}", self.log(name).display()))?;
        let mut command = Command::new(&self.binary);
        for (variable, _) in std::env::vars_os() {
            if variable.to_string_lossy().starts_with("MIDENG_") {
                command.env_remove(variable);
            }
        }
        command
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        Ok(command)
    }

    /// Starts `mideng sim` on a free port with the storm's identity (channel time at the speed
    /// of real time, as the in-process simulator); the process and its base URL, once it
    /// answers.
    pub(super) async fn start_simulator(
        &self,
        http: &reqwest::Client,
    ) -> anyhow::Result<(Child, String)> {
        let port = free_port()?;
        let mut command = self.command("simulator")?;
        command
            .args([
                "sim",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(&self.identity_dir)
            .args(["--clock-speed", "1", "--bills-as-the-day-runs"]);
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {} sim", self.binary.display()))?;
        let base = format!("http://127.0.0.1:{port}");
        self.wait_ready(&mut child, http, &format!("{base}/sim/clock"), "simulator")
            .await?;
        Ok((child, base))
    }

    /// Writes the channel keys the instances sign and verify with (the merchant's private keys
    /// readable by their owner only), from the identity the simulator loads too.
    pub(super) fn write_keys(&self, blueprint: &Blueprint) -> anyhow::Result<()> {
        let (sim, merchant) = blueprint.identity.as_ref();
        let keys = self.dir.join("keys");
        std::fs::create_dir_all(&keys).with_context(|| format!("creating {}", keys.display()))?;
        write_key(
            &keys.join("alipay-merchant-private.pem"),
            &merchant.alipay_private.to_pem()?,
            true,
        )?;
        write_key(
            &keys.join("wechat-merchant-private.pem"),
            &merchant.wechat_private.to_pem()?,
            true,
        )?;
        write_key(
            &keys.join("alipay-gateway-public.pem"),
            &sim.alipay_gateway_key.public_key().to_pem()?,
            false,
        )?;
        write_key(
            &keys.join("wechat-platform-public.pem"),
            &sim.wechat_platform_key.public_key().to_pem()?,
            false,
        )?;
        Ok(())
    }

    /// Writes instance `index`'s configuration (listening on `port`, its metrics on
    /// `metrics_port`) and returns its path.
    pub(super) fn write_config(
        &self,
        blueprint: &Blueprint,
        index: usize,
        port: u16,
        metrics_port: u16,
    ) -> anyhow::Result<PathBuf> {
        let config = serve_config(blueprint, &self.dir, index, port, metrics_port);
        let path = self.dir.join(format!("instance-{index}.toml"));
        let text = toml::to_string(&config).context("writing an instance's configuration")?;
        // It names the WeChat API v3 key: owner-readable only, as the keys.
        write_key(&path, &text, true)?;
        Ok(path)
    }

    /// Starts `mideng serve --config <config>` as instance `index`; the process, once `/readyz`
    /// answers at `base`.
    pub(super) async fn start_instance(
        &self,
        index: usize,
        config: &Path,
        base: &str,
        http: &reqwest::Client,
    ) -> anyhow::Result<Child> {
        let name = format!("instance-{index}");
        let mut command = self.command(&name)?;
        command.args(["serve", "--config"]).arg(config);
        if self.break_fences {
            command.arg("--break-fences");
        }
        let skewed = index == 0 && self.clock_skew_secs != 0;
        if skewed {
            anyhow::ensure!(
                Path::new(LIBFAKETIME).exists(),
                "--clock-skew-secs needs Debian's libfaketime ({LIBFAKETIME}): apt-get install faketime"
            );
            command
                .env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME", format!("{:+}s", self.clock_skew_secs))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {} serve", self.binary.display()))?;
        // A clock skewed past the service's bound makes the instance unready by design (its
        // clock guard): that one is waited for alive.
        let probe = if skewed { "healthz" } else { "readyz" };
        self.wait_ready(&mut child, http, &format!("{base}/{probe}"), &name)
            .await?;
        if skewed {
            let measured = measured_skew_secs(http, base).await?;
            if (measured - self.clock_skew_secs).abs() > SKEW_TOLERANCE_SECS {
                let _ = child.kill().await;
                anyhow::bail!(
                    "{name} was started with its clock {:+} s off, and its answers say {measured:+} s: \
                     the skew did not take",
                    self.clock_skew_secs
                );
            }
        }
        Ok(child)
    }

    /// Waits until `url` answers 2xx; an error naming the process and the end of its log if it
    /// exits first or does not answer within [`START_TIMEOUT`].
    async fn wait_ready(
        &self,
        child: &mut Child,
        http: &reqwest::Client,
        url: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "the {name} process exited ({status}) before answering: {}",
                    log_tail(&self.log(name))
                );
            }
            let answered = http
                .get(url)
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .is_ok_and(|response| response.status().is_success());
            if answered {
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill().await;
                anyhow::bail!(
                    "the {name} process did not answer {url} within {START_TIMEOUT:?}: {}",
                    log_tail(&self.log(name))
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// How many seconds `base`'s clock is ahead of this machine's, by the `Date` header of its
/// `/healthz` answer (HTTP dates are whole seconds).
async fn measured_skew_secs(http: &reqwest::Client, base: &str) -> anyhow::Result<i64> {
    let before = std::time::SystemTime::now();
    let answer = http
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .context("asking the skewed instance for its time")?;
    let date = answer
        .headers()
        .get(reqwest::header::DATE)
        .and_then(|value| value.to_str().ok())
        .context("the skewed instance's answer has no Date header")?;
    let theirs = httpdate::parse_http_date(date)
        .with_context(|| format!("the skewed instance's Date header {date:?}"))?;
    let unix = |time: std::time::SystemTime| {
        time.duration_since(std::time::UNIX_EPOCH)
            .map(|since| i64::try_from(since.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    };
    Ok(unix(theirs) - unix(before))
}

/// The last lines of a log, for an error.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    let lines: Vec<&str> = lines.into_iter().rev().collect();
    format!("{} says: {}", path.display(), lines.join(" | "))
}

/// Writes a key or a configuration; `private`: readable by its owner only.
fn write_key(path: &Path, contents: &str, private: bool) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whole seconds, rounded up, at least one (the configuration counts some settings in
/// seconds).
fn seconds(duration: Duration) -> u64 {
    let whole = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    whole.max(1)
}

/// The configuration of instance `index`: what [`Blueprint::settings`] gives an in-process
/// instance, as `mideng serve` reads it.
fn serve_config(
    blueprint: &Blueprint,
    dir: &Path,
    index: usize,
    port: u16,
    metrics_port: u16,
) -> ServeConfig {
    let (sim, _) = blueprint.identity.as_ref();
    let base = format!("http://127.0.0.1:{port}");
    let keys = dir.join("keys");
    let payments = &blueprint.payments;
    let mut config = ServeConfig {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        metrics_listen: std::net::SocketAddr::from(([127, 0, 0, 1], metrics_port)),
        data_dir: dir.join(format!("instance-{index}")),
        database: DatabaseConfig {
            url: Some(blueprint.database_url.as_str().into()),
            connections_max: blueprint.database_connections_max,
        },
        redis: RedisConfig {
            url: blueprint.redis_url.as_deref().map(Into::into),
            cluster: blueprint
                .redis_cluster
                .iter()
                .map(|node| node.as_str().into())
                .collect(),
            prefix: blueprint.redis_prefix.clone(),
        },
        tenants: blueprint
            .tenants
            .iter()
            .map(|tenant| TenantConfig {
                id: tenant.id.clone(),
                api_key_sha256: api_key_hash(&tenant.api_key),
                publishable_key_sha256: tenant.publishable_key.as_deref().map(api_key_hash),
                webhooks: Vec::new(),
            })
            .collect(),
        channels: ChannelsConfig {
            alipay: Some(AlipayFile {
                gateway_url: format!(
                    "{}{}",
                    blueprint.sim_base.trim_end_matches('/'),
                    mideng_channel::alipay::GATEWAY_PATH
                ),
                api: AlipayApiFile::Gateway,
                app_id: sim.alipay_app_id.clone(),
                seller_id: Some(sim.alipay_seller_id.clone()),
                merchant_private_key_file: keys.join("alipay-merchant-private.pem"),
                gateway_public_key_file: keys.join("alipay-gateway-public.pem"),
                notify_url: format!("{base}/v1/channels/alipay/notify"),
            }),
            wechat: Some(wechat_file(blueprint, &keys, &base)),
        },
        ..ServeConfig::default()
    };
    config.simulator.enabled = Some(false);
    config.demo.enabled = false;
    config.console.enabled = false;
    config.payments.token_required = payments.token_required;
    config.payments.lock_wait_ms = millis(payments.lock_wait);
    config.payments.order_lock_lease_ms = millis(PROCESS_ORDER_LOCK_LEASE);
    config.payments.automatic_refunds = payments.automatic_refunds;
    config.wallet.strategy = payments.wallet_strategy;
    config.webhooks.allow_private_targets = payments.webhook_private_targets;
    config.webhooks.allowed_targets = payments.webhook_allowed_targets.clone();
    if let Some(reconcile) = &blueprint.reconcile {
        config.reconcile = ReconcileConfig {
            interval_secs: seconds(reconcile.interval),
            min_age_secs: reconcile.min_age.as_secs(),
            batch: reconcile.batch,
            // The storm reconciles its day's bills itself, at the end.
            bills: false,
            ..ReconcileConfig::default()
        };
    } else {
        // No scheduled rounds: one a day, which a storm never reaches.
        config.reconcile.interval_secs = 3_600;
        config.reconcile.bills = false;
    }
    let events = &blueprint.events;
    match &events.broker {
        Broker::Queue => config.events.broker = BrokerKind::Queue,
        Broker::RabbitMq(settings) => {
            config.events.broker = BrokerKind::Rabbitmq;
            config.events.rabbitmq = RabbitConfig {
                url: settings.url.clone(),
                queue_prefix: settings.queue_prefix.clone(),
            };
        }
        Broker::Nats(settings) => {
            config.events.broker = BrokerKind::Nats;
            config.events.nats = NatsConfig {
                url: settings.url.clone(),
                stream: settings.stream.clone(),
                subject_prefix: settings.subject_prefix.clone(),
                replicas: settings.replicas,
            };
        }
    }
    config.events.relay = events.relay.is_some();
    if let Some(relay) = &events.relay {
        config.events.relay_batch = relay.relay.batch;
        config.events.relay_interval_ms = millis(relay.interval);
        config.events.publish_timeout_secs = seconds(relay.relay.publish_timeout);
        config.events.claim_lease_secs =
            seconds(relay.relay.claim_lease).max(2 * config.events.publish_timeout_secs);
        config.events.retry_cap_secs = seconds(relay.relay.retry_cap);
    }
    config.events.consumer = events.consumer.is_some();
    if let Some(consumer) = &events.consumer {
        config.events.consumer_group = consumer.group.clone();
        config.events.consumer_visibility_secs = seconds(consumer.visibility);
        config.events.revoke_on_refund = consumer.revoke_on_refund;
        // The configuration has no retry pauses: the default ones (1 s, doubling) park an
        // event after five failures within 15 s.
        config.events.consumer_park_after = consumer.park_after;
    }
    config.webhooks.enabled = events.webhooks.is_some();
    if let Some(webhooks) = &events.webhooks {
        config.webhooks.timeout_secs = seconds(webhooks.timeout);
        config.webhooks.retry_schedule_ms =
            Some(webhooks.schedule.iter().copied().map(millis).collect());
    }
    config
}

/// `[channels.wechat]` against the simulator, in the platform mode its identity has.
fn wechat_file(blueprint: &Blueprint, keys: &Path, base: &str) -> WechatFile {
    let (sim, _) = blueprint.identity.as_ref();
    let public_key = sim.wechat_platform_mode == mideng_sim::WechatPlatformMode::PublicKey;
    WechatFile {
        base_url: blueprint.sim_base.trim_end_matches('/').to_owned(),
        mchid: sim.wechat_mchid.clone(),
        appid: sim.wechat_appid.clone(),
        merchant_serial: sim.wechat_merchant_serial.clone(),
        merchant_private_key_file: keys.join("wechat-merchant-private.pem"),
        platform_mode: Some(if public_key {
            WechatPlatformMode::PublicKey
        } else {
            WechatPlatformMode::Certificates
        }),
        platform_public_key_file: public_key.then(|| keys.join("wechat-platform-public.pem")),
        platform_serial: public_key.then(|| sim.wechat_platform_serial.clone()),
        platform_certificate_file: None,
        api_v3_key: sim.wechat_api_v3_key.clone(),
        notify_url: format!("{base}/v1/channels/wechat/notify"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The configuration written for an instance is one `mideng serve` accepts, and says what
    /// the blueprint says.
    #[test]
    fn an_instances_configuration_reads_back_as_the_blueprint() {
        let identity = mideng_sim::SimConfig::generate().expect("identity");
        let blueprint = Blueprint {
            redis_cluster: vec!["redis://127.0.0.1:7100/".to_owned()],
            redis_prefix: Some("run1".to_owned()),
            tenants: vec![mideng_pay::testing::TenantAccess::new("t0", "k".repeat(32))],
            ..Blueprint::new(
                Arc::new(identity),
                "http://127.0.0.1:8090",
                "postgres://mideng:mideng@127.0.0.1:5440/storm_x",
            )
        };
        let dir = std::env::temp_dir().join(format!("mideng-processes-{}", std::process::id()));
        let processes = Processes {
            binary: PathBuf::from("mideng"),
            identity_dir: dir.join("sim"),
            dir: dir.clone(),
            clock_skew_secs: 0,
            break_fences: false,
        };
        processes.write_keys(&blueprint).expect("keys");
        let path = processes
            .write_config(&blueprint, 1, 8101, 9101)
            .expect("written");
        let config = ServeConfig::load(Some(&path), &mideng_pay::config::Overrides::default())
            .expect("read");
        assert_eq!(config.listen.port(), 8101);
        assert_eq!(config.metrics_listen.port(), 9101);
        assert_eq!(
            config.payment_settings().order_lock_lease,
            PROCESS_ORDER_LOCK_LEASE
        );
        assert!(!config.simulator_enabled(), "the simulator runs apart");
        let cluster: Vec<&str> = config
            .redis
            .cluster
            .iter()
            .map(|node| node.expose())
            .collect();
        assert_eq!(cluster, blueprint.redis_cluster);
        assert_eq!(
            config.tenants[0].api_key_sha256,
            api_key_hash(&"k".repeat(32))
        );
        assert!(config.channels().is_ok(), "the keys it names are readable");
        assert_eq!(
            config
                .channels
                .wechat
                .as_ref()
                .map(|wechat| wechat.notify_url.as_str()),
            Some("http://127.0.0.1:8101/v1/channels/wechat/notify")
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path)
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "it holds the API v3 key");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
