//! WeChat Pay's daily bills: `GET /v3/bill/tradebill`, `GET /v3/bill/fundflowbill`, and the
//! download their `download_url` names, `GET /v3/billdownload/file?token=…`.
//!
//! Both bill calls are signed `GET`s with `bill_date` (`yyyy-MM-dd`) and an optional
//! `tar_type` `GZIP`; the trade bill takes `bill_type` `ALL` (the default), `SUCCESS` or
//! `REFUND`, the fund-flow bill `account_type` `BASIC` (the default; `OPERATION` and `FEES`
//! have no movements here). The answer is `{hash_type: "SHA1", hash_value, download_url}`, the
//! hash over the uncompressed file. A day not yet published is 400 `STATEMENT_CREATING`; a day
//! not begun, or a published day without a line, 400 `NO_STATEMENT_EXIST`. The download is
//! signed like every request and answered with the file's bytes, unsigned, as the channel does
//! (the hash is what the merchant checks).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use mideng_channel::bill::{BillDate, WECHAT_HASH_TYPE, wechat_hash};
use mideng_channel::strict::Form;
use mideng_channel::{ChannelKind, wechat};
use serde_json::json;

use super::wechat::{Reply, authenticate};
use crate::bills::{self, NoBill, WechatBillType};
use crate::shared::Shared;
use crate::simulator::Simulator;

/// Which bill a request asks for.
#[derive(Clone, Copy, Debug)]
enum Which {
    Trade,
    Fundflow,
}

/// `GET /v3/bill/tradebill`.
pub(crate) async fn trade_bill(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let shared = &simulator.shared;
    bill(shared, &uri, &headers, Which::Trade)
        .unwrap_or_else(|reply| reply)
        .into_response(shared)
}

/// `GET /v3/bill/fundflowbill`.
pub(crate) async fn fundflow_bill(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let shared = &simulator.shared;
    bill(shared, &uri, &headers, Which::Fundflow)
        .unwrap_or_else(|reply| reply)
        .into_response(shared)
}

fn bill(shared: &Shared, uri: &Uri, headers: &HeaderMap, which: Which) -> Result<Reply, Reply> {
    authenticate(shared, "GET", uri, headers, "")?;
    let query = Form::parse(uri.query().unwrap_or_default().as_bytes())
        .map_err(|_| Reply::param_error("malformed query string (or a parameter given twice)"))?;
    let date = query
        .non_empty("bill_date")
        .and_then(BillDate::parse)
        .ok_or_else(|| Reply::param_error("bill_date must be yyyy-MM-dd"))?;
    let gzip = match query.non_empty("tar_type") {
        None => false,
        Some("GZIP") => true,
        Some(_) => return Err(Reply::param_error("tar_type must be GZIP")),
    };
    let (bill_type, basic) = match which {
        Which::Trade => (
            WechatBillType::parse(query.non_empty("bill_type"))
                .ok_or_else(|| Reply::param_error("bill_type must be ALL, SUCCESS or REFUND"))?,
            true,
        ),
        Which::Fundflow => match query.non_empty("account_type") {
            None | Some("BASIC") => (WechatBillType::All, true),
            Some("OPERATION" | "FEES") => (WechatBillType::All, false),
            Some(_) => {
                return Err(Reply::param_error(
                    "account_type must be BASIC, OPERATION or FEES",
                ));
            }
        },
    };
    let host = super::host(headers).ok_or_else(|| Reply::param_error("no Host header"))?;
    let no_statement = || {
        Reply::error(
            StatusCode::BAD_REQUEST,
            wechat::CODE_NO_STATEMENT_EXIST,
            "账单文件不存在",
        )
    };
    // The lines are copied under the lock and the file rendered outside it.
    let (lines, opening, now_ms) = {
        let world = shared.settled_world();
        let now_ms = world.now_ms();
        match bills::published(
            ChannelKind::Wechat,
            date,
            now_ms,
            shared.config.bills_as_the_day_runs,
        ) {
            Ok(()) => {}
            Err(NoBill::Future) => return Err(no_statement()),
            Err(NoBill::NotYet) => {
                return Err(Reply::error(
                    StatusCode::BAD_REQUEST,
                    wechat::CODE_STATEMENT_CREATING,
                    "账单生成中，请稍后再试",
                ));
            }
        }
        let lines = bills::lines(&world.trades, ChannelKind::Wechat, date);
        let opening = bills::balance_before(&world.trades, ChannelKind::Wechat, date);
        (lines, opening, now_ms)
    };
    let text = match which {
        Which::Trade => bills::wechat_trade(
            &shared.config.wechat_appid,
            &shared.config.wechat_mchid,
            &lines,
            bill_type,
        ),
        Which::Fundflow => bills::wechat_fundflow(&lines, opening),
    };
    if lines.is_empty() || !basic {
        return Err(no_statement());
    }
    let hash = wechat_hash(text.as_bytes());
    let file = if gzip {
        bills::gzip(text.as_bytes())
    } else {
        text.into_bytes()
    };
    let token = shared
        .settled_world()
        .bills
        .keep(ChannelKind::Wechat, file, now_ms);
    Ok(Reply::ok(json!({
        "hash_type": WECHAT_HASH_TYPE,
        "hash_value": hash,
        "download_url": format!("http://{host}{}?token={token}", wechat::PATH_BILL_DOWNLOAD),
    })))
}

/// `GET /v3/billdownload/file?token=…`.
pub(crate) async fn download(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let shared = &simulator.shared;
    match file(shared, &uri, &headers) {
        Ok(bytes) => {
            let mut response = bytes.into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            response
        }
        Err(reply) => reply.into_response(shared),
    }
}

fn file(shared: &Shared, uri: &Uri, headers: &HeaderMap) -> Result<Vec<u8>, Reply> {
    authenticate(shared, "GET", uri, headers, "")?;
    let token = Form::parse(uri.query().unwrap_or_default().as_bytes())
        .ok()
        .and_then(|query| query.non_empty("token").map(str::to_owned))
        .ok_or_else(|| Reply::param_error("token is required"))?;
    let world = shared.settled_world();
    let now_ms = world.now_ms();
    world
        .bills
        .get(ChannelKind::Wechat, &token, now_ms)
        .ok_or_else(|| Reply::param_error("token does not exist or expired"))
}
