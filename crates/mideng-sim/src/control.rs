//! The control API under `/sim/`: what tests and the storm do to the channels from the buyer's
//! and the operator's side, and what they read back.
//!
//! | route | does |
//! |---|---|
//! | `POST /sim/trades/{no}/scan` | the buyer scans (an Alipay precreate becomes a trade) |
//! | `POST /sim/trades/{no}/pay` | the buyer pays (scanning first if needed) |
//! | `POST /sim/trades/{no}/close` | the channel closes an unpaid trade |
//! | `POST /sim/trades/{no}/refund` | the operator refunds what is left of a paid (or finished) trade, at once, under a refund number of the simulator's (`SIMREFUND…`), with the channel's refund notify |
//! | `POST /sim/trades/{no}/finish` | an Alipay trade becomes TRADE_FINISHED |
//! | `GET /sim/trades/{no}` | the trade, its refunds (number, amount, status), its notifies and the merchant's answers |
//! | `GET /sim/ledger` | every charge and refund |
//! | `GET /sim/clock`, `POST /sim/clock/advance` | channel time |
//! | `PUT /sim/notify-policy` | global or per-trade notify policy (refund notifies follow their trade's) |
//! | `POST /sim/fail-next` | fail the next call(s) of a gateway method, refunds and refund queries included |
//! | `POST /sim/refund-outcome` | `{"outcome": "abnormal" \| "closed" \| "success"}`: how the next WeChat Pay refund a merchant asks for ends, with its `REFUND.*` notify (one refund; then SUCCESS again) |
//! | `POST /sim/wechat/platform/rotate` | WeChat Pay renews its platform certificate (certificate mode) |
//!
//! Transitions answer `200 {outcome, trade}`; refusals and bad input answer
//! `application/problem+json` with a stable `code`, never a panic or a 500.
//!
//! Merchants refund through the gateways (`alipay.trade.refund`,
//! `POST /v3/refund/domestic/refunds`, …); the control API's refund is the operator's, for
//! tests that need a refunded trade without a merchant.

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use mideng_channel::{ChannelKind, strict, wechat};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::faults::{FaultCode, GatewayMethod};
use crate::gateway::{self, BodyUnreadable, is_valid_out_trade_no, read_body};
use crate::limits::{CLOCK_ADVANCE_SECONDS_MAX, FAULT_TIMES_MAX, POLICY_DELAY_SECONDS_MAX};
use crate::notify::queue::{NotifyPolicy, PolicyMode};
use crate::simulator::Simulator;
use crate::trades::{
    Applied, CloseCause, LedgerKind, RefundOutcome, RefundStatus, Refusal, Trade, TradeRefund,
};
use crate::world::World;

/// The control routes.
pub(crate) fn routes() -> Router<Simulator> {
    Router::new()
        .route("/sim/trades/{out_trade_no}", get(show_trade))
        .route(
            "/sim/trades/{out_trade_no}/{operation}",
            post(transition_trade),
        )
        .route("/sim/ledger", get(ledger))
        .route("/sim/clock", get(clock))
        .route("/sim/clock/advance", post(advance_clock))
        .route("/sim/notify-policy", put(set_notify_policy))
        .route("/sim/fail-next", post(fail_next))
        .route("/sim/refund-outcome", post(set_refund_outcome))
        .route("/sim/wechat/platform/rotate", post(rotate_wechat_platform))
}

/// `POST /sim/wechat/platform/rotate`: a new platform key under a new serial signs from now
/// on; `/v3/certificates` serves its certificate beside the previous one. Answers the new
/// serial. Certificate mode only (409 otherwise).
async fn rotate_wechat_platform(State(simulator): State<Simulator>) -> Response {
    if simulator.shared.config.wechat_platform_mode
        != crate::config::WechatPlatformMode::Certificate
    {
        return Problem::new(
            StatusCode::CONFLICT,
            "not-certificate-mode",
            "the platform rotates certificates in certificate mode only",
        )
        .into_response();
    }
    // RSA key generation takes a while: off the async workers.
    let key = match tokio::task::spawn_blocking(mideng_channel::keys::PrivateKey::generate).await {
        Ok(Ok(key)) => key,
        _ => {
            return Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "key-generation-failed",
                "the new platform key could not be generated",
            )
            .into_response();
        }
    };
    match simulator.shared.rotate_wechat_platform(key) {
        Ok(serial) => axum::Json(json!({ "serial_no": serial })).into_response(),
        Err(_) => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "certificate-failed",
            "the new platform certificate could not be issued",
        )
        .into_response(),
    }
}

