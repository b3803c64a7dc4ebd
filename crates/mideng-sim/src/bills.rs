//! The daily bills, written from the ledger as the channels write theirs. Pure rules, no I/O.
//!
//! A day's bill lists every ledger entry of the channel whose time falls in that Beijing day:
//! charges, and refunds that moved money. The real channels publish a day's bill the next
//! morning — Alipay from 09:00, WeChat Pay from 10:00 — and so does the simulator, unless it
//! was started with bills published as the day runs (`--bills-as-the-day-runs`), for tests and
//! storms that reconcile the day they made. Formats and column names are those of
//! [`mideng_channel::bill`], which reads them back.
//!
//! A bill asked for is rendered once and kept under a random token for
//! [`DOWNLOAD_VALID_MS`] of channel time, at most [`FILES_KEPT_MAX`] at a time: the URL the
//! answer names serves exactly the file whose hash the answer gave.

use std::collections::VecDeque;
use std::io::Write;

use mideng_channel::ChannelKind;
use mideng_channel::alipay::format_timestamp;
use mideng_channel::bill::{
    ALIPAY_DETAIL_COLUMNS, ALIPAY_DETAIL_END, ALIPAY_DETAIL_START, ALIPAY_KIND_CHARGE,
    ALIPAY_KIND_REFUND, BillDate, WECHAT_FUNDFLOW_COLUMNS, WECHAT_FUNDFLOW_SUMMARY_COLUMNS,
    WECHAT_REFUND_SUCCESS, WECHAT_STATE_CHARGE, WECHAT_STATE_REFUND, WECHAT_TRADE_COLUMNS,
    WECHAT_TRADE_SUMMARY_COLUMNS,
};
use mideng_channel::keys::random_characters;

use crate::notify::payload::{ALIPAY_BUYER_LOGON_ID, WECHAT_PAYER_OPENID};
use crate::trades::{LedgerEntry, LedgerKind, TradeBook};

/// Alipay publishes a day's bill this long after the day ends.
const ALIPAY_READY_AFTER_MS: i64 = 9 * 60 * 60 * 1000;
/// WeChat Pay publishes a day's bill this long after the day ends.
const WECHAT_READY_AFTER_MS: i64 = 10 * 60 * 60 * 1000;
/// How long a download URL serves its file, channel time (the channels say 30 seconds; a
/// little more here, so that a slow test machine still gets its file).
pub(crate) const DOWNLOAD_VALID_MS: i64 = 5 * 60 * 1000;
/// Most rendered files kept at once; the oldest goes first.
pub(crate) const FILES_KEPT_MAX: usize = 8;
/// Characters of a download token.
const TOKEN_CHARS: usize = 32;

/// Why a day has no bill to serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoBill {
    /// The day has not begun.
    Future,
    /// The day is not over long enough: the channel is still making it.
    NotYet,
}

/// Whether the bill of `date` on `channel` is out at `now_ms`.
pub(crate) fn published(
    channel: ChannelKind,
    date: BillDate,
    now_ms: i64,
    as_the_day_runs: bool,
) -> Result<(), NoBill> {
    if now_ms < date.start_ms() {
        return Err(NoBill::Future);
    }
    let ready_after = match channel {
        ChannelKind::Alipay => ALIPAY_READY_AFTER_MS,
        ChannelKind::Wechat => WECHAT_READY_AFTER_MS,
    };
    if as_the_day_runs || now_ms >= date.end_ms().saturating_add(ready_after) {
        Ok(())
    } else {
        Err(NoBill::NotYet)
    }
}

/// One line of a bill: a ledger entry with what the bill shows of its trade.
#[derive(Clone, Debug)]
pub(crate) struct Line {
    pub(crate) entry: LedgerEntry,
    pub(crate) subject: String,
    pub(crate) trade_amount_fen: i64,
    pub(crate) created_at_ms: i64,
}

/// The lines of `channel`'s bill of `date`, in ledger order.
pub(crate) fn lines(trades: &TradeBook, channel: ChannelKind, date: BillDate) -> Vec<Line> {
    let (start, end) = (date.start_ms(), date.end_ms());
    trades
        .ledger()
        .iter()
        .filter(|entry| entry.channel == channel && (start..end).contains(&entry.at_ms))
        .filter_map(|entry| {
            let trade = trades.find_trade(&entry.out_trade_no)?;
            Some(Line {
                entry: entry.clone(),
                subject: trade.terms.subject.clone(),
                trade_amount_fen: trade.terms.amount_fen,
                created_at_ms: trade.created_at_ms,
            })
        })
        .collect()
}

