//! The channels' daily bills: what each channel says moved on one day, read exactly.
//!
//! A channel publishes, for every day (00:00 to 24:00 Beijing time), a file of every charge and
//! every refund that completed that day. It is the channel's own account of the money and the
//! last word when a notify was lost and no query was made: the merchant matches it line by
//! line against its payments and refunds.
//!
//! - **Alipay** (`alipay.data.dataservice.bill.downloadurl.query`, `bill_type` `trade`): a URL
//!   to a zip of two GBK CSV files, the detail (`…_业务明细.csv`) and its summary
//!   (`…_业务明细(汇总).csv`). The detail has `#` comment lines around its list, a header row
//!   naming the columns (their order is not fixed), one row per charge (`业务类型` `交易`) or
//!   refund (`退款`, `商家实收` negative, the request number in `退款批次号/请求号`), and the
//!   totals `#交易合计：N笔，商家实收共X元…` and `#退款合计：M笔，商家实收退款共-Y元…`.
//! - **WeChat Pay** (`GET /v3/bill/tradebill`, `bill_type` `ALL`): a download URL and the SHA-1
//!   of the file (of the uncompressed file when `tar_type` is `GZIP`); a UTF-8 CSV whose every
//!   value starts with a backtick, one row per charge (`交易状态` `SUCCESS`) or refund
//!   (`REFUND`), then the summary header (`总交易单数,应结订单总金额,退款总金额,…`) and its row.
//!   The fund-flow bill (`GET /v3/bill/fundflowbill`) lists the account's movements instead;
//!   reconciliation reads the trade bill.
//!
//! [`read_alipay`] and [`read_wechat`] parse once and refuse what they cannot read exactly: an
//! amount with more than two decimals, a row without its numbers, a row count or a total that
//! differs from the file's own summary (a truncated download), a file over [`BILL_BYTES_MAX`].
//! The simulator writes the same formats from its ledger with the column names here.

use std::io::Read;

use thiserror::Error;
use time::macros::format_description;
use time::{Date, OffsetDateTime};

use crate::alipay::{BEIJING, parse_timestamp};
use crate::money::yuan_to_fen;

/// Largest bill file read, compressed or not: a day of a busy merchant is tens of megabytes.
pub const BILL_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Alipay's method that names a bill's download URL.
pub const ALIPAY_BILL_METHOD: &str = "alipay.data.dataservice.bill.downloadurl.query";
/// Alipay's sub-code for a bill that is not out.
pub const ALIPAY_SUB_BILL_NOT_EXIST: &str = "isp.bill_not_exist";
/// Alipay's `bill_type` for the trade bill.
pub const ALIPAY_BILL_TYPE_TRADE: &str = "trade";
/// Alipay's detail list opens and closes with these comment lines.
pub const ALIPAY_DETAIL_START: &str = "#-----------------------------------------业务明细列表----------------------------------------";
/// See [`ALIPAY_DETAIL_START`].
pub const ALIPAY_DETAIL_END: &str = "#-----------------------------------------业务明细列表结束------------------------------------";
/// Alipay's detail columns, in the order the channel writes them today.
pub const ALIPAY_DETAIL_COLUMNS: [&str; 25] = [
    "支付宝交易号",
    "商户订单号",
    "业务类型",
    "商品名称",
    "创建时间",
    "完成时间",
    "门店编号",
    "门店名称",
    "操作员",
    "终端号",
    "对方账户",
    "订单金额（元）",
    "商家实收（元）",
    "支付宝红包（元）",
    "集分宝（元）",
    "支付宝优惠（元）",
    "商家优惠（元）",
    "券核销金额（元）",
    "券名称",
    "商家红包消费金额（元）",
    "卡消费金额（元）",
    "退款批次号/请求号",
    "服务费（元）",
    "分润（元）",
    "备注",
];
/// `业务类型` of a charge.
pub const ALIPAY_KIND_CHARGE: &str = "交易";
/// `业务类型` of a refund.
pub const ALIPAY_KIND_REFUND: &str = "退款";