/// A refusal, as `application/problem+json`.
#[derive(Debug)]
struct Problem {
    status: StatusCode,
    code: &'static str,
    detail: String,
}

impl Problem {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
        }
    }

    fn invalid(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid-request", detail)
    }

    fn from_refusal(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound => Self::new(
                StatusCode::NOT_FOUND,
                "trade-not-found",
                "no trade has this out_trade_no",
            ),
            Refusal::Closed => Self::new(
                StatusCode::CONFLICT,
                "trade-closed",
                "the trade is closed or was refunded",
            ),
            Refusal::Paid => Self::new(StatusCode::CONFLICT, "trade-paid", "the trade was paid"),
            Refusal::NotPaid => Self::new(
                StatusCode::CONFLICT,
                "trade-not-paid",
                "the trade was not paid",
            ),
            Refusal::Expired => Self::new(
                StatusCode::CONFLICT,
                "trade-expired",
                "the precreate's time_expire passed before the scan",
            ),
            Refusal::NotSupported => Self::new(
                StatusCode::CONFLICT,
                "not-supported",
                "the trade's channel has no such operation",
            ),
            Refusal::NothingToRefund => Self::new(
                StatusCode::CONFLICT,
                "nothing-to-refund",
                "refunds still processing (or abnormal) hold what is left of the trade",
            ),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = json!({
            "type": format!("urn:mideng-sim:problem:{}", self.code),
            "code": self.code,
            "title": self.status.canonical_reason().unwrap_or_default(),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = (self.status, body.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

/// Unknown routes.
pub(crate) async fn not_found() -> Response {
    Problem::new(StatusCode::NOT_FOUND, "not-found", "no such endpoint").into_response()
}

/// Reads a JSON body into `T`.
async fn json_body<T: DeserializeOwned>(body: Body) -> Result<T, Problem> {
    let bytes = read_body(body).await.map_err(|BodyUnreadable| {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "the body is unreadable or larger than 64 KiB",
        )
    })?;
    strict::json_bytes(&bytes)
        .map_err(|error| Problem::invalid(format!("invalid JSON body: {error}")))
}

fn path_out_trade_no(path: Result<Path<String>, PathRejection>) -> Result<String, Problem> {
    match path {
        Ok(Path(out_trade_no)) if is_valid_out_trade_no(&out_trade_no) => Ok(out_trade_no),
        _ => Err(Problem::invalid(
            "out_trade_no must be 1 to 64 letters, digits or _-|*",
        )),
    }
}

/// A trade as the control API shows it.
#[derive(Serialize)]
struct TradeView<'a> {
    channel: ChannelKind,
    out_trade_no: &'a str,
    channel_trade_id: Option<&'a str>,
    amount_fen: i64,
    subject: &'a str,
    status: crate::trades::TradeStatus,
    /// The status in the channel's words (`WAIT_BUYER_PAY`, `NOTPAY`, …).
    channel_status: &'static str,
    scanned: bool,
    /// Whether the channel's query shows the trade (an unscanned Alipay precreate: no).
    exists_at_channel: bool,
    pay_code: &'a str,
    notify_url: Option<&'a str>,
    created_at_ms: i64,
    scanned_at_ms: Option<i64>,
    paid_at_ms: Option<i64>,
    finished_at_ms: Option<i64>,
    closed_at_ms: Option<i64>,
    refunded_at_ms: Option<i64>,
    close_cause: Option<CloseCause>,
    expires_at_ms: Option<i64>,
    /// What went back to the buyer: the successful refunds' sum.
    refunded_fen: i64,
    /// What may still be refunded.
    refundable_fen: i64,
    refunds: Vec<RefundView<'a>>,
    notifies: Vec<&'a crate::notify::queue::Notify>,
}

/// A refund as the control API shows it.
#[derive(Serialize)]
struct RefundView<'a> {
    out_refund_no: &'a str,
    refund_id: &'a str,
    amount_fen: i64,
    status: RefundStatus,
    /// The status in the channel's words (WeChat Pay `PROCESSING`, …; Alipay `REFUND_SUCCESS`).
    channel_status: &'static str,
    reason: &'a str,
    notify_url: Option<&'a str>,
    requested_at_ms: i64,
    /// When processing is due to end, while it processes.
    settles_at_ms: Option<i64>,
    ended_at_ms: Option<i64>,
}

fn refund_view<'a>(trade: &Trade, refund: &'a TradeRefund) -> RefundView<'a> {
    RefundView {
        out_refund_no: &refund.out_refund_no,
        refund_id: &refund.refund_id,
        amount_fen: refund.amount_fen,
        status: refund.status,
        channel_status: match trade.channel {
            ChannelKind::Alipay => match refund.status {
                RefundStatus::Success => mideng_channel::alipay::REFUND_SUCCESS,
                // Alipay refunds succeed in the call; no other status reaches its trades.
                RefundStatus::Processing | RefundStatus::Closed | RefundStatus::Abnormal => "",
            },
            ChannelKind::Wechat => gateway::wechat::refund_status(refund.status),
        },
        reason: &refund.reason,
        notify_url: refund.notify_url.as_deref(),
        requested_at_ms: refund.requested_at_ms,
        settles_at_ms: refund.settles_at_ms,
        ended_at_ms: refund.ended_at_ms,
    }
}