/// What `channel`'s account held before `date`: every charge less every refund so far.
pub(crate) fn balance_before(trades: &TradeBook, channel: ChannelKind, date: BillDate) -> i64 {
    trades
        .ledger()
        .iter()
        .filter(|entry| entry.channel == channel && entry.at_ms < date.start_ms())
        .fold(0_i64, |balance, entry| match entry.kind {
            LedgerKind::Charge => balance.saturating_add(entry.amount_fen),
            LedgerKind::Refund => balance.saturating_sub(entry.amount_fen),
        })
}

/// Fen as signed yuan with two decimals, zero included (`-100` → `"-1.00"`).
pub(crate) fn yuan(fen: i64) -> String {
    let sign = if fen < 0 { "-" } else { "" };
    let magnitude = fen.unsigned_abs();
    format!("{sign}{}.{:02}", magnitude / 100, magnitude % 100)
}

/// `2026年12月03日 00:00:00`, the Alipay bill's header time.
fn alipay_header_time(unix_ms: i64) -> String {
    let text = format_timestamp(unix_ms);
    match (
        text.get(0..4),
        text.get(5..7),
        text.get(8..10),
        text.get(11..),
    ) {
        (Some(year), Some(month), Some(day), Some(clock)) => {
            format!("{year}年{month}月{day}日 {clock}")
        }
        _ => text,
    }
}

/// Writes CSV rows into text; the writer quotes a value that needs it.
fn csv_text(rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .flexible(true)
        .from_writer(Vec::new());
    for row in rows {
        // Writing into memory cannot fail.
        let _ = writer.write_record(&row);
    }
    let bytes = writer.into_inner().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

/// The Alipay detail file's text (before GBK encoding).
pub(crate) fn alipay_detail(
    partner_id: &str,
    date: BillDate,
    lines: &[Line],
    exported_at_ms: i64,
) -> String {
    let mut text = String::new();
    text.push_str("#支付宝业务明细查询\r\n");
    text.push_str(&format!("#账号：[{partner_id}]\r\n"));
    text.push_str(&format!(
        "#起始日期：[{}]   终止日期：[{}]\r\n",
        alipay_header_time(date.start_ms()),
        alipay_header_time(date.end_ms())
    ));
    text.push_str(ALIPAY_DETAIL_START);
    text.push_str("\r\n");
    let header = ALIPAY_DETAIL_COLUMNS.iter().map(|name| (*name).to_owned());
    let rows = lines.iter().map(|line| {
        let entry = &line.entry;
        let (kind, received, refund_no) = match entry.kind {
            LedgerKind::Charge => (ALIPAY_KIND_CHARGE, entry.amount_fen, String::new()),
            LedgerKind::Refund => (
                ALIPAY_KIND_REFUND,
                entry.amount_fen.saturating_neg(),
                entry.out_refund_no.clone().unwrap_or_default(),
            ),
        };
        let zero = || "0.00".to_owned();
        vec![
            // The channel pads the numbers with a tab, so that spreadsheets keep them as text.
            format!(
                "{}\t",
                entry.channel_trade_id.as_deref().unwrap_or_default()
            ),
            format!("{}\t", entry.out_trade_no),
            kind.to_owned(),
            line.subject.clone(),
            format_timestamp(line.created_at_ms),
            format_timestamp(entry.at_ms),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            ALIPAY_BUYER_LOGON_ID.to_owned(),
            yuan(line.trade_amount_fen),
            yuan(received),
            zero(),
            zero(),
            zero(),
            zero(),
            zero(),
            String::new(),
            zero(),
            zero(),
            refund_no,
            zero(),
            zero(),
            String::new(),
        ]
    });
    text.push_str(&csv_text(std::iter::once(header.collect()).chain(rows)));
    text.push_str(ALIPAY_DETAIL_END);
    text.push_str("\r\n");
    let (charges, charged, refunds, refunded) = alipay_sums(lines);
    text.push_str(&format!(
        "#交易合计：{charges}笔，商家实收共{}元，商家优惠共0.00元\r\n",
        yuan(charged)
    ));
    text.push_str(&format!(
        "#退款合计：{refunds}笔，商家实收退款共{}元，商家优惠退款共0.00元\r\n",
        yuan(refunded.saturating_neg())
    ));
    text.push_str(&format!(
        "#导出时间：[{}]\r\n",
        alipay_header_time(exported_at_ms)
    ));
    text
}

fn alipay_sums(lines: &[Line]) -> (usize, i64, usize, i64) {
    lines
        .iter()
        .fold((0, 0, 0, 0), |(c, charged, r, refunded), line| {
            match line.entry.kind {
                LedgerKind::Charge => (
                    c + 1,
                    charged.saturating_add(line.entry.amount_fen),
                    r,
                    refunded,
                ),
                LedgerKind::Refund => (
                    c,
                    charged,
                    r + 1,
                    refunded.saturating_add(line.entry.amount_fen),
                ),
            }
        })
}

/// The Alipay summary file's text (before GBK encoding).
pub(crate) fn alipay_summary(
    partner_id: &str,
    date: BillDate,
    lines: &[Line],
    exported_at_ms: i64,
) -> String {
    let (charges, charged, refunds, refunded) = alipay_sums(lines);
    let net = charged.saturating_sub(refunded);
    format!(
        "#支付宝业务汇总查询\r\n#账号：[{partner_id}]\r\n#起始日期：[{}]   终止日期：[{}]\r\n\
         #-----------------------------------------业务汇总列表----------------------------------------\r\n\
         门店编号,门店名称,交易订单总笔数,退款订单总笔数,订单金额（元）,商家实收（元）,支付宝优惠（元）,商家优惠（元）,卡消费金额（元）,服务费（元）,分润（元）,实收净额（元）\r\n\
         合计,,{charges},{refunds},{},{},0.00,0.00,0.00,0.00,0.00,{}\r\n\
         #-----------------------------------------业务汇总列表结束------------------------------------\r\n\
         #导出时间：[{}]\r\n",
        alipay_header_time(date.start_ms()),
        alipay_header_time(date.end_ms()),
        yuan(charged),
        yuan(net),
        yuan(net),
        alipay_header_time(exported_at_ms)
    )
}

/// The zip Alipay's download URL serves: the detail and its summary, GBK-encoded.
pub(crate) fn alipay_zip(
    partner_id: &str,
    date: BillDate,
    lines: &[Line],
    exported_at_ms: i64,
) -> Vec<u8> {
    let stem = format!("{partner_id}_{}", date.compact());
    let files = [
        (
            format!("{stem}_业务明细.csv"),
            alipay_detail(partner_id, date, lines, exported_at_ms),
        ),
        (
            format!("{stem}_业务明细(汇总).csv"),
            alipay_summary(partner_id, date, lines, exported_at_ms),
        ),
    ];
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, text) in files {
        let (bytes, _, _) = encoding_rs::GBK.encode(&text);
        // Writing into memory fails only on a bug; an empty archive then fails the reader.
        if archive.start_file(name, options).is_err() || archive.write_all(&bytes).is_err() {
            return Vec::new();
        }
    }
    archive
        .finish()
        .map(std::io::Cursor::into_inner)
        .unwrap_or_default()
}