/// WeChat Pay's trade-bill columns (`bill_type` `ALL`).
pub const WECHAT_TRADE_COLUMNS: [&str; 27] = [
    "交易时间",
    "公众账号ID",
    "商户号",
    "特约商户号",
    "设备号",
    "微信订单号",
    "商户订单号",
    "用户标识",
    "交易类型",
    "交易状态",
    "付款银行",
    "货币种类",
    "应结订单金额",
    "代金券金额",
    "微信退款单号",
    "商户退款单号",
    "退款金额",
    "充值券退款金额",
    "退款类型",
    "退款状态",
    "商品名称",
    "商户数据包",
    "手续费",
    "费率",
    "订单金额",
    "申请退款金额",
    "费率备注",
];
/// WeChat Pay's trade-bill summary columns.
pub const WECHAT_TRADE_SUMMARY_COLUMNS: [&str; 7] = [
    "总交易单数",
    "应结订单总金额",
    "退款总金额",
    "充值券退款总金额",
    "手续费总金额",
    "订单总金额",
    "申请退款总金额",
];
/// WeChat Pay's fund-flow-bill columns.
pub const WECHAT_FUNDFLOW_COLUMNS: [&str; 11] = [
    "记账时间",
    "微信支付业务单号",
    "资金流水单号",
    "业务名称",
    "业务类型",
    "收支类型",
    "收支金额（元）",
    "账户结余（元）",
    "资金变更提交申请人",
    "备注",
    "业务凭证号",
];
/// WeChat Pay's fund-flow-bill summary columns.
pub const WECHAT_FUNDFLOW_SUMMARY_COLUMNS: [&str; 5] = [
    "资金流水总笔数",
    "收入笔数",
    "收入金额",
    "支出笔数",
    "支出金额",
];
/// `交易状态` of a charge row.
pub const WECHAT_STATE_CHARGE: &str = "SUCCESS";
/// `交易状态` of a refund row.
pub const WECHAT_STATE_REFUND: &str = "REFUND";
/// `退款状态` of a refund that moved money.
pub const WECHAT_REFUND_SUCCESS: &str = "SUCCESS";
/// The hash WeChat Pay names beside a download URL.
pub const WECHAT_HASH_TYPE: &str = "SHA1";

/// One day of bills, in Beijing time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BillDate(Date);

impl BillDate {
    /// Reads `yyyy-MM-dd`.
    pub fn parse(text: &str) -> Option<Self> {
        Date::parse(text, format_description!("[year]-[month]-[day]"))
            .ok()
            .map(Self)
    }

    /// The Beijing day that contains `unix_ms`.
    pub fn containing(unix_ms: i64) -> Option<Self> {
        OffsetDateTime::from_unix_timestamp(unix_ms.div_euclid(1000))
            .ok()
            .map(|moment| Self(moment.to_offset(BEIJING).date()))
    }

    /// The day before.
    pub fn previous(self) -> Option<Self> {
        self.0.previous_day().map(Self)
    }

    /// 00:00 of the day, Beijing time, in Unix milliseconds.
    pub fn start_ms(self) -> i64 {
        self.0
            .midnight()
            .assume_offset(BEIJING)
            .unix_timestamp()
            .saturating_mul(1000)
    }

    /// 00:00 of the next day: the day is `start_ms()..end_ms()`.
    pub fn end_ms(self) -> i64 {
        self.start_ms().saturating_add(24 * 60 * 60 * 1000)
    }

    /// `yyyyMMdd`, as file names write it.
    pub fn compact(self) -> String {
        self.to_string().replace('-', "")
    }
}

impl std::fmt::Display for BillDate {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self
            .0
            .format(format_description!("[year]-[month]-[day]"))
            .map_err(|_| std::fmt::Error)?;
        formatter.write_str(&text)
    }
}

/// What a bill line says moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BillEntryKind {
    /// The buyer paid the merchant.
    Charge,
    /// The merchant paid the buyer back.
    Refund,
}