fn trade_view<'a>(world: &'a World, trade: &'a Trade) -> TradeView<'a> {
    TradeView {
        channel: trade.channel,
        out_trade_no: &trade.out_trade_no,
        channel_trade_id: trade
            .channel_trade_id
            .as_deref()
            .filter(|_| trade.channel == ChannelKind::Alipay || trade.status.was_paid()),
        amount_fen: trade.terms.amount_fen,
        subject: &trade.terms.subject,
        status: trade.status,
        channel_status: match trade.channel {
            ChannelKind::Alipay => gateway::alipay::trade_status(trade.status),
            ChannelKind::Wechat => gateway::wechat::trade_state(trade.status),
        },
        scanned: trade.scanned,
        exists_at_channel: trade.exists_at_channel(),
        pay_code: &trade.pay_code,
        notify_url: trade.notify_url.as_deref(),
        created_at_ms: trade.created_at_ms,
        scanned_at_ms: trade.scanned_at_ms,
        paid_at_ms: trade.paid_at_ms,
        finished_at_ms: trade.finished_at_ms,
        closed_at_ms: trade.closed_at_ms,
        refunded_at_ms: trade.refunded_at_ms,
        close_cause: trade.close_cause,
        expires_at_ms: trade.expires_at_ms,
        refunded_fen: trade.refunded_fen(),
        refundable_fen: if trade.status.was_paid() {
            trade.refundable_fen()
        } else {
            0
        },
        refunds: trade
            .refunds
            .iter()
            .map(|refund| refund_view(trade, refund))
            .collect(),
        notifies: world.notifies.notifies_of_trade(&trade.out_trade_no),
    }
}

/// `GET /sim/trades/{no}`.
async fn show_trade(
    State(simulator): State<Simulator>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let out_trade_no = match path_out_trade_no(path) {
        Ok(out_trade_no) => out_trade_no,
        Err(problem) => return problem.into_response(),
    };
    let world = simulator.shared.settled_world();
    match world.trades.find_trade(&out_trade_no) {
        Some(trade) => axum::Json(trade_view(&world, trade)).into_response(),
        None => Problem::from_refusal(Refusal::NotFound).into_response(),
    }
}

/// A transition the control API can make.
#[derive(Clone, Copy, Debug)]
enum Operation {
    Scan,
    Pay,
    Close,
    Refund,
    Finish,
}

