//! The test harness: a simulator on a real port, a merchant that signs requests with the
//! fixture keys of `mideng-channel`, and a merchant notify receiver that records what arrives
//! and answers per a script.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use mideng_channel::keys::{PrivateKey, PublicKey, random_nonce};
use mideng_channel::{alipay, wechat};
use mideng_sim::{SimConfig, Simulator, WechatPlatformMode};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub(crate) const ALIPAY_APP_ID: &str = "2021000000000001";
pub(crate) const ALIPAY_SELLER_ID: &str = "2088000000000099";
pub(crate) const WECHAT_MCHID: &str = "1230000109";
pub(crate) const WECHAT_APPID: &str = "wxd678efh567hg6787";
pub(crate) const MERCHANT_SERIAL: &str = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1";
pub(crate) const PLATFORM_SERIAL: &str = "PUB_KEY_ID_0112340000000000000000000000000001";
/// The platform serial of [`TestSim::start_in_certificate_mode`].
pub(crate) const CERTIFICATE_SERIAL: &str = "7132D72A03E93CDDF8C03BBD1F37EEDF43F8E5E1";
pub(crate) const API_V3_KEY: &str = "0123456789abcdefghijklmnopqrstuv";

/// Every wait in a test ends by this, so that a bug fails instead of hanging.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(30);

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mideng-channel/tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The merchant's private key (both channels) and the channel's (both gateways), loaded once.
pub(crate) fn keys() -> &'static (PrivateKey, PrivateKey) {
    static KEYS: OnceLock<(PrivateKey, PrivateKey)> = OnceLock::new();
    KEYS.get_or_init(|| {
        (
            PrivateKey::from_pem(&fixture("merchant-private.pem")).expect("merchant key"),
            PrivateKey::from_pem(&fixture("channel-private.pem")).expect("channel key"),
        )
    })
}

pub(crate) fn merchant_key() -> &'static PrivateKey {
    &keys().0
}

pub(crate) fn channel_public_key() -> PublicKey {
    keys().1.public_key()
}

pub(crate) fn config(clock_speed: u32) -> SimConfig {
    let (merchant, channel) = keys();
    SimConfig {
        alipay_app_id: ALIPAY_APP_ID.to_owned(),
        alipay_seller_id: ALIPAY_SELLER_ID.to_owned(),
        alipay_merchant_public_key: merchant.public_key(),
        alipay_gateway_key: channel.clone(),
        wechat_mchid: WECHAT_MCHID.to_owned(),
        wechat_appid: WECHAT_APPID.to_owned(),
        wechat_merchant_public_key: merchant.public_key(),
        wechat_merchant_serial: MERCHANT_SERIAL.to_owned(),
        wechat_platform_key: channel.clone(),
        wechat_platform_mode: WechatPlatformMode::PublicKey,
        wechat_platform_serial: PLATFORM_SERIAL.to_owned(),
        wechat_api_v3_key: API_V3_KEY.to_owned(),
        clock_speed,
        bills_as_the_day_runs: true,
    }
}

pub(crate) fn wall_clock_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since_epoch.as_millis()).expect("fits")
}

pub(crate) fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// A running simulator.
pub(crate) struct TestSim {
    pub(crate) simulator: Simulator,
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// An Alipay answer, its signature checked over the raw node text.
#[derive(Debug)]
pub(crate) struct AlipayAnswer {
    pub(crate) body: String,
    pub(crate) node: Value,
    pub(crate) signature_valid: bool,
}

impl AlipayAnswer {
    pub(crate) fn code(&self) -> &str {
        self.node["code"].as_str().unwrap_or_default()
    }

    pub(crate) fn sub_code(&self) -> &str {
        self.node["sub_code"].as_str().unwrap_or_default()
    }
}

/// A WeChat Pay answer, its signature headers checked.
#[derive(Debug)]
pub(crate) struct WechatAnswer {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) json: Value,
    pub(crate) signature_valid: bool,
    /// The `Request-ID` header, empty when absent.
    pub(crate) request_id: String,
    /// The `Wechatpay-Serial` header, empty when absent.
    pub(crate) serial: String,
}

impl TestSim {
    pub(crate) async fn start(clock_speed: u32) -> Self {
        Self::start_with(config(clock_speed)).await
    }