/// One line of a bill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BillEntry {
    /// Charge or refund.
    pub kind: BillEntryKind,
    /// The merchant's payment number.
    pub out_trade_no: String,
    /// The channel's number of the trade.
    pub channel_trade_no: String,
    /// The merchant's refund number (refunds only).
    pub out_refund_no: Option<String>,
    /// What moved, in fen, always positive.
    pub amount_fen: i64,
    /// When it completed, if the line says (Unix ms).
    pub at_ms: Option<i64>,
}

/// A channel's bill of one day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bill {
    /// The day.
    pub date: BillDate,
    /// Every line, in the file's order.
    pub entries: Vec<BillEntry>,
}

impl Bill {
    /// The sum of the lines of `kind`, in fen (checked: `None` past `i64`).
    pub fn total_fen(&self, kind: BillEntryKind) -> Option<i64> {
        self.entries
            .iter()
            .filter(|entry| entry.kind == kind)
            .try_fold(0_i64, |sum, entry| sum.checked_add(entry.amount_fen))
    }
}

/// Why a bill file could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BillError {
    /// Not a file of this channel's format.
    #[error("malformed bill: {0}")]
    Malformed(String),
    /// The rows disagree with the file's own summary: a truncated or altered file.
    #[error("the bill's rows do not add up to its summary: {0}")]
    Summary(String),
    /// Larger than [`BILL_BYTES_MAX`].
    #[error("bill larger than {BILL_BYTES_MAX} bytes")]
    TooLarge,
}

fn malformed(what: impl Into<String>) -> BillError {
    BillError::Malformed(what.into())
}

/// Reads an amount of yuan with at most two decimals, signed, zero allowed, into fen.
pub fn signed_fen(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = magnitude.split_once('.').unwrap_or((magnitude, ""));
    let fen = if !whole.is_empty()
        && whole.bytes().all(|byte| byte == b'0')
        && fraction.bytes().all(|byte| byte == b'0')
        && fraction.len() <= 2
    {
        0
    } else {
        yuan_to_fen(magnitude).ok()?
    };
    Some(if negative { -fen } else { fen })
}

/// Reads `source` whole, refusing more than [`BILL_BYTES_MAX`] bytes.
pub fn read_bounded(source: impl Read) -> Result<Vec<u8>, BillError> {
    let mut bytes = Vec::new();
    source
        .take(BILL_BYTES_MAX.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| malformed(format!("unreadable: {error}")))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > BILL_BYTES_MAX {
        return Err(BillError::TooLarge);
    }
    Ok(bytes)
}

/// Rows of one CSV text, trimmed, short rows kept (the comment lines have one field).
fn csv_rows(text: &str) -> Result<Vec<Vec<String>>, BillError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    reader
        .records()
        .map(|record| {
            record
                .map(|record| record.iter().map(str::to_owned).collect())
                .map_err(|error| malformed(format!("CSV: {error}")))
        })
        .collect()
}

/// Where each named column is in `header`; every name must be there, once.
fn column_positions<const N: usize>(
    header: &[String],
    names: [&str; N],
) -> Result<[usize; N], BillError> {
    let mut positions = [0; N];
    for (slot, name) in positions.iter_mut().zip(names) {
        let mut found = header
            .iter()
            .enumerate()
            .filter(|(_, column)| column.as_str() == name);
        *slot = match (found.next(), found.next()) {
            (Some((position, _)), None) => position,
            (None, _) => return Err(malformed(format!("no column {name}"))),
            (Some(_), Some(_)) => return Err(malformed(format!("column {name} twice"))),
        };
    }
    Ok(positions)
}

fn field(row: &[String], position: usize) -> &str {
    row.get(position).map_or("", String::as_str)
}

/// Reads an Alipay trade bill: the zip the download URL serves.
pub fn read_alipay(zip_bytes: &[u8], date: BillDate) -> Result<Bill, BillError> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip_bytes))
        .map_err(|error| malformed(format!("zip: {error}")))?;
    // The detail is the file with the detail list; entry names are GBK without the zip's UTF-8
    // flag in the channel's files, so they are not relied on.
    for index in 0..archive.len() {
        let entry = archive
            .by_index(index)
            .map_err(|error| malformed(format!("zip: {error}")))?;
        let bytes = read_bounded(entry)?;
        let (text, _, had_errors) = encoding_rs::GBK.decode(&bytes);
        if had_errors {
            return Err(malformed("not GBK text"));
        }
        if text.lines().any(|line| line.trim() == ALIPAY_DETAIL_START) {
            return read_alipay_detail(&text, date);
        }
    }
    Err(malformed("no detail file in the archive"))
}

