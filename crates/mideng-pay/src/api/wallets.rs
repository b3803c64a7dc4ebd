//! Wallets over HTTP: credit and deduct ([`crate::flows::wallet`]) under a required
//! `Idempotency-Key`, each in one transaction that begins its idempotency record, moves the
//! money and stores the answer: a first-time request commits once, and the money moves and the
//! answer is stored together or not at all. A concurrent duplicate waits on the record's row
//! until the first commits, then replays; a replay seen before is answered from memory. Each has a business key besides the request's key — a deduct one debit per user and
//! order, a credit one credit per user and reference — held by a unique index; a second
//! operation under another key is answered 409 naming the first. Refusals a retry would repeat
//! (insufficient funds, the business key taken) are stored and replayed like successes.
//!
//! With the idempotency machinery off ([`super::PaymentSettings::idempotency`], for measuring
//! its cost only) the routes have no layer: the same transaction runs without a record, and
//! answers are sent, not stored.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use axum::response::IntoResponse;
use mideng::http::{IdempotencyClaim, Tenant};
use mideng::record::StoredResponse;

use super::ApiError;
use super::error::Code;
use super::fields::identifier;
use super::models::{
    CreditBody, CreditView, DeductBody, DeductionView, EntryView, ReversalView, WalletView,
};
use super::page::{PageQuery, PageView};
use crate::domain::ids::{OrderId, PaymentNo, Reference, UserId};
use crate::domain::wallet::{Credit, CreditOutcome, Debit, DeductOutcome};
use crate::flows::wallet::{
    self, Answered, CreditRequest, DeductRequest, ReverseOutcome, WalletRecord,
};
use crate::state::AppState;
use mideng::store::sql::Claim;

fn stored_json(status: StatusCode, body: &impl serde::Serialize) -> StoredResponse {
    StoredResponse {
        status: status.as_u16(),
        headers: vec![(
            header::CONTENT_TYPE.as_str().to_owned(),
            "application/json".to_owned(),
        )],
        body: serde_json::to_vec(body).unwrap_or_default(),
    }
}

fn stored_problem(error: &ApiError) -> StoredResponse {
    StoredResponse {
        status: error.status().as_u16(),
        headers: vec![(
            header::CONTENT_TYPE.as_str().to_owned(),
            "application/problem+json".to_owned(),
        )],
        body: serde_json::to_vec(&error.body()).unwrap_or_default(),
    }
}

/// The answer the transaction stores: with the request's id as `Original-Request-Id`, for
/// its replays.
fn stamped(claim: Option<&IdempotencyClaim>, stored: StoredResponse) -> StoredResponse {
    match claim {
        Some(claim) => claim.stamp(stored),
        None => stored,
    }
}

/// A stored answer sent the first time: without `Original-Request-Id`, which only replays
/// carry.
fn first_answer(mut stored: StoredResponse) -> StoredResponse {
    let original = mideng::http::ORIGINAL_REQUEST_ID;
    stored
        .headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case(original.as_str()));
    stored
}