    /// A simulator whose platform signs under a certificate ([`CERTIFICATE_SERIAL`]).
    pub(crate) async fn start_in_certificate_mode() -> Self {
        let mut config = config(1);
        config.wechat_platform_mode = WechatPlatformMode::Certificate;
        config.wechat_platform_serial = CERTIFICATE_SERIAL.to_owned();
        Self::start_with(config).await
    }

    pub(crate) async fn start_with(config: SimConfig) -> Self {
        let simulator = Simulator::new(config).expect("simulator");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let (shutdown, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(simulator.clone().serve(listener, async move {
            let _ = stopped.await;
        }));
        Self {
            simulator,
            base,
            client: http_client(),
            shutdown: Some(shutdown),
            server: Some(server),
        }
    }

    /// Stops the simulator and waits for it.
    pub(crate) async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take() {
            let result = tokio::time::timeout(WAIT_LIMIT, server).await;
            assert!(
                matches!(result, Ok(Ok(Ok(())))),
                "the simulator shuts down cleanly"
            );
        }
    }

    /// The signed form of an Alipay call.
    pub(crate) fn alipay_form(method: &str, biz: &Value, notify_url: Option<&str>) -> String {
        let timestamp = alipay::format_timestamp(wall_clock_ms());
        let biz_content = biz.to_string();
        let mut params = vec![
            ("app_id", ALIPAY_APP_ID),
            ("method", method),
            ("format", "JSON"),
            ("charset", "utf-8"),
            ("sign_type", "RSA2"),
            ("timestamp", timestamp.as_str()),
            ("version", "1.0"),
            ("biz_content", biz_content.as_str()),
        ];
        if let Some(url) = notify_url {
            params.push(("notify_url", url));
        }
        let sign = merchant_key()
            .sign(alipay::request_sign_content(params.iter().copied()).as_bytes())
            .expect("sign");
        params.push(("sign", sign.as_str()));
        serde_urlencoded::to_string(&params).expect("form")
    }

    /// Posts a raw form body to the gateway and checks the answer's signature.
    pub(crate) async fn alipay_raw(&self, method: &str, form: String) -> AlipayAnswer {
        self.alipay_sent(reqwest::Method::POST, method, "", form)
            .await
    }