/// A `#…合计：N笔，…共X元…` line: its count and its first amount.
fn alipay_total(line: &str) -> Option<(usize, i64)> {
    let (_, rest) = line.split_once('：')?;
    let (count, rest) = rest.split_once('笔')?;
    let (_, rest) = rest.split_once('共')?;
    let (amount, _) = rest.split_once('元')?;
    Some((count.trim().parse().ok()?, signed_fen(amount)?))
}

/// Reads the text of an Alipay detail file.
pub fn read_alipay_detail(text: &str, date: BillDate) -> Result<Bill, BillError> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let start = lines
        .iter()
        .position(|line| *line == ALIPAY_DETAIL_START)
        .ok_or_else(|| malformed("no detail list"))?;
    let end = lines
        .iter()
        .position(|line| *line == ALIPAY_DETAIL_END)
        .filter(|end| *end > start)
        .ok_or_else(|| malformed("the detail list does not end"))?;
    let rows = csv_rows(&lines[start + 1..end].join("\n"))?;
    let (header, rows) = rows
        .split_first()
        .ok_or_else(|| malformed("no header row"))?;
    let [trade_no, out_trade_no, kind, finished, received, refund_no] = column_positions(
        header,
        [
            "支付宝交易号",
            "商户订单号",
            "业务类型",
            "完成时间",
            "商家实收（元）",
            "退款批次号/请求号",
        ],
    )?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in rows {
        let amount = signed_fen(field(row, received))
            .ok_or_else(|| malformed(format!("amount {:?}", field(row, received))))?;
        let (kind, amount_fen, out_refund_no) = match field(row, kind) {
            ALIPAY_KIND_CHARGE if amount > 0 => (BillEntryKind::Charge, amount, None),
            ALIPAY_KIND_REFUND if amount < 0 && !field(row, refund_no).is_empty() => (
                BillEntryKind::Refund,
                -amount,
                Some(field(row, refund_no).to_owned()),
            ),
            other => {
                return Err(malformed(format!(
                    "line of kind {other:?}, amount {amount}"
                )));
            }
        };
        let (channel_trade_no, out_trade_no) = (field(row, trade_no), field(row, out_trade_no));
        if channel_trade_no.is_empty() || out_trade_no.is_empty() {
            return Err(malformed("a line without its trade numbers"));
        }
        entries.push(BillEntry {
            kind,
            out_trade_no: out_trade_no.to_owned(),
            channel_trade_no: channel_trade_no.to_owned(),
            out_refund_no,
            amount_fen,
            at_ms: parse_timestamp(field(row, finished)),
        });
    }
    let bill = Bill { date, entries };
    // The totals after the list: `#交易合计` counts charges, `#退款合计` refunds (negative).
    let totals: Vec<(usize, i64)> = lines[end + 1..]
        .iter()
        .filter(|line| line.starts_with("#交易合计") || line.starts_with("#退款合计"))
        .map(|line| alipay_total(line).ok_or_else(|| malformed(format!("total {line:?}"))))
        .collect::<Result<_, _>>()?;
    let [charges, refunds] = totals[..] else {
        return Err(malformed("the totals after the list are missing"));
    };
    check_total(&bill, BillEntryKind::Charge, charges.0, charges.1)?;
    check_total(
        &bill,
        BillEntryKind::Refund,
        refunds.0,
        refunds.1.saturating_neg(),
    )?;
    Ok(bill)
}

fn check_total(
    bill: &Bill,
    kind: BillEntryKind,
    count: usize,
    total_fen: i64,
) -> Result<(), BillError> {
    let lines = bill
        .entries
        .iter()
        .filter(|entry| entry.kind == kind)
        .count();
    let sum = bill.total_fen(kind);
    if lines != count || sum != Some(total_fen) {
        return Err(BillError::Summary(format!(
            "{kind:?}: {lines} lines of {sum:?} fen, the summary says {count} of {total_fen}"
        )));
    }
    Ok(())
}