/// Which rows of the WeChat Pay trade bill (`bill_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WechatBillType {
    /// Charges and refunds.
    All,
    /// Charges only.
    Success,
    /// Refunds only.
    Refund,
}

impl WechatBillType {
    pub(crate) fn parse(text: Option<&str>) -> Option<Self> {
        match text {
            None | Some("ALL") => Some(Self::All),
            Some("SUCCESS") => Some(Self::Success),
            Some("REFUND") => Some(Self::Refund),
            Some(_) => None,
        }
    }

    fn takes(self, kind: LedgerKind) -> bool {
        matches!(
            (self, kind),
            (Self::All, _)
                | (Self::Success, LedgerKind::Charge)
                | (Self::Refund, LedgerKind::Refund)
        )
    }
}

/// A WeChat Pay value as the bill writes it: behind a backtick.
fn tick(value: impl std::fmt::Display) -> String {
    format!("`{value}")
}

/// The WeChat Pay trade bill's text.
pub(crate) fn wechat_trade(
    appid: &str,
    mchid: &str,
    lines: &[Line],
    bill_type: WechatBillType,
) -> String {
    let lines: Vec<&Line> = lines
        .iter()
        .filter(|line| bill_type.takes(line.entry.kind))
        .collect();
    let header = WECHAT_TRADE_COLUMNS.iter().map(|name| (*name).to_owned());
    let (mut charged, mut refunded) = (0_i64, 0_i64);
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|line| {
            let entry = &line.entry;
            let charge = entry.kind == LedgerKind::Charge;
            if charge {
                charged = charged.saturating_add(entry.amount_fen);
            } else {
                refunded = refunded.saturating_add(entry.amount_fen);
            }
            let (settled, refund_id, out_refund_no, refund, refund_type, refund_state) = if charge {
                (entry.amount_fen, "0".to_owned(), "0".to_owned(), 0, "", "")
            } else {
                (
                    0,
                    entry.refund_id.clone().unwrap_or_default(),
                    entry.out_refund_no.clone().unwrap_or_default(),
                    entry.amount_fen,
                    "ORIGINAL",
                    WECHAT_REFUND_SUCCESS,
                )
            };
            vec![
                tick(format_timestamp(entry.at_ms)),
                tick(appid),
                tick(mchid),
                tick(0),
                tick(""),
                tick(entry.channel_trade_id.as_deref().unwrap_or_default()),
                tick(&entry.out_trade_no),
                tick(WECHAT_PAYER_OPENID),
                tick("NATIVE"),
                tick(if charge {
                    WECHAT_STATE_CHARGE
                } else {
                    WECHAT_STATE_REFUND
                }),
                tick("OTHERS"),
                tick("CNY"),
                tick(yuan(settled)),
                tick("0.00"),
                tick(refund_id),
                tick(out_refund_no),
                tick(yuan(refund)),
                tick("0.00"),
                tick(refund_type),
                tick(refund_state),
                tick(&line.subject),
                tick(""),
                tick("0.00000"),
                tick("0.00%"),
                tick(yuan(settled)),
                tick(yuan(refund)),
                tick(""),
            ]
        })
        .collect();
    let count = rows.len();
    let summary_header = WECHAT_TRADE_SUMMARY_COLUMNS
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let summary = vec![
        tick(count),
        tick(yuan(charged)),
        tick(yuan(refunded)),
        tick("0.00"),
        tick("0.00000"),
        tick(yuan(charged)),
        tick(yuan(refunded)),
    ];
    csv_text(
        std::iter::once(header.collect())
            .chain(rows)
            .chain([summary_header, summary]),
    )
}

