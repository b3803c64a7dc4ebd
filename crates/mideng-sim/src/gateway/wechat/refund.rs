//! The simulated WeChat Pay refunds: `POST /v3/refund/domestic/refunds` and the refund query
//! by `out_refund_no` (the rules are in the parent module's documentation).

use super::*;

#[derive(Deserialize)]
struct RefundBody {
    transaction_id: Option<String>,
    out_trade_no: Option<String>,
    out_refund_no: String,
    reason: Option<String>,
    notify_url: Option<String>,
    amount: RefundBodyAmount,
}

#[derive(Deserialize)]
struct RefundBodyAmount {
    refund: i64,
    total: i64,
    currency: String,
}

/// `POST /v3/refund/domestic/refunds`.
pub(crate) async fn create_refund(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let shared = &simulator.shared;
    let reply = match read_text(body).await {
        Ok(body) => refund(shared, &uri, &headers, &body).unwrap_or_else(|reply| reply),
        Err(reply) => reply,
    };
    reply.into_response(shared)
}

fn invalid_request(message: &str) -> Reply {
    Reply::error(
        StatusCode::BAD_REQUEST,
        wechat::CODE_INVALID_REQUEST,
        message,
    )
}

fn resource_not_exists(message: &str) -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        wechat::CODE_RESOURCE_NOT_EXISTS,
        message,
    )
}

fn refund(shared: &Shared, uri: &Uri, headers: &HeaderMap, body: &str) -> Result<Reply, Reply> {
    authenticate(shared, "POST", uri, headers, body)?;
    let request: RefundBody = strict::json(body)
        .map_err(|error| Reply::param_error(format!("invalid request body: {error}")))?;
    if !is_valid_out_refund_no(&request.out_refund_no) {
        return Err(Reply::param_error(
            "out_refund_no must be 1 to 64 letters, digits or _-|*@",
        ));
    }
    if request.transaction_id.is_none() && request.out_trade_no.is_none() {
        return Err(Reply::param_error(
            "transaction_id or out_trade_no is required",
        ));
    }
    let amount = &request.amount;
    let in_range = |fen: i64| (money::AMOUNT_FEN_MIN..=money::AMOUNT_FEN_MAX).contains(&fen);
    if !in_range(amount.refund) || !in_range(amount.total) {
        return Err(Reply::param_error(
            "amount.refund and amount.total out of range",
        ));
    }
    if amount.currency != "CNY" {
        return Err(Reply::param_error("amount.currency must be CNY"));
    }
    if request
        .notify_url
        .as_deref()
        .is_some_and(|url| !is_valid_notify_url(url))
    {
        return Err(Reply::param_error(
            "notify_url must be an http or https URL of at most 256 bytes",
        ));
    }
    let reason = request.reason.unwrap_or_default();
    if reason.chars().count() > REFUND_REASON_CHARS_MAX {
        return Err(Reply::param_error("reason must be at most 80 characters"));
    }
    let mut world = shared.settled_world();
    let now_ms = world.now_ms();
    let fault = world.faults.take(GatewayMethod::WechatRefund);
    if fault.is_some_and(|fault| !fault.apply_anyway) {
        return Err(Reply::system_error());
    }
    // The transaction id names the order first, as at the channel; it exists for the merchant
    // only once the order is paid.
    let trade = match &request.transaction_id {
        Some(id) => world
            .trades
            .find_trade_by_channel_trade_id(id)
            .filter(|trade| trade.status.was_paid()),
        None => request
            .out_trade_no
            .as_deref()
            .and_then(|out_trade_no| world.trades.find_trade(out_trade_no)),
    }
    .filter(|trade| trade.channel == ChannelKind::Wechat);
    let Some(trade) = trade else {
        return Err(if fault.is_some() {
            Reply::system_error()
        } else {
            resource_not_exists("订单不存在")
        });
    };
    if trade.terms.amount_fen != amount.total {
        return Err(if fault.is_some() {
            Reply::system_error()
        } else {
            invalid_request("订单金额与 amount.total 不一致: total must be the order's amount")
        });
    }
    let out_trade_no = trade.out_trade_no.clone();
    let refund_request = RefundRequest {
        out_trade_no: out_trade_no.clone(),
        out_refund_no: request.out_refund_no.clone(),
        amount_fen: amount.refund,
        reason,
        notify_url: request.notify_url,
        settlement: Settlement::After {
            delay_ms: REFUND_PROCESSING_MS,
            outcome: world.faults.next_refund_outcome(),
        },
    };
    let result = world.trades.request_refund(refund_request, now_ms);
    match &result {
        Ok((RefundTaken::New, event)) => {
            // The armed fate went to this refund.
            world.faults.take_refund_outcome();
            world.publish(&shared.config, event.clone(), now_ms);
        }
        Ok((RefundTaken::Repeated, _)) | Err(_) => {}
    }
    if fault.is_some() {
        // Applied, and the answer lost: the merchant must ask again.
        return Err(Reply::system_error());
    }
    result.map_err(|refusal| match refusal {
        RefundRefusal::TradeNotFound => resource_not_exists("订单不存在"),
        RefundRefusal::NotPaid | RefundRefusal::Finished => {
            invalid_request("订单状态不正确: the order is not paid")
        }
        RefundRefusal::FullyRefunded => invalid_request("订单已全额退款"),
        RefundRefusal::NumberUsed => {
            invalid_request("退款单号已被使用: out_refund_no was used with another amount or order")
        }
        RefundRefusal::ExceedsRefundable => invalid_request("申请退款金额超过订单可退金额"),
        RefundRefusal::TooManyRefunds => invalid_request("部分退款次数超过50次"),
    })?;
    let trade = world
        .trades
        .find_trade(&out_trade_no)
        .ok_or_else(|| resource_not_exists("订单不存在"))?;
    let refund = trade
        .find_refund(&request.out_refund_no)
        .ok_or_else(|| resource_not_exists("退款单不存在"))?;
    Ok(Reply::ok(refund_record(trade, refund)))
}