/// A WeChat Pay value without its leading backtick.
fn wechat_value(value: &str) -> &str {
    value.strip_prefix('`').unwrap_or(value).trim()
}

/// Reads a WeChat Pay trade bill (`bill_type` `ALL`), uncompressed.
pub fn read_wechat(text: &str, date: BillDate) -> Result<Bill, BillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rows: Vec<Vec<String>> = csv_rows(text)?
        .into_iter()
        .filter(|row| row.iter().any(|value| !value.is_empty()))
        .map(|row| {
            row.iter()
                .map(|value| wechat_value(value).to_owned())
                .collect()
        })
        .collect();
    let (header, rest) = rows.split_first().ok_or_else(|| malformed("empty file"))?;
    let summary_at = rest
        .iter()
        .position(|row| row.first().is_some_and(|first| first == "总交易单数"))
        .ok_or_else(|| malformed("no summary"))?;
    let (detail, summary) = rest.split_at(summary_at);
    let [
        time,
        transaction,
        out_trade_no,
        state,
        settled,
        out_refund,
        refunded,
        refund_state,
    ] = column_positions(
        header,
        [
            "交易时间",
            "微信订单号",
            "商户订单号",
            "交易状态",
            "应结订单金额",
            "商户退款单号",
            "退款金额",
            "退款状态",
        ],
    )?;
    let mut entries = Vec::with_capacity(detail.len());
    for row in detail {
        let amount = |position| {
            signed_fen(field(row, position))
                .filter(|fen| *fen >= 0)
                .ok_or_else(|| malformed(format!("amount {:?}", field(row, position))))
        };
        let (kind, amount_fen, out_refund_no) = match field(row, state) {
            WECHAT_STATE_CHARGE => (BillEntryKind::Charge, amount(settled)?, None),
            WECHAT_STATE_REFUND if field(row, refund_state) == WECHAT_REFUND_SUCCESS => (
                BillEntryKind::Refund,
                amount(refunded)?,
                Some(field(row, out_refund).to_owned()),
            ),
            // A refund that has not moved money (PROCESSING, ABNORMAL) is not a movement yet.
            WECHAT_STATE_REFUND => continue,
            other => return Err(malformed(format!("line of state {other:?}"))),
        };
        let (channel_trade_no, out_trade_no) = (field(row, transaction), field(row, out_trade_no));
        if channel_trade_no.is_empty()
            || out_trade_no.is_empty()
            || amount_fen == 0
            || out_refund_no.as_ref().is_some_and(String::is_empty)
        {
            return Err(malformed("a line without its numbers or amount"));
        }
        entries.push(BillEntry {
            kind,
            out_trade_no: out_trade_no.to_owned(),
            channel_trade_no: channel_trade_no.to_owned(),
            out_refund_no,
            amount_fen,
            at_ms: parse_timestamp(field(row, time)),
        });
    }
    let bill = Bill { date, entries };
    let [summary_header, values] = summary else {
        return Err(malformed("the summary is not one header and one row"));
    };
    let [count, charged, refunded] = column_positions(
        summary_header,
        ["总交易单数", "应结订单总金额", "退款总金额"],
    )?;
    let number = |position| {
        signed_fen(field(values, position))
            .ok_or_else(|| malformed(format!("summary amount {:?}", field(values, position))))
    };
    let rows: usize = field(values, count)
        .parse()
        .map_err(|_| malformed("summary count"))?;
    if rows != detail.len() {
        return Err(BillError::Summary(format!(
            "{} rows, the summary says {rows}",
            detail.len()
        )));
    }
    let charges = bill
        .entries
        .iter()
        .filter(|entry| entry.kind == BillEntryKind::Charge)
        .count();
    check_total(&bill, BillEntryKind::Charge, charges, number(charged)?)?;
    let refunds = bill.entries.len() - charges;
    check_total(&bill, BillEntryKind::Refund, refunds, number(refunded)?)?;
    Ok(bill)
}