/// The WeChat Pay fund-flow bill's text (the basic account): every movement with the balance
/// after it.
pub(crate) fn wechat_fundflow(lines: &[Line], opening_balance_fen: i64) -> String {
    let header = WECHAT_FUNDFLOW_COLUMNS
        .iter()
        .map(|name| (*name).to_owned());
    let mut balance = opening_balance_fen;
    let (mut income, mut income_fen, mut expense, mut expense_fen) = (0, 0_i64, 0, 0_i64);
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|line| {
            let entry = &line.entry;
            let (name, direction, business_no, voucher) = match entry.kind {
                LedgerKind::Charge => {
                    balance = balance.saturating_add(entry.amount_fen);
                    income += 1;
                    income_fen = income_fen.saturating_add(entry.amount_fen);
                    (
                        "交易",
                        "收入",
                        entry.channel_trade_id.clone().unwrap_or_default(),
                        entry.out_trade_no.clone(),
                    )
                }
                LedgerKind::Refund => {
                    balance = balance.saturating_sub(entry.amount_fen);
                    expense += 1;
                    expense_fen = expense_fen.saturating_add(entry.amount_fen);
                    (
                        "退款",
                        "支出",
                        entry.refund_id.clone().unwrap_or_default(),
                        entry.out_refund_no.clone().unwrap_or_default(),
                    )
                }
            };
            vec![
                tick(format_timestamp(entry.at_ms)),
                tick(business_no),
                tick(format!("{:0>28}", entry.sequence)),
                tick(name),
                tick(name),
                tick(direction),
                tick(yuan(entry.amount_fen)),
                tick(yuan(balance)),
                tick("system"),
                tick(""),
                tick(voucher),
            ]
        })
        .collect();
    let summary_header = WECHAT_FUNDFLOW_SUMMARY_COLUMNS
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let summary = vec![
        tick(rows.len()),
        tick(income),
        tick(yuan(income_fen)),
        tick(expense),
        tick(yuan(expense_fen)),
    ];
    csv_text(
        std::iter::once(header.collect())
            .chain(rows)
            .chain([summary_header, summary]),
    )
}

/// Gzip, as WeChat Pay serves a bill asked for with `tar_type` `GZIP`.
pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    if encoder.write_all(bytes).is_err() {
        return Vec::new();
    }
    encoder.finish().unwrap_or_default()
}

/// Rendered bills waiting for their download.
#[derive(Debug, Default)]
pub(crate) struct BillFiles {
    files: VecDeque<BillFile>,
}

#[derive(Debug)]
struct BillFile {
    token: String,
    channel: ChannelKind,
    expires_at_ms: i64,
    bytes: Vec<u8>,
}

impl BillFiles {
    /// Keeps `bytes` for a download from `channel`; the token that names it.
    pub(crate) fn keep(&mut self, channel: ChannelKind, bytes: Vec<u8>, now_ms: i64) -> String {
        self.files.retain(|file| file.expires_at_ms > now_ms);
        while self.files.len() >= FILES_KEPT_MAX {
            self.files.pop_front();
        }
        let token = random_characters(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            TOKEN_CHARS,
        );
        self.files.push_back(BillFile {
            token: token.clone(),
            channel,
            expires_at_ms: now_ms.saturating_add(DOWNLOAD_VALID_MS),
            bytes,
        });
        token
    }

