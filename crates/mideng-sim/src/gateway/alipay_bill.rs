//! Alipay's daily bill: `alipay.data.dataservice.bill.downloadurl.query` through `/gateway.do`,
//! and the download its URL names.
//!
//! `biz_content` names `bill_type` (`trade`, the only one served) and `bill_date`
//! (`yyyy-MM-dd`; monthly bills are not served). A day not yet published, or not begun, is
//! `40004 isp.bill_not_exist`. The answer's `bill_download_url` points at this simulator, on
//! the host the merchant reached, and serves the zip without authentication for
//! [`bills::DOWNLOAD_VALID_MS`], as the channel's short-lived download links do.

use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use mideng_channel::ChannelKind;
use mideng_channel::bill::{
    ALIPAY_BILL_METHOD, ALIPAY_BILL_TYPE_TRADE, ALIPAY_SUB_BILL_NOT_EXIST, BillDate,
};
use mideng_channel::strict::Form;
use serde_json::{Map, Value, json};

use super::alipay::{Failure, required_field};
use crate::bills;
use crate::shared::Shared;
use crate::simulator::Simulator;

/// The method name.
pub(crate) const METHOD: &str = ALIPAY_BILL_METHOD;
/// Where the download URLs point.
pub(crate) const DOWNLOAD_PATH: &str = "/downloadBillFile.resource";

/// The call's answer node: the URL of the day's bill.
pub(super) fn download_url(
    shared: &Shared,
    host: Option<&str>,
    biz: &Map<String, Value>,
) -> Result<Value, Failure> {
    let bill_type = required_field(biz, "bill_type")?;
    if bill_type != ALIPAY_BILL_TYPE_TRADE {
        return Err(Failure::invalid_business_parameter(
            "bill_type: only trade is served",
        ));
    }
    let bill_date = required_field(biz, "bill_date")?;
    let date = BillDate::parse(&bill_date).ok_or_else(|| {
        Failure::invalid_business_parameter(
            "bill_date must be yyyy-MM-dd (monthly bills are not served)",
        )
    })?;
    let host = host.ok_or_else(|| Failure::illegal("isv.invalid-parameter", "no Host header"))?;
    // The lines are copied under the lock and the file rendered outside it.
    let (lines, now_ms) = {
        let world = shared.settled_world();
        let now_ms = world.now_ms();
        bills::published(
            ChannelKind::Alipay,
            date,
            now_ms,
            shared.config.bills_as_the_day_runs,
        )
        .map_err(|_| Failure::business(ALIPAY_SUB_BILL_NOT_EXIST, "账单不存在"))?;
        (
            bills::lines(&world.trades, ChannelKind::Alipay, date),
            now_ms,
        )
    };
    let partner = &shared.config.alipay_seller_id;
    let zip = bills::alipay_zip(partner, date, &lines, now_ms);
    let token = shared
        .settled_world()
        .bills
        .keep(ChannelKind::Alipay, zip, now_ms);
    let day = date.compact();
    Ok(json!({
        "code": mideng_channel::alipay::CODE_SUCCESS,
        "msg": "Success",
        "bill_download_url": format!(
            "http://{host}{DOWNLOAD_PATH}?bizType=trade&userId={partner}&fileType=csv.zip\
             &bizDates={day}&downloadFileName={partner}_{day}.csv.zip&fileId={token}"
        ),
    }))
}

/// `GET /downloadBillFile.resource?…&fileId=…`: the zip, while its URL is valid.
pub(crate) async fn download(State(simulator): State<Simulator>, uri: Uri) -> Response {
    let shared = &simulator.shared;
    let token = Form::parse(uri.query().unwrap_or_default().as_bytes())
        .ok()
        .and_then(|query| query.non_empty("fileId").map(str::to_owned));
    let file = token.and_then(|token| {
        let world = shared.settled_world();
        let now_ms = world.now_ms();
        world.bills.get(ChannelKind::Alipay, &token, now_ms)
    });
    match file {
        Some(bytes) => (
            [
                (header::CONTENT_TYPE, "application/oct-stream"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=bill.csv.zip",
                ),
            ],
            bytes,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "the bill file does not exist or its link expired",
        )
            .into_response(),
    }
}