impl Operation {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "scan" => Some(Operation::Scan),
            "pay" => Some(Operation::Pay),
            "close" => Some(Operation::Close),
            "refund" => Some(Operation::Refund),
            "finish" => Some(Operation::Finish),
            _ => None,
        }
    }

    fn outcome(self, applied: Applied) -> &'static str {
        match (self, applied) {
            (Operation::Scan, Applied::Changed) => "scanned",
            (Operation::Scan, Applied::AlreadyDone) => "already-scanned",
            (Operation::Pay, Applied::Changed) => "paid",
            (Operation::Pay, Applied::AlreadyDone) => "already-paid",
            (Operation::Close, Applied::Changed) => "closed",
            (Operation::Close, Applied::AlreadyDone) => "already-closed",
            (Operation::Refund, Applied::Changed) => "refunded",
            (Operation::Refund, Applied::AlreadyDone) => "already-refunded",
            (Operation::Finish, Applied::Changed) => "finished",
            (Operation::Finish, Applied::AlreadyDone) => "already-finished",
        }
    }
}

/// Runs one transition under the world's lock and answers the trade as it left it.
fn transition(
    simulator: &Simulator,
    path: Result<Path<String>, PathRejection>,
    operation: Operation,
) -> Response {
    let out_trade_no = match path_out_trade_no(path) {
        Ok(out_trade_no) => out_trade_no,
        Err(problem) => return problem.into_response(),
    };
    let shared = &simulator.shared;
    let mut world = shared.settled_world();
    let now_ms = world.now_ms();
    let trades = &mut world.trades;
    let result = match operation {
        Operation::Scan => trades
            .scan_trade(&out_trade_no, now_ms)
            .map(|applied| (applied, None)),
        Operation::Pay => trades.pay_trade(&out_trade_no, now_ms),
        Operation::Close => trades.close_trade(&out_trade_no, CloseCause::Control, now_ms),
        Operation::Refund => trades.refund_trade(&out_trade_no, now_ms),
        Operation::Finish => trades.finish_trade(&out_trade_no, now_ms),
    };
    match result {
        Ok((applied, event)) => {
            world.publish(&shared.config, event, now_ms);
            let Some(trade) = world.trades.find_trade(&out_trade_no) else {
                return Problem::from_refusal(Refusal::NotFound).into_response();
            };
            let body = json!({
                "outcome": operation.outcome(applied),
                "trade": trade_view(&world, trade),
            });
            axum::Json(body).into_response()
        }
        Err(refusal) => Problem::from_refusal(refusal).into_response(),
    }
}