/// The SHA-1 WeChat Pay names for a bill, lower-case hex.
pub fn wechat_hash(bytes: &[u8]) -> String {
    use sha1::Digest;
    hex::encode(sha1::Sha1::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_exactly_with_their_sign() {
        for (text, fen) in [
            ("0.00", Some(0)),
            ("0", Some(0)),
            ("12.34", Some(1234)),
            ("-12.34", Some(-1234)),
            ("1.5", Some(150)),
            ("1.234", None),
            ("", None),
            ("-", None),
            ("1e3", None),
        ] {
            assert_eq!(signed_fen(text), fen, "{text}");
        }
    }

    #[test]
    fn a_bill_day_runs_from_beijing_midnight() {
        let date = BillDate::parse("2026-12-03").expect("date");
        assert_eq!(date.to_string(), "2026-12-03");
        assert_eq!(date.compact(), "20261203");
        // 2026-12-02T16:00:00Z is 2026-12-03 00:00 in Beijing.
        assert_eq!(date.start_ms(), 1_796_227_200_000);
        assert_eq!(BillDate::containing(date.start_ms()), Some(date));
        assert_eq!(BillDate::containing(date.start_ms() - 1), date.previous());
        assert_eq!(BillDate::containing(date.end_ms() - 1), Some(date));
        assert!(BillDate::parse("2026-13-01").is_none());
    }

    fn wechat_bill(rows: &[&str], summary: &str) -> String {
        let mut text = WECHAT_TRADE_COLUMNS.join(",");
        for row in rows {
            text.push('\n');
            text.push_str(row);
        }
        text.push('\n');
        text.push_str(&WECHAT_TRADE_SUMMARY_COLUMNS.join(","));
        text.push('\n');
        text.push_str(summary);
        text.push('\n');
        text
    }

    const CHARGE: &str = "`2026-12-03 10:00:00,`wx1,`1230000109,`0,`,`4200001,`P1,`o1,`NATIVE,`SUCCESS,`OTHERS,`CNY,`3.21,`0.00,`0,`0,`0.00,`0.00,`,`,`order,`,`0.02000,`0.60%,`3.21,`0.00,`";
    const REFUND: &str = "`2026-12-03 11:00:00,`wx1,`1230000109,`0,`,`4200001,`P1,`o1,`NATIVE,`REFUND,`OTHERS,`CNY,`0.00,`0.00,`5030001,`R1,`1.00,`0.00,`ORIGINAL,`SUCCESS,`order,`,`-0.01000,`0.60%,`0.00,`1.00,`";

    #[test]
    fn a_wechat_bill_reads_charges_and_refunds_and_must_add_up() {
        let date = BillDate::parse("2026-12-03").expect("date");
        let text = wechat_bill(
            &[CHARGE, REFUND],
            "`2,`3.21,`1.00,`0.00,`0.01000,`3.21,`1.00",
        );
        let bill = read_wechat(&text, date).expect("bill");
        assert_eq!(bill.entries.len(), 2);
        assert_eq!(bill.entries[0].kind, BillEntryKind::Charge);
        assert_eq!(bill.entries[0].amount_fen, 321);
        assert_eq!(bill.entries[1].out_refund_no.as_deref(), Some("R1"));
        assert_eq!(bill.total_fen(BillEntryKind::Refund), Some(100));
        // A row lost on the way: the summary no longer agrees.
        let truncated = wechat_bill(&[CHARGE], "`2,`3.21,`1.00,`0.00,`0.01000,`3.21,`1.00");
        assert!(matches!(
            read_wechat(&truncated, date),
            Err(BillError::Summary(_))
        ));
        let altered = wechat_bill(&[CHARGE], "`1,`3.22,`0.00,`0.00,`0.01000,`3.22,`0.00");
        assert!(matches!(
            read_wechat(&altered, date),
            Err(BillError::Summary(_))
        ));
        assert!(read_wechat("交易时间\n", date).is_err());
    }
}