/// `GET /v3/refund/domestic/refunds/{out_refund_no}`.
pub(crate) async fn query_refund(
    State(simulator): State<Simulator>,
    path: Result<Path<String>, PathRejection>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let shared = &simulator.shared;
    let reply = find_refund(shared, path, &uri, &headers).unwrap_or_else(|reply| reply);
    reply.into_response(shared)
}

fn find_refund(
    shared: &Shared,
    path: Result<Path<String>, PathRejection>,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Reply, Reply> {
    authenticate(shared, "GET", uri, headers, "")?;
    let out_refund_no = match path {
        Ok(Path(number)) if is_valid_out_refund_no(&number) => number,
        _ => {
            return Err(Reply::param_error(
                "out_refund_no must be 1 to 64 letters, digits or _-|*@",
            ));
        }
    };
    let mut world = shared.settled_world();
    if world
        .faults
        .take(GatewayMethod::WechatRefundQuery)
        .is_some()
    {
        return Err(Reply::system_error());
    }
    let trade = world
        .trades
        .find_trade_by_wechat_refund(&out_refund_no)
        .ok_or_else(|| resource_not_exists("退款单不存在"))?;
    let refund = trade
        .find_refund(&out_refund_no)
        .ok_or_else(|| resource_not_exists("退款单不存在"))?;
    Ok(Reply::ok(refund_record(trade, refund)))
}

/// A refund as the create and query answers show it.
fn refund_record(trade: &Trade, refund: &TradeRefund) -> Value {
    let mut record = json!({
        "refund_id": refund.refund_id,
        "out_refund_no": refund.out_refund_no,
        "transaction_id": trade.channel_trade_id,
        "out_trade_no": trade.out_trade_no,
        "channel": "ORIGINAL",
        "user_received_account": WECHAT_REFUND_ACCOUNT,
        "create_time": wechat::format_rfc3339(refund.requested_at_ms),
        "status": refund_status(refund.status),
        "funds_account": "AVAILABLE",
        "amount": {
            "total": trade.terms.amount_fen,
            "refund": refund.amount_fen,
            "from": [],
            "payer_total": trade.terms.amount_fen,
            "payer_refund": refund.amount_fen,
            "settlement_refund": refund.amount_fen,
            "settlement_total": trade.terms.amount_fen,
            "discount_refund": 0,
            "currency": "CNY",
            "refund_fee": 0,
        },
        "promotion_detail": [],
    });
    if refund.status == RefundStatus::Success
        && let Value::Object(fields) = &mut record
    {
        fields.insert(
            "success_time".to_owned(),
            json!(refund.ended_at_ms.map(wechat::format_rfc3339)),
        );
    }
    record
}

/// WeChat Pay's `status` for a refund status.
pub(crate) fn refund_status(status: RefundStatus) -> &'static str {
    match status {
        RefundStatus::Processing => wechat::REFUND_STATUS_PROCESSING,
        RefundStatus::Success => wechat::REFUND_STATUS_SUCCESS,
        RefundStatus::Closed => wechat::REFUND_STATUS_CLOSED,
        RefundStatus::Abnormal => wechat::REFUND_STATUS_ABNORMAL,
    }
}