/// `POST /sim/trades/{out_trade_no}/{scan|pay|close|refund|finish}`. Any other operation is
/// an unknown path, answered like every other one.
async fn transition_trade(
    State(simulator): State<Simulator>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Response {
    let Ok(Path((out_trade_no, operation))) = path else {
        return Problem::invalid("out_trade_no must be 1 to 64 letters, digits or _-|*")
            .into_response();
    };
    let Some(operation) = Operation::parse(&operation) else {
        return not_found().await;
    };
    transition(&simulator, Ok(Path(out_trade_no)), operation)
}

/// `GET /sim/ledger`.
async fn ledger(State(simulator): State<Simulator>) -> Response {
    let world = simulator.shared.settled_world();
    let entries = world.trades.ledger();
    let total = |kind: LedgerKind| {
        entries
            .iter()
            .filter(|entry| entry.kind == kind)
            .fold(0_i64, |sum, entry| sum.saturating_add(entry.amount_fen))
    };
    let charged_fen = total(LedgerKind::Charge);
    let refunded_fen = total(LedgerKind::Refund);
    axum::Json(json!({
        "entries": entries,
        "charged_fen": charged_fen,
        "refunded_fen": refunded_fen,
        "net_fen": charged_fen.saturating_sub(refunded_fen),
    }))
    .into_response()
}

fn clock_view(simulator: &Simulator) -> Value {
    let now_ms = simulator.now_ms();
    json!({
        "now_ms": now_ms,
        "now": wechat::format_rfc3339(now_ms),
        "speed": simulator.shared.clock.speed(),
    })
}

/// `GET /sim/clock`.
async fn clock(State(simulator): State<Simulator>) -> Response {
    axum::Json(clock_view(&simulator)).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdvanceRequest {
    seconds: u64,
}

/// `POST /sim/clock/advance {seconds}`.
async fn advance_clock(State(simulator): State<Simulator>, body: Body) -> Response {
    let request: AdvanceRequest = match json_body(body).await {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    if request.seconds > CLOCK_ADVANCE_SECONDS_MAX {
        return Problem::invalid("seconds must be at most 400 days").into_response();
    }
    simulator.advance_clock(request.seconds);
    axum::Json(clock_view(&simulator)).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyRequest {
    mode: PolicyMode,
    out_trade_no: Option<String>,
    delay_seconds: Option<u64>,
    stop_after: Option<u32>,
}

/// `PUT /sim/notify-policy`.
async fn set_notify_policy(State(simulator): State<Simulator>, body: Body) -> Response {
    let request: PolicyRequest = match json_body(body).await {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    if request
        .out_trade_no
        .as_deref()
        .is_some_and(|out_trade_no| !is_valid_out_trade_no(out_trade_no))
    {
        return Problem::invalid("out_trade_no must be 1 to 64 letters, digits or _-|*")
            .into_response();
    }
    if request
        .delay_seconds
        .is_some_and(|seconds| seconds > POLICY_DELAY_SECONDS_MAX)
    {
        return Problem::invalid("delay_seconds must be at most 30 days").into_response();
    }
    let policy = NotifyPolicy::new(request.mode, request.delay_seconds, request.stop_after);
    let stored = simulator
        .shared
        .settled_world()
        .notifies
        .set_policy(request.out_trade_no.as_deref(), policy);
    if stored.is_err() {
        return Problem::new(
            StatusCode::CONFLICT,
            "too-many-policies",
            "too many per-trade policies",
        )
        .into_response();
    }
    axum::Json(json!({
        "scope": if request.out_trade_no.is_some() { "trade" } else { "global" },
        "out_trade_no": request.out_trade_no,
        "mode": policy.mode,
        "delay_seconds": policy.delay_seconds,
        "stop_after": policy.stop_after,
    }))
    .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailNextRequest {
    method: String,
    /// A string or a number (`20000`, `"ACQ.SYSTEM_ERROR"`, `"SYSTEM_ERROR"`).
    code: Option<Value>,
    #[serde(default)]
    apply_anyway: bool,
    times: Option<u32>,
}

/// `POST /sim/fail-next`. Alipay's `ACQ.CONTEXT_INCONSISTENT` is a definite refusal rather than
/// an unknown outcome: with `apply_anyway` the channel answers "failed" and made the trade.
async fn fail_next(State(simulator): State<Simulator>, body: Body) -> Response {
    let request: FailNextRequest = match json_body(body).await {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let Some(method) = GatewayMethod::from_name(&request.method) else {
        let names: Vec<&str> = GatewayMethod::ALL.iter().map(|(_, name)| *name).collect();
        return Problem::invalid(format!("method must be one of {}", names.join(", ")))
            .into_response();
    };
    let code_text = match &request.code {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Number(number)) => Some(number.to_string()),
        Some(_) => return Problem::invalid("code must be a string or a number").into_response(),
    };
    let Some(code) = FaultCode::for_method(method, code_text.as_deref()) else {
        return Problem::invalid(
            "code must be 20000 / isp.unknow-error, 40004 / ACQ.SYSTEM_ERROR or \
             ACQ.CONTEXT_INCONSISTENT (a refusal) for Alipay, 500 / SYSTEM_ERROR for WeChat Pay",
        )
        .into_response();
    };
    let times = request.times.unwrap_or(1);
    if !(1..=FAULT_TIMES_MAX).contains(&times) {
        return Problem::invalid("times must be 1 to 1000").into_response();
    }
    simulator
        .shared
        .settled_world()
        .faults
        .arm(method, code, request.apply_anyway, times);
    axum::Json(json!({
        "method": method.name(),
        "code": code.name(),
        "apply_anyway": request.apply_anyway,
        "times": times,
    }))
    .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundOutcomeRequest {
    outcome: RefundOutcome,
}

/// `POST /sim/refund-outcome {"outcome": "abnormal" | "closed" | "success"}`: how the next new
/// WeChat Pay refund ends once processed (Alipay refunds succeed in the call and ignore it).
async fn set_refund_outcome(State(simulator): State<Simulator>, body: Body) -> Response {
    let request: RefundOutcomeRequest = match json_body(body).await {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    simulator
        .shared
        .settled_world()
        .faults
        .arm_refund_outcome(request.outcome);
    axum::Json(json!({ "next_refund_outcome": request.outcome })).into_response()
}
