//! `mideng serve` as a newcomer runs it: no configuration, no servers. The README's walkthrough
//! (order, token, payment, pay at the simulator, order PAID) through the real binary; then the
//! process is killed with SIGKILL and restarted on the same data directory, and nothing is lost.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const DEMO_KEY: &str = "demo-key-for-the-binary-test";

struct Running {
    child: Child,
    api: String,
    metrics: String,
    sim: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on free ports and reads its banner.
fn serve(data_dir: &std::path::Path) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mideng"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--sim-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--demo-api-key", DEMO_KEY])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (mut api, mut metrics, mut sim) = (None, None, None);
    for line in lines.by_ref() {
        let line = line.expect("banner");
        if let Some(address) = line.strip_prefix("mideng payment service listening on ") {
            api = Some(address.to_owned());
        }
        if let Some(rest) = line
            .strip_prefix("metrics (Prometheus) on ")
            .and_then(|url| url.strip_suffix("/metrics"))
        {
            metrics = Some(rest.to_owned());
        }
        if let Some(rest) = line.strip_prefix("channel simulator (Alipay + WeChat Pay) on ") {
            sim = Some(rest.to_owned());
        }
        if line.starts_with("demo tenant API key: ") {
            assert_eq!(line.trim_start_matches("demo tenant API key: "), DEMO_KEY);
            break;
        }
    }
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Running {
        child,
        api: api.expect("the banner names the API"),
        metrics: metrics.expect("the banner names the metrics listener"),
        sim: sim.expect("the banner names the simulator"),
    }
}