fn send(stored: StoredResponse) -> Response<Body> {
    let mut response = Response::new(Body::from(stored.body));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::try_from(name),
            HeaderValue::try_from(value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// A keyed wallet operation: a request that fails its checks gets a stored refusal;
/// otherwise `work` begins the record, moves the money and stores the answer in one
/// transaction, and a duplicate found there gets the layer's answer. If the transaction fails
/// it leaves nothing behind, and the retry runs afresh. Without a claim (the machinery off),
/// `work` runs without a record.
async fn keyed<T, O>(
    state: &AppState,
    claim: Option<&IdempotencyClaim>,
    checked: Result<T, ApiError>,
    work: impl AsyncFnOnce(T) -> Result<Answered<O>, mideng::StoreError>,
) -> Response<Body> {
    let Some(claim) = claim else {
        return unrecorded(state, checked, work).await;
    };
    let input = match checked {
        Ok(input) => input,
        // A client mistake found after the key was read: stored like any other answer below
        // 500, so that the retry of the same bad request gets the same answer.
        Err(error) => return claim.answer(stored_problem(&error)).await,
    };
    match work(input).await {
        Ok(Answered::Ran(_, stored)) => {
            claim.stored(&stored);
            send(first_answer(stored))
        }
        Ok(Answered::Decided(decision)) => claim.decided(&decision).await.unwrap_or_else(|| {
            tracing::error!("a wallet transaction reported a duplicate that proceeds");
            ApiError::new(Code::Internal, "internal error").into_response()
        }),
        Err(error) => ApiError::from(error).into_response(),
    }
}

/// A wallet operation with the machinery off: checked, then `work` without a record.
async fn unrecorded<T, O>(
    state: &AppState,
    checked: Result<T, ApiError>,
    work: impl AsyncFnOnce(T) -> Result<Answered<O>, mideng::StoreError>,
) -> Response<Body> {
    if state.ports.settings.idempotency {
        // The layer is missing although the machinery is on: never move money unrecorded.
        tracing::error!("a wallet route without its idempotency layer");
        return ApiError::new(Code::Internal, "internal error").into_response();
    }
    let input = match checked {
        Ok(input) => input,
        Err(error) => return error.into_response(),
    };
    match work(input).await {
        Ok(Answered::Ran(_, stored)) => send(stored),
        Ok(Answered::Decided(_)) => {
            tracing::error!("a wallet operation without a record reported a duplicate");
            ApiError::new(Code::Internal, "internal error").into_response()
        }
        Err(error) => ApiError::from(error).into_response(),
    }
}

/// The record a wallet operation begins and completes: the claim's, or none (the machinery
/// off).
fn record_of<'a>(claim: Option<&'a IdempotencyClaim>, tenant_id: &'a str) -> WalletRecord<'a> {
    match claim {
        Some(claim) => WalletRecord::Claim(Claim {
            scope: &claim.scope,
            key: &claim.key,
            fingerprint: &claim.fingerprint,
            policy: claim.policy,
        }),
        None => WalletRecord::Unrecorded { tenant_id },
    }
}

/// The body as `T`, after the same check every other route's JSON extractor makes: exactly one
/// `Content-Type`, and it says JSON (`application/json` or `application/…+json`).
fn parse_body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, ApiError> {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let declared_json = match (types.next(), types.next()) {
        (Some(value), None) => value.to_str().is_ok_and(|value| {
            let essence = value
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            essence == "application/json"
                || (essence.starts_with("application/") && essence.ends_with("+json"))
        }),
        _ => false,
    };
    if !declared_json {
        return Err(ApiError::new(
            Code::UnsupportedMediaType,
            "send one Content-Type: application/json",
        ));
    }
    serde_json::from_slice(body).map_err(|error| {
        if error.is_syntax() || error.is_eof() {
            ApiError::new(Code::MalformedJson, error.to_string())
        } else {
            ApiError::new(Code::InvalidRequest, error.to_string())
        }
    })
}

/// Credits a wallet.
#[utoipa::path(
    post, path = "/v1/wallets/{user_id}/credit", tag = "wallets", operation_id = "credit_wallet",
    params(
        ("user_id" = String, Path, description = "Wallet owner"),
        ("Idempotency-Key" = String, Header, description = "Required: a retry replays the first answer"),
    ),
    request_body = CreditBody,
    responses(
        (status = 200, body = CreditView),
        (status = 409, description = "already-credited: the reference was credited under another key (`existing`: that credit)", body = super::ProblemBody),
        (status = 422, description = "balance-limit: the balance would exceed its bound", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn credit(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(user_id): Path<String>,
    claim: Option<axum::Extension<IdempotencyClaim>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response<Body> {
    let checked = (|| {
        let user_id = identifier(UserId::parse(&user_id))?;
        let body: CreditBody = parse_body(&headers, &body)?;
        let amount = body.amount.parse()?;
        let reference = identifier(Reference::parse(&body.reference))?;
        if reference
            .as_str()
            .starts_with(crate::domain::wallet::REVERSAL_REFERENCE_PREFIX)
        {
            return Err(ApiError::new(
                Code::InvalidRequest,
                "reference: the prefix reversal- names the reversals of deductions",
            ));
        }
        Ok(CreditRequest {
            user_id,
            amount,
            reference,
        })
    })();
    let view = |credit: &Credit| CreditView {
        entry_no: credit.entry_no.clone(),
        amount: credit.amount_fen,
        balance: credit.balance_after_fen,
    };
    let claim = claim.as_ref().map(|axum::Extension(claim)| claim);
    let render = |outcome: &CreditOutcome| {
        stamped(
            claim,
            match outcome {
                CreditOutcome::Credited(credit) => stored_json(StatusCode::OK, &view(credit)),
                CreditOutcome::TooLarge => stored_problem(&ApiError::new(
                    Code::BalanceLimit,
                    "the balance would exceed its bound",
                )),
                CreditOutcome::AlreadyCredited(credit) => stored_problem(
                    &ApiError::new(
                        Code::AlreadyCredited,
                        "this reference was credited under another key",
                    )
                    .with_existing(view(credit)),
                ),
            },
        )
    };
    keyed(&state, claim, checked, async |request| {
        wallet::credit(&state.ports, record_of(claim, &tenant), &request, &render).await
    })
    .await
}

/// Deducts from a wallet for an order.
#[utoipa::path(
    post, path = "/v1/wallets/{user_id}/deduct", tag = "wallets", operation_id = "deduct_wallet",
    params(
        ("user_id" = String, Path, description = "Wallet owner"),
        ("Idempotency-Key" = String, Header, description = "Required: a retry replays the first answer"),
    ),
    request_body = DeductBody,
    responses(
        (status = 200, body = DeductionView),
        (status = 422, description = "insufficient-funds (stored and replayed), or invalid", body = super::ProblemBody),
        (status = 409, description = "already-deducted: the order was debited under another key", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn deduct(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(user_id): Path<String>,
    claim: Option<axum::Extension<IdempotencyClaim>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response<Body> {
    let checked = (|| {
        let user_id = identifier(UserId::parse(&user_id))?;
        let body: DeductBody = parse_body(&headers, &body)?;
        let order_id = identifier(OrderId::parse(&body.order_id))?;
        let amount = body.amount.parse()?;
        Ok(DeductRequest {
            user_id,
            order_id,
            amount,
        })
    })();
    let view = |debit: &Debit| DeductionView {
        deduction_no: debit.entry_no.clone(),
        amount: debit.amount_fen,
        balance_after: debit.balance_after_fen,
    };
    let claim = claim.as_ref().map(|axum::Extension(claim)| claim);
    let render = |outcome: &DeductOutcome| {
        stamped(
            claim,
            match outcome {
                DeductOutcome::Debited(debit) => stored_json(StatusCode::OK, &view(debit)),
                DeductOutcome::InsufficientFunds { balance_fen } => stored_problem(&ApiError::new(
                    Code::InsufficientFunds,
                    format!("the balance is {balance_fen} fen"),
                )),
                DeductOutcome::AlreadyDeducted(debit) => stored_problem(
                    &ApiError::new(
                        Code::AlreadyDeducted,
                        "this order was debited under another key",
                    )
                    .with_existing(view(debit)),
                ),
            },
        )
    };
    keyed(&state, claim, checked, async |request| {
        wallet::deduct(&state.ports, record_of(claim, &tenant), &request, &render).await
    })
    .await
}

/// The wallet's balance and latest entries.
#[utoipa::path(
    get, path = "/v1/wallets/{user_id}", tag = "wallets", operation_id = "show_wallet",
    params(("user_id" = String, Path, description = "Wallet owner")),
    responses((status = 200, body = WalletView), (status = 404, body = super::ProblemBody)),
    security(("api_key" = []))
)]
pub(super) async fn show(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(user_id): Path<String>,
) -> Result<axum::Json<WalletView>, ApiError> {
    let user_id = UserId::parse(&user_id).map_err(|_| ApiError::not_found("wallet"))?;
    let wallet = crate::flows::wallet::statement(&state.ports, &tenant, &user_id).await?;
    Ok(axum::Json(WalletView {
        user_id: user_id.as_str().to_owned(),
        balance: wallet.balance_fen,
        currency: "CNY".to_owned(),
        entries: wallet.entries.iter().map(EntryView::of).collect(),
    }))
}

/// The wallet's whole ledger, a page at a time, oldest first (the wallet's own order: by its
/// version after each entry). `GET /v1/wallets/{user_id}` shows the balance and the latest 100.
#[utoipa::path(
    get, path = "/v1/wallets/{user_id}/entries", tag = "wallets", operation_id = "list_wallet_entries",
    params(
        ("user_id" = String, Path, description = "Wallet owner"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Entries per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[!-~]{1,64}$", description = "The last entry (entry_no) of the previous page"),
    ),
    responses(
        (status = 200, body = PageView<EntryView>),
        (status = 400, description = "invalid-query: the limit, or a cursor that is no entry of this wallet", body = super::ProblemBody),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn entries(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(user_id): Path<String>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<EntryView>>, ApiError> {
    let user_id = UserId::parse(&user_id).map_err(|_| ApiError::not_found("wallet"))?;
    let Query(query) = query?;
    let ports = &state.ports;
    let page = query
        .checked()?
        .read(async |after, limit| {
            wallet::entries(ports, &tenant, &user_id, after.as_deref(), limit).await
        })
        .await?;
    Ok(axum::Json(page.map(|entry| EntryView::of(&entry))))
}

/// Puts a deduction back into the wallet, once: a second call answers the same reversal
/// (`Idempotent-Replayed: true`). One reversal per deduction is held by a unique index, so no
/// `Idempotency-Key` is needed (one is ignored).
#[utoipa::path(
    post, path = "/v1/wallets/{user_id}/deductions/{deduction_no}/reverse", tag = "wallets", operation_id = "reverse_deduction",
    params(
        ("user_id" = String, Path, description = "Wallet owner"),
        ("deduction_no" = String, Path, description = "The deduction to put back"),
    ),
    responses(
        (status = 200, description = "The reversal (now, or the one made before, with Idempotent-Replayed: true)", body = ReversalView),
        (status = 404, body = super::ProblemBody),
        (status = 422, description = "balance-limit: the balance would exceed its bound", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn reverse(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path((user_id, deduction_no)): Path<(String, String)>,
) -> Result<Response<Body>, ApiError> {
    let user_id = UserId::parse(&user_id).map_err(|_| ApiError::not_found("deduction"))?;
    let deduction =
        PaymentNo::parse(&deduction_no).map_err(|_| ApiError::not_found("deduction"))?;
    let view = |entry: &crate::domain::wallet::LedgerEntry| ReversalView {
        reversal_no: entry.entry_no.clone(),
        deduction_no: deduction.as_str().to_owned(),
        amount: entry.amount_fen,
        balance_after: entry.balance_after_fen,
    };
    match wallet::reverse(&state.ports, &tenant, &user_id, deduction.as_str()).await? {
        ReverseOutcome::Reversed(entry) => {
            Ok((StatusCode::OK, axum::Json(view(&entry))).into_response())
        }
        ReverseOutcome::AlreadyReversed(entry) => {
            let mut response = (StatusCode::OK, axum::Json(view(&entry))).into_response();
            response.headers_mut().insert(
                mideng::http::IDEMPOTENT_REPLAYED,
                axum::http::HeaderValue::from_static("true"),
            );
            Ok(response)
        }
        ReverseOutcome::NoDeduction => Err(ApiError::not_found("deduction")),
        ReverseOutcome::TooLarge => Err(ApiError::new(
            Code::BalanceLimit,
            "the balance would exceed its bound",
        )),
    }
}