    /// Sends a call to the gateway with `http_method`, `query` as the query string (empty for
    /// none) and `form` as the body, and checks the answer's signature.
    pub(crate) async fn alipay_sent(
        &self,
        http_method: reqwest::Method,
        method: &str,
        query: &str,
        form: String,
    ) -> AlipayAnswer {
        let mut url = format!("{}{}", self.base, alipay::GATEWAY_PATH);
        if !query.is_empty() {
            url = format!("{url}?{query}");
        }
        let response = self
            .client
            .request(http_method, url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .expect("gateway answers");
        assert_eq!(response.status(), 200, "Alipay answers HTTP 200");
        let body = response.text().await.expect("body");
        let (node_text, sign) = alipay::response_node(&body, method).expect("response node");
        let signature_valid = sign
            .as_deref()
            .is_some_and(|sign| channel_public_key().verify(node_text.as_bytes(), sign));
        let node = serde_json::from_str(node_text).expect("node JSON");
        AlipayAnswer {
            body: body.clone(),
            node,
            signature_valid,
        }
    }

    pub(crate) async fn alipay(
        &self,
        method: &str,
        biz: Value,
        notify_url: Option<&str>,
    ) -> AlipayAnswer {
        let answer = self
            .alipay_raw(method, Self::alipay_form(method, &biz, notify_url))
            .await;
        assert!(answer.signature_valid, "signed answer: {}", answer.body);
        answer
    }

    /// The `Authorization` header of a WeChat Pay call signed at `timestamp` (Unix seconds).
    pub(crate) fn wechat_authorization(
        method: &reqwest::Method,
        path_and_query: &str,
        body_text: &str,
        timestamp: i64,
        signing_key: &PrivateKey,
    ) -> String {
        let nonce = random_nonce(32);
        let message = wechat::request_message(
            method.as_str(),
            path_and_query,
            timestamp,
            &nonce,
            body_text,
        );
        wechat::Authorization {
            mchid: WECHAT_MCHID.to_owned(),
            nonce,
            timestamp,
            serial: MERCHANT_SERIAL.to_owned(),
            signature: signing_key.sign(message.as_bytes()).expect("sign"),
        }
        .to_header()
    }

    /// A signed WeChat Pay call with an `Authorization` timestamp of `timestamp` (Unix seconds).
    pub(crate) async fn wechat_at(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<&Value>,
        timestamp: i64,
        signing_key: &PrivateKey,
    ) -> WechatAnswer {
        let body_text = body.map(Value::to_string).unwrap_or_default();
        let authorization =
            Self::wechat_authorization(&method, path_and_query, &body_text, timestamp, signing_key);
        let mut request = self
            .client
            .request(method, format!("{}{path_and_query}", self.base))
            .header("authorization", authorization);
        if body.is_some() {
            request = request
                .header("content-type", "application/json")
                .body(body_text);
        }
        Self::wechat_answer(request.send().await.expect("gateway answers")).await
    }

    pub(crate) async fn wechat_answer(response: reqwest::Response) -> WechatAnswer {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.expect("body");
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        // As the official SDKs check an answer: the scheme named, the serial known, the
        // signature over the raw body.
        let signature_valid = header(wechat::HEADER_SIGNATURE_TYPE) == wechat::AUTHORIZATION_SCHEME
            && [PLATFORM_SERIAL, CERTIFICATE_SERIAL]
                .contains(&header(wechat::HEADER_SERIAL).as_str())
            && channel_public_key().verify(
                wechat::notify_message(
                    &header(wechat::HEADER_TIMESTAMP),
                    &header(wechat::HEADER_NONCE),
                    &body,
                )
                .as_bytes(),
                &header(wechat::HEADER_SIGNATURE),
            );
        let json = serde_json::from_str(&body).unwrap_or(Value::Null);
        WechatAnswer {
            status,
            body,
            json,
            signature_valid,
            request_id: header(wechat::HEADER_REQUEST_ID),
            serial: header(wechat::HEADER_SERIAL),
        }
    }

    pub(crate) async fn wechat(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> WechatAnswer {
        let answer = self
            .wechat_at(
                method,
                path_and_query,
                body,
                wall_clock_ms() / 1000,
                merchant_key(),
            )
            .await;
        assert!(
            answer.signature_valid,
            "signed answer: {} {}",
            answer.status, answer.body
        );
        answer
    }

    /// A control call; the answer's status and JSON body.
    pub(crate) async fn control(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("control answers");
        let status = response.status().as_u16();
        let body = response.text().await.expect("body");
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    pub(crate) async fn pay(&self, out_trade_no: &str) -> Value {
        let (status, body) = self
            .control(
                reqwest::Method::POST,
                &format!("/sim/trades/{out_trade_no}/pay"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub(crate) async fn trade(&self, out_trade_no: &str) -> Value {
        let (status, body) = self
            .control(
                reqwest::Method::GET,
                &format!("/sim/trades/{out_trade_no}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Polls the trade until `done` holds.
    pub(crate) async fn wait_for_trade(
        &self,
        out_trade_no: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let trade = self.trade(out_trade_no).await;
            if done(&trade) {
                return trade;
            }
            assert!(Instant::now() < deadline, "trade never got there: {trade}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn advance(&self, seconds: u64) {
        let (status, body) = self
            .control(
                reqwest::Method::POST,
                "/sim/clock/advance",
                Some(serde_json::json!({ "seconds": seconds })),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }

    pub(crate) async fn set_policy(&self, policy: Value) {
        let (status, body) = self
            .control(reqwest::Method::PUT, "/sim/notify-policy", Some(policy))
            .await;
        assert_eq!(status, 200, "{body}");
    }

    pub(crate) async fn fail_next(&self, request: Value) {
        let (status, body) = self
            .control(reqwest::Method::POST, "/sim/fail-next", Some(request))
            .await;
        assert_eq!(status, 200, "{body}");
    }
}

/// An RFC 3339 time `seconds` after the simulator's current channel time.
pub(crate) fn rfc3339_after(sim: &TestSim, seconds: i64) -> String {
    wechat::format_rfc3339(sim.simulator.now_ms() + seconds * 1000)
}

/// A notify as the merchant received it.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Received {
    /// The Alipay form parameters.
    pub(crate) fn form(&self) -> Vec<(String, String)> {
        serde_urlencoded::from_str(&self.body).expect("form body")
    }

    pub(crate) fn param(&self, key: &str) -> String {
        self.form()
            .into_iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value)
            .unwrap_or_default()
    }

    /// Whether the Alipay notify's signature verifies with the gateway key.
    pub(crate) fn alipay_signature_valid(&self) -> bool {
        let form = self.form();
        let content = alipay::notify_sign_content(
            form.iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        );
        channel_public_key().verify(content.as_bytes(), &self.param("sign"))
    }

    pub(crate) fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// Whether the WeChat Pay notify's headers verify with the platform key.
    pub(crate) fn wechat_signature_valid(&self) -> bool {
        self.header(wechat::HEADER_SIGNATURE_TYPE) == wechat::AUTHORIZATION_SCHEME
            && self.header(wechat::HEADER_SERIAL) == PLATFORM_SERIAL
            && channel_public_key().verify(
                wechat::notify_message(
                    &self.header(wechat::HEADER_TIMESTAMP),
                    &self.header(wechat::HEADER_NONCE),
                    &self.body,
                )
                .as_bytes(),
                &self.header(wechat::HEADER_SIGNATURE),
            )
    }

    pub(crate) fn wechat_notification(&self) -> wechat::Notification {
        serde_json::from_str(&self.body).expect("notification JSON")
    }

    /// The decrypted transaction of a WeChat Pay notify.
    pub(crate) fn wechat_transaction(&self) -> Value {
        let resource = self.wechat_notification().resource;
        let plaintext = mideng_channel::keys::aes_gcm_decrypt(
            API_V3_KEY.as_bytes(),
            resource.nonce.as_bytes(),
            resource.associated_data.as_bytes(),
            &resource.ciphertext,
        )
        .expect("decrypts");
        serde_json::from_slice(&plaintext).expect("transaction JSON")
    }
}

type Script = dyn Fn(usize) -> (u16, &'static str) + Send + Sync;

/// A merchant's notify endpoint: records every notify and answers the n-th (from 0) per the
/// script, after `answer_delay`.
#[derive(Clone)]
pub(crate) struct Merchant {
    pub(crate) url: String,
    received: Arc<Mutex<Vec<Received>>>,
    in_flight: Arc<AtomicUsize>,
    in_flight_max: Arc<AtomicUsize>,
}

impl Merchant {
    pub(crate) async fn start(
        script: impl Fn(usize) -> (u16, &'static str) + Send + Sync + 'static,
        answer_delay: Duration,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/notify", listener.local_addr().expect("address"));
        let merchant = Merchant {
            url,
            received: Arc::default(),
            in_flight: Arc::default(),
            in_flight_max: Arc::default(),
        };
        let script: Arc<Script> = Arc::new(script);
        let state = merchant.clone();
        let app = axum::Router::new().route(
            "/notify",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                let script = Arc::clone(&script);
                async move {
                    let now_in_flight = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    state
                        .in_flight_max
                        .fetch_max(now_in_flight, Ordering::SeqCst);
                    let index = {
                        let mut received = state.received.lock().expect("lock");
                        received.push(Received {
                            headers,
                            body: String::from_utf8_lossy(&body).into_owned(),
                        });
                        received.len() - 1
                    };
                    tokio::time::sleep(answer_delay).await;
                    state.in_flight.fetch_sub(1, Ordering::SeqCst);
                    let (status, body) = script(index);
                    (StatusCode::from_u16(status).expect("status"), body)
                }
            }),
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        merchant
    }

    /// Acknowledges every Alipay notify.
    pub(crate) async fn alipay_acknowledging() -> Self {
        Self::start(|_| (200, alipay::NOTIFY_ACK), Duration::ZERO).await
    }

    /// Acknowledges every WeChat Pay notify.
    pub(crate) async fn wechat_acknowledging() -> Self {
        Self::start(|_| (204, ""), Duration::ZERO).await
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().expect("lock").clone()
    }

    pub(crate) fn in_flight_max(&self) -> usize {
        self.in_flight_max.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` notifies arrived.
    pub(crate) async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {count} notifies arrived",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The state of a trade's notify number `index` in the control view.
pub(crate) fn notify_state(trade: &Value, index: usize) -> &str {
    trade["notifies"][index]["state"]
        .as_str()
        .unwrap_or_default()
}