/// The metric families of a Prometheus text scrape that have a `# TYPE` and no `# HELP`.
fn undescribed_families(scrape: &str) -> Vec<String> {
    let named = |prefix: &str| -> std::collections::BTreeSet<String> {
        scrape
            .lines()
            .filter_map(|line| line.strip_prefix(prefix))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    };
    let described = named("# HELP ");
    named("# TYPE ")
        .into_iter()
        .filter(|family| !described.contains(family))
        .collect()
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = client
        .request(method, url)
        .bearer_auth(DEMO_KEY)
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("answer");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_pays_a_demo_order_and_a_crash_loses_nothing() {
    let data_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let client = client();
    let post = reqwest::Method::POST;
    let payment_no;
    {
        let running = serve(&data_dir);
        let api = running.api.clone();
        let (status, order) = call(&client, post.clone(), format!("{api}/v1/orders"), json!({"order_id": "o-1", "user_id": "u-1", "amount": 1999, "currency": "CNY", "entitlement": {"sku": "vip-month", "quantity": 1}}), &[]).await;
        assert_eq!(status, 201, "{order}");
        // The counters are served on the metrics listener only, never beside the API.
        let public = client
            .get(format!("{api}/metrics"))
            .send()
            .await
            .expect("answer");
        assert_eq!(public.status(), 404);
        assert_eq!(public.headers()["content-type"], "application/problem+json");
        let scraped = client
            .get(format!("{}/metrics", running.metrics))
            .send()
            .await
            .expect("answer");
        assert_eq!(scraped.status(), 200);
        let text = scraped.text().await.expect("text");
        assert!(text.contains("mideng_service_decisions_total"), "{text}");
        let (status, token) = call(
            &client,
            post.clone(),
            format!("{api}/v1/tokens"),
            json!({}),
            &[],
        )
        .await;
        assert_eq!(status, 201);
        let token = token["token"].as_str().expect("token").to_owned();
        let (status, payment) = call(
            &client,
            post.clone(),
            format!("{api}/v1/orders/o-1/payments"),
            json!({"channel": "alipay"}),
            &[
                ("Idempotency-Token", &token),
                ("Idempotency-Key", "pay-o-1"),
            ],
        )
        .await;
        assert_eq!(status, 201, "{payment}");
        payment_no = payment["payment_no"].as_str().expect("number").to_owned();
        let paid = client
            .post(format!("{}/sim/trades/{payment_no}/pay", running.sim))
            .send()
            .await
            .expect("sim");
        assert!(paid.status().is_success());
        let started = Instant::now();
        loop {
            let (_, order) = call(
                &client,
                reqwest::Method::GET,
                format!("{api}/v1/orders/o-1"),
                Value::Null,
                &[],
            )
            .await;
            if order["status"] == "PAID" {
                assert_eq!(order["payments"][0]["status"], "PAID");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the notify made the order PAID: {order}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (status, _) = call(
            &client,
            post.clone(),
            format!("{api}/v1/wallets/u-1/credit"),
            json!({"amount": 500, "reference": "top-up"}),
            &[("Idempotency-Key", "credit-1")],
        )
        .await;
        assert_eq!(status, 200);
        // Every metric family the scrape has is described: a `# HELP` beside its `# TYPE`.
        let scraped = client
            .get(format!("{}/metrics", running.metrics))
            .send()
            .await
            .expect("answer")
            .text()
            .await
            .expect("text");
        let undescribed = undescribed_families(&scraped);
        assert!(
            undescribed.is_empty(),
            "no HELP: {undescribed:?}\n{scraped}"
        );
        for family in [
            "mideng_http_request_duration_seconds",
            "mideng_idempotency_decisions_total",
            "mideng_service_decisions_total",
            "mideng_store_duration_seconds",
        ] {
            assert!(
                scraped.contains(&format!("# TYPE {family} ")),
                "{family}: {scraped}"
            );
        }
        // SIGKILL: no shutdown, no flush beyond what each commit already made durable.
    }
    let running = serve(&data_dir);
    let api = running.api.clone();
    let (_, order) = call(
        &client,
        reqwest::Method::GET,
        format!("{api}/v1/orders/o-1"),
        Value::Null,
        &[],
    )
    .await;
    assert_eq!(order["status"], "PAID", "{order}");
    assert_eq!(order["payments"][0]["payment_no"], payment_no.as_str());
    // A retry of the credit after the crash replays; it does not credit again.
    let (status, replay) = call(
        &client,
        post.clone(),
        format!("{api}/v1/wallets/u-1/credit"),
        json!({"amount": 500, "reference": "top-up"}),
        &[("Idempotency-Key", "credit-1")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(replay["balance"], 500);
    let (_, wallet) = call(
        &client,
        reqwest::Method::GET,
        format!("{api}/v1/wallets/u-1"),
        Value::Null,
        &[],
    )
    .await;
    assert_eq!(wallet["balance"], 500);
    // The paid order's entitlement: granted once by the embedded relay and consumer, whether
    // the kill came before, between or after their steps.
    let started = Instant::now();
    loop {
        let (status, grants) = call(
            &client,
            reqwest::Method::GET,
            format!("{api}/v1/entitlements?user_id=u-1"),
            Value::Null,
            &[],
        )
        .await;
        assert_eq!(status, 200, "{grants}");
        let grants = grants["grants"].as_array().cloned().unwrap_or_default();
        assert!(grants.len() <= 1, "{grants:?}");
        if grants.len() == 1 {
            assert_eq!(grants[0]["payment_no"], payment_no.as_str());
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the entitlement was never granted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A notify lost for good, found by `mideng reconcile` run by hand beside the service.
    let (status, _) = call(
        &client,
        post.clone(),
        format!("{api}/v1/orders"),
        json!({"order_id": "o-2", "user_id": "u-1", "amount": 300, "currency": "CNY"}),
        &[],
    )
    .await;
    assert_eq!(status, 201);
    let (_, token) = call(
        &client,
        post.clone(),
        format!("{api}/v1/tokens"),
        json!({}),
        &[],
    )
    .await;
    let token = token["token"].as_str().expect("token").to_owned();
    let (status, payment) = call(
        &client,
        post.clone(),
        format!("{api}/v1/orders/o-2/payments"),
        json!({"channel": "wechat"}),
        &[("Idempotency-Token", &token)],
    )
    .await;
    assert_eq!(status, 201, "{payment}");
    let lost = payment["payment_no"].as_str().expect("number").to_owned();
    let policy = client
        .put(format!("{}/sim/notify-policy", running.sim))
        .json(&json!({"mode": "drop", "out_trade_no": lost}))
        .send()
        .await
        .expect("sim");
    assert!(policy.status().is_success());
    let paid = client
        .post(format!("{}/sim/trades/{lost}/pay", running.sim))
        .send()
        .await
        .expect("sim");
    assert!(paid.status().is_success());
    let (_, order) = call(
        &client,
        reqwest::Method::GET,
        format!("{api}/v1/orders/o-2"),
        Value::Null,
        &[],
    )
    .await;
    assert_eq!(order["status"], "CREATED", "the notify was dropped");
    let sim_address = running.sim.trim_start_matches("http://").to_owned();
    let output = Command::new(env!("CARGO_BIN_EXE_mideng"))
        .args([
            "reconcile",
            "--min-age-secs",
            "0",
            "--sim-listen",
            &sim_address,
        ])
        .arg("--data-dir")
        .arg(&data_dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("mideng reconcile runs");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains("paid 1,"), "{printed}");
    let (_, order) = call(
        &client,
        reqwest::Method::GET,
        format!("{api}/v1/orders/o-2"),
        Value::Null,
        &[],
    )
    .await;
    assert_eq!(order["status"], "PAID");
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// `mideng storm --target`: the storm against a service it did not start (the real binary,
/// embedded), with the simulator's faults; the audit, over this run's ids only, finds nothing.
#[test]
fn a_storm_against_a_running_service_finds_nothing() {
    let data_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("storm-target-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let running = serve(&data_dir);
    let database = format!("sqlite://{}", data_dir.join("mideng.db").display());
    let output = Command::new(env!("CARGO_BIN_EXE_mideng"))
        .args(["storm", "--target", &running.api])
        .args(["--target-metrics", &running.metrics])
        .args(["--tenant-key", &format!("demo:{DEMO_KEY}")])
        .args(["--sim-url", &running.sim, "--database-url", &database])
        .args([
            "--duration-secs",
            "5",
            "--fault-every-secs",
            "2",
            "--concurrency",
            "4",
        ])
        // The service's own reconciler (every 10 s, over payments and refunds 30 s old) gives
        // back the charges of canceled orders and then settles those refunds: up to a minute
        // and a half after the last payment. The audit ends as soon as it holds.
        .args(["--seed", "11", "--settle-secs", "120"])
        .arg("--data-dir")
        .arg(&data_dir)
        .env("RUST_LOG", "error")
        .output()
        .expect("the storm runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("violations: none"), "{report}");
    assert!(
        report.contains("channel answer lost after applying"),
        "{report}"
    );
}

/// `--log-format json`: every line the service logs is one JSON object, the idempotency
/// decision with its fields, and the key redacted as in the text log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_log_is_one_object_per_line_with_the_decision() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve-json-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mideng"))
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .args([
            "--sim-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--demo-api-key", DEMO_KEY])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("the log file"))
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let api = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            line.strip_prefix("mideng payment service listening on ")
                .map(str::to_owned)
        })
        .expect("the banner");
    std::thread::spawn(move || for _ in lines {});
    let key = "json-log-credit-key-1";
    let (status, _) = call(
        &client(),
        reqwest::Method::POST,
        format!("{api}/v1/wallets/u-json/credit"),
        json!({"amount": 100, "reference": "json"}),
        &[("Idempotency-Key", key)],
    )
    .await;
    assert_eq!(status, 200);
    let started = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("\"target\":\"mideng::idempotency\"")
            || started.elapsed() > Duration::from_secs(10)
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = child.kill();
    let _ = child.wait();
    let events: Vec<Value> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    assert!(
        events
            .iter()
            .all(|event| event["level"].is_string() && event["target"].is_string())
    );
    // The key layer's decision, with its fields and the request's span.
    let decision = events
        .iter()
        .find(|event| event["target"] == "mideng::idempotency")
        .unwrap_or_else(|| panic!("no key decision in {text}"));
    assert_eq!(decision["fields"]["message"], "idempotency decision");
    assert_eq!(decision["fields"]["decision"], "proceed", "{decision}");
    assert_eq!(
        decision["fields"]["operation"], "wallet.credit",
        "{decision}"
    );
    assert!(decision["fields"]["key"].is_string(), "{decision}");
    assert!(
        decision["span"]["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("req_")),
        "{decision}"
    );
    assert!(!text.contains(key), "the key is redacted: {text}");
}
