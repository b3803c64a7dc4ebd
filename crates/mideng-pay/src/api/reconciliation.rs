//! The tenant's reconciliation cases: what a channel's daily bill and our records disagreed on
//! for this tenant's payments and refunds ([`crate::workers::bill`]). A charge whose number is
//! nobody's has no tenant and is shown only on the operator console. And the tenant's refund
//! cases not settled yet: money a buyer was charged twice (or after a cancel) whose refund has
//! not succeeded (automatic refunds off, the channel's refunds closed three times, a refund the
//! channel marks abnormal, or one still under way).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use mideng::http::Tenant;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiError;
use super::error::Code;
use super::models::rfc3339;
use super::page::{PageQuery, PageView};
use crate::domain::bill::{BillCase, BillCaseStatus};
use crate::state::AppState;

/// Most cases one page shows.
pub const CASES_PAGE_MAX: u32 = 100;

/// `GET /v1/reconciliation/cases` query.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CasesQuery {
    /// `OPEN`, `REPAIRED` or `RESOLVED`; all when absent.
    pub status: Option<String>,
    /// At most this many, newest first (1 to 100, default 100).
    pub limit: Option<u32>,
}

/// One case.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct CaseView {
    /// `<channel>:<day>:<kind>:<number>`.
    pub case_id: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// The bill's day (`yyyy-MM-dd`, Beijing time).
    pub bill_date: String,
    /// `CHARGED_NOT_PAID`, `UNKNOWN_CHARGE`, `CHARGE_AMOUNT_DIFFERS`, `PAID_NOT_BILLED`,
    /// `REFUND_NOT_SETTLED`, `UNKNOWN_REFUND`, `REFUND_AMOUNT_DIFFERS`, `REFUND_NOT_BILLED`.
    pub kind: String,
    /// The payment or refund number.
    pub reference: String,
    /// Our amount, in fen.
    pub ours: Option<i64>,
    /// The bill's amount, in fen.
    pub billed: Option<i64>,
    /// `OPEN`, `REPAIRED` or `RESOLVED`.
    pub status: String,
    /// The evidence.
    pub detail: String,
    /// How it was settled.
    pub resolution: Option<String>,
    /// When it was found.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
}

impl CaseView {
    /// From a stored case.
    pub fn of(case: &BillCase) -> Self {
        Self {
            case_id: case.case_id.clone(),
            channel: case.channel.clone(),
            bill_date: case.bill_date.clone(),
            kind: case.kind.as_str().to_owned(),
            reference: case.reference.clone(),
            ours: case.ours_fen,
            billed: case.billed_fen,
            status: case.status.as_str().to_owned(),
            detail: case.detail.clone(),
            resolution: case.resolution.clone(),
            created_at: rfc3339(case.created_at_ms),
            updated_at: rfc3339(case.updated_at_ms),
        }
    }
}

/// `GET /v1/reconciliation/cases` answer.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct CasesView {
    /// Newest first.
    pub cases: Vec<CaseView>,
}

/// Reads `status` and `limit` of a cases query.
pub fn parse_query(query: &CasesQuery) -> Result<(Option<BillCaseStatus>, u32), ApiError> {
    let status = query
        .status
        .as_deref()
        .map(|text| {
            BillCaseStatus::parse(text).ok_or_else(|| {
                ApiError::new(
                    Code::InvalidQuery,
                    "status must be OPEN, REPAIRED or RESOLVED",
                )
            })
        })
        .transpose()?;
    let limit = query.limit.unwrap_or(CASES_PAGE_MAX);
    if !(1..=CASES_PAGE_MAX).contains(&limit) {
        return Err(ApiError::new(Code::InvalidQuery, "limit must be 1 to 100"));
    }
    Ok((status, limit))
}

/// The tenant's reconciliation cases, newest first.
#[utoipa::path(
    get, path = "/v1/reconciliation/cases", tag = "reconciliation", operation_id = "list_reconciliation_cases",
    params(
        ("status" = Option<String>, Query, pattern = "^(OPEN|REPAIRED|RESOLVED)$", description = "OPEN, REPAIRED or RESOLVED; all when absent"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "At most this many, newest first: 1 to 100, default 100"),
    ),
    responses(
        (status = 200, body = CasesView),
        (status = 400, description = "invalid-query", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<CasesQuery>, QueryRejection>,
) -> Result<axum::Json<CasesView>, ApiError> {
    let Query(query) = query?;
    let (status, limit) = parse_query(&query)?;
    let cases = crate::flows::operator::cases(&state.ports, Some(&tenant), status, limit).await?;
    Ok(axum::Json(CasesView {
        cases: cases.iter().map(CaseView::of).collect(),
    }))
}

/// One refund case not settled yet.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct RefundCaseView {
    /// The charged payment whose money goes back.
    pub payment_no: String,
    /// Why: `DOUBLE_CHARGE` (another attempt paid the order), `PAID_AFTER_CANCEL`,
    /// `FAILED_ATTEMPT_CHARGED`.
    pub kind: String,
    /// Fen the channel took and the buyer is owed.
    pub amount: i64,
    /// `OPEN` (no refund asked: automatic refunds off, or the channel closed every ask) or
    /// `REFUND_ASKED`.
    pub status: String,
    /// The refund asked for it, if one was.
    pub refund_no: Option<String>,
    /// That refund's status: `PROCESSING`, `ABNORMAL` (the buyer's account cannot take it: a
    /// person settles it at the channel) or `CLOSED`.
    pub refund_status: Option<String>,
    /// When it was found.
    pub created_at: String,
}

impl RefundCaseView {
    /// From the store's row.
    pub fn of(case: &crate::flows::operator::UnsettledCase) -> Self {
        Self {
            payment_no: case.case.payment_no.clone(),
            kind: case.case.kind.clone(),
            amount: case.case.amount_fen,
            status: case.status.clone(),
            refund_no: case.refund_no.clone(),
            refund_status: case.refund_status.clone(),
            created_at: rfc3339(case.case.created_at_ms),
        }
    }
}

/// The tenant's refund cases whose money has not gone back yet, oldest first, a page at a time.
#[utoipa::path(
    get, path = "/v1/refund-cases", tag = "reconciliation", operation_id = "list_refund_cases",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Cases per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[!-~]{1,64}$", description = "The last case (payment_no) of the previous page"),
    ),
    responses(
        (status = 200, body = PageView<RefundCaseView>),
        (status = 400, description = "invalid-query: the limit, or a cursor that is no case of yours", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list_refund_cases(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<RefundCaseView>>, ApiError> {
    let Query(query) = query?;
    let ports = &state.ports;
    let page = query
        .checked()?
        .read(async |after, limit| {
            crate::flows::operator::unsettled_refund_cases(ports, &tenant, after.as_deref(), limit)
                .await
        })
        .await?;
    Ok(axum::Json(page.map(|case| RefundCaseView::of(&case))))
}