    /// The file `token` names on `channel`, while its URL is valid.
    pub(crate) fn get(&self, channel: ChannelKind, token: &str, now_ms: i64) -> Option<Vec<u8>> {
        self.files
            .iter()
            .find(|file| file.token == token && file.channel == channel)
            .filter(|file| file.expires_at_ms > now_ms)
            .map(|file| file.bytes.clone())
    }
}

#[cfg(test)]
mod tests {
    use mideng_channel::bill::{BillEntryKind, read_alipay, read_wechat};

    use super::*;

    fn line(kind: LedgerKind, fen: i64, refund: Option<&str>, at_ms: i64) -> Line {
        Line {
            entry: LedgerEntry {
                sequence: 1,
                at_ms,
                kind,
                channel: ChannelKind::Alipay,
                out_trade_no: "P1".to_owned(),
                channel_trade_id: Some("2026120322001400001".to_owned()),
                amount_fen: fen,
                out_refund_no: refund.map(str::to_owned),
                refund_id: refund.map(|number| format!("id-{number}")),
            },
            subject: "order, \"quoted\" 中文".to_owned(),
            trade_amount_fen: 321,
            created_at_ms: at_ms,
        }
    }

    #[test]
    fn the_bills_written_read_back_to_the_ledger() {
        let date = BillDate::parse("2026-12-03").expect("date");
        let at = date.start_ms() + 3_600_000;
        let lines = [
            line(LedgerKind::Charge, 321, None, at),
            line(LedgerKind::Refund, 100, Some("R1"), at + 1000),
        ];
        let zip = alipay_zip("2088000000000088", date, &lines, at);
        let bill = read_alipay(&zip, date).expect("alipay bill");
        assert_eq!(bill.entries.len(), 2);
        assert_eq!(bill.entries[0].channel_trade_no, "2026120322001400001");
        assert_eq!(bill.entries[0].at_ms, Some(at));
        assert_eq!(bill.entries[1].kind, BillEntryKind::Refund);
        assert_eq!(bill.entries[1].amount_fen, 100);
        assert_eq!(bill.entries[1].out_refund_no.as_deref(), Some("R1"));

        let text = wechat_trade("wx1", "1230000109", &lines, WechatBillType::All);
        let bill = read_wechat(&text, date).expect("wechat bill");
        assert_eq!(bill.total_fen(BillEntryKind::Charge), Some(321));
        assert_eq!(bill.total_fen(BillEntryKind::Refund), Some(100));
        let charges = wechat_trade("wx1", "1230000109", &lines, WechatBillType::Success);
        assert_eq!(read_wechat(&charges, date).expect("bill").entries.len(), 1);
    }

    #[test]
    fn a_day_is_published_the_next_morning_unless_asked_otherwise() {
        let date = BillDate::parse("2026-12-03").expect("date");
        let during = date.start_ms() + 1000;
        assert_eq!(
            published(ChannelKind::Alipay, date, during, false),
            Err(NoBill::NotYet)
        );
        assert_eq!(published(ChannelKind::Alipay, date, during, true), Ok(()));
        let nine = date.end_ms() + ALIPAY_READY_AFTER_MS;
        assert_eq!(published(ChannelKind::Alipay, date, nine, false), Ok(()));
        assert_eq!(
            published(ChannelKind::Wechat, date, nine, false),
            Err(NoBill::NotYet)
        );
        assert_eq!(
            published(ChannelKind::Wechat, date, date.start_ms() - 1, true),
            Err(NoBill::Future)
        );
    }

    #[test]
    fn a_download_serves_its_file_on_its_channel_until_it_expires() {
        let mut files = BillFiles::default();
        let token = files.keep(ChannelKind::Wechat, b"bill".to_vec(), 0);
        assert_eq!(
            files.get(ChannelKind::Wechat, &token, 1).as_deref(),
            Some(&b"bill"[..])
        );
        assert!(files.get(ChannelKind::Alipay, &token, 1).is_none());
        assert!(
            files
                .get(ChannelKind::Wechat, &token, DOWNLOAD_VALID_MS)
                .is_none()
        );
        for _ in 0..FILES_KEPT_MAX {
            files.keep(ChannelKind::Wechat, Vec::new(), 2);
        }
        assert!(
            files.get(ChannelKind::Wechat, &token, 3).is_none(),
            "evicted"
        );
    }
}
