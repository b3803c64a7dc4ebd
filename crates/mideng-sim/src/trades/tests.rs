use super::*;

const NOW_MS: i64 = 1_796_011_200_000;

fn new_trade(channel: ChannelKind, out_trade_no: &str, amount_fen: i64) -> NewTrade {
    NewTrade {
        channel,
        out_trade_no: out_trade_no.to_owned(),
        terms: CreateTerms {
            amount_fen,
            subject: "order".to_owned(),
            expiry_text: String::new(),
        },
        notify_url: Some("http://127.0.0.1:1/notify".to_owned()),
        expiry: Expiry::AfterStart(15 * 60 * 1000),
    }
}

#[test]
fn a_repeat_with_the_same_terms_is_the_same_trade_and_other_terms_are_refused() {
    let mut book = TradeBook::default();
    let trade = new_trade(ChannelKind::Alipay, "P1", 100);
    assert_eq!(book.create_trade(trade.clone(), NOW_MS), Ok(Created::New));
    assert_eq!(
        book.create_trade(trade.clone(), NOW_MS),
        Ok(Created::Repeated)
    );
    assert_eq!(
        book.create_trade(new_trade(ChannelKind::Alipay, "P1", 101), NOW_MS),
        Err(CreateRefusal::OtherTerms)
    );
    assert_eq!(
        book.create_trade(new_trade(ChannelKind::Wechat, "P1", 100), NOW_MS),
        Err(CreateRefusal::OtherTerms)
    );
    assert!(book.pay_trade("P1", NOW_MS).is_ok());
    assert_eq!(
        book.create_trade(trade, NOW_MS),
        Err(CreateRefusal::AlreadyPaid)
    );
}

#[test]
fn the_alipay_trade_number_and_timeout_start_at_the_scan() {
    let mut book = TradeBook::default();
    assert!(
        book.create_trade(new_trade(ChannelKind::Alipay, "P1", 100), NOW_MS)
            .is_ok()
    );
    let precreated = book.find_trade("P1").expect("trade");
    assert!(!precreated.exists_at_channel());
    assert_eq!(precreated.expires_at_ms, None);
    assert!(book.expire_due_trades(NOW_MS + 86_400_000).is_empty());
    let scanned_at = NOW_MS + 3_600_000;
    assert_eq!(book.scan_trade("P1", scanned_at), Ok(Applied::Changed));
    let trade = book.find_trade("P1").expect("trade");
    let trade_no = trade.channel_trade_id.clone().expect("trade number");
    assert_eq!(trade_no.len(), 28);
    assert_eq!(trade.expires_at_ms, Some(scanned_at + 900_000));
    assert!(book.find_trade_by_channel_trade_id(&trade_no).is_some());
    assert!(book.expire_due_trades(scanned_at + 899_999).is_empty());
    let events = book.expire_due_trades(scanned_at + 900_000);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, TradeEventKind::Closed);
    assert_eq!(
        book.find_trade("P1").map(|trade| trade.status),
        Some(TradeStatus::Closed)
    );
}

#[test]
fn pay_and_close_exclude_each_other_and_the_ledger_charges_once() {
    let mut book = TradeBook::default();
    assert!(
        book.create_trade(new_trade(ChannelKind::Wechat, "W1", 500), NOW_MS)
            .is_ok()
    );
    assert!(matches!(
        book.pay_trade("W1", NOW_MS),
        Ok((Applied::Changed, Some(_)))
    ));
    assert_eq!(
        book.pay_trade("W1", NOW_MS),
        Ok((Applied::AlreadyDone, None))
    );
    assert_eq!(
        book.close_trade("W1", CloseCause::Merchant, NOW_MS),
        Err(Refusal::Paid)
    );
    assert!(matches!(
        book.refund_trade("W1", NOW_MS),
        Ok((Applied::Changed, Some(_)))
    ));
    let kinds: Vec<LedgerKind> = book.ledger().iter().map(|entry| entry.kind).collect();
    assert_eq!(kinds, [LedgerKind::Charge, LedgerKind::Refund]);

    assert!(
        book.create_trade(new_trade(ChannelKind::Wechat, "W2", 500), NOW_MS)
            .is_ok()
    );
    assert!(book.close_trade("W2", CloseCause::Merchant, NOW_MS).is_ok());
    assert_eq!(book.pay_trade("W2", NOW_MS), Err(Refusal::Closed));
    assert_eq!(book.ledger().len(), 2);
}

fn refund(
    out_trade_no: &str,
    out_refund_no: &str,
    amount_fen: i64,
    settlement: Settlement,
) -> RefundRequest {
    RefundRequest {
        out_trade_no: out_trade_no.to_owned(),
        out_refund_no: out_refund_no.to_owned(),
        amount_fen,
        reason: String::new(),
        notify_url: None,
        settlement,
    }
}

fn paid_trade(book: &mut TradeBook, channel: ChannelKind, out_trade_no: &str, fen: i64) {
    assert!(
        book.create_trade(new_trade(channel, out_trade_no, fen), NOW_MS)
            .is_ok()
    );
    assert!(book.pay_trade(out_trade_no, NOW_MS).is_ok());
}

/// The book's invariants, after any sequence of operations: no trade's refunds that are
/// not closed exceed its amount, and the ledger's refunds are exactly the successful ones.
fn assert_refund_invariants(book: &TradeBook) {
    let mut successful_fen = 0_i64;
    for trade in book.all_trades() {
        assert!(trade.refundable_fen() >= 0, "{}", trade.out_trade_no);
        assert_eq!(
            trade.status == TradeStatus::Refunded,
            trade.refunded_fen() == trade.terms.amount_fen,
            "{}",
            trade.out_trade_no
        );
        successful_fen += trade.refunded_fen();
    }
    let ledgered_fen: i64 = book
        .ledger()
        .iter()
        .filter(|entry| entry.kind == LedgerKind::Refund)
        .map(|entry| entry.amount_fen)
        .sum();
    assert_eq!(ledgered_fen, successful_fen);
}

fn refund_entries(book: &TradeBook) -> Vec<i64> {
    book.ledger()
        .iter()
        .filter(|entry| entry.kind == LedgerKind::Refund)
        .map(|entry| entry.amount_fen)
        .collect()
}

#[test]
fn partial_refunds_add_up_to_the_amount_and_a_repeated_number_is_one_refund() {
    let mut book = TradeBook::default();
    paid_trade(&mut book, ChannelKind::Alipay, "P1", 100);
    let now = Settlement::Immediate;
    assert!(matches!(
        book.request_refund(refund("P1", "R1", 40, now), NOW_MS),
        Ok((RefundTaken::New, Some(_)))
    ));
    assert_eq!(
        book.request_refund(refund("P1", "R1", 40, now), NOW_MS),
        Ok((RefundTaken::Repeated, None)),
        "the same number and amount: the same refund"
    );
    assert_eq!(
        book.request_refund(refund("P1", "R1", 41, now), NOW_MS),
        Err(RefundRefusal::NumberUsed)
    );
    assert_eq!(
        book.request_refund(refund("P1", "R2", 61, now), NOW_MS),
        Err(RefundRefusal::ExceedsRefundable)
    );
    assert!(
        book.request_refund(refund("P1", "R2", 60, now), NOW_MS)
            .is_ok()
    );
    let trade = book.find_trade("P1").expect("trade");
    assert_eq!(trade.status, TradeStatus::Refunded);
    assert_eq!(trade.refundable_fen(), 0);
    assert_eq!(
        book.request_refund(refund("P1", "R3", 1, now), NOW_MS),
        Err(RefundRefusal::FullyRefunded)
    );
    assert_eq!(
        book.request_refund(refund("P1", "R2", 60, now), NOW_MS),
        Ok((RefundTaken::Repeated, None)),
        "the retry of the last refund finds it, though the trade is refunded"
    );
    assert_eq!(refund_entries(&book), [40, 60]);
    assert_refund_invariants(&book);
}

#[test]
fn a_processing_refund_holds_its_amount_and_only_a_success_moves_money() {
    let mut book = TradeBook::default();
    paid_trade(&mut book, ChannelKind::Wechat, "W1", 100);
    let after = |outcome| Settlement::After {
        delay_ms: 5_000,
        outcome,
    };
    assert_eq!(
        book.request_refund(refund("W1", "A", 30, after(RefundOutcome::Success)), NOW_MS),
        Ok((RefundTaken::New, None)),
        "processing: nothing to tell yet"
    );
    assert!(
        book.request_refund(refund("W1", "B", 70, after(RefundOutcome::Closed)), NOW_MS)
            .is_ok()
    );
    assert_eq!(
        book.request_refund(refund("W1", "C", 1, after(RefundOutcome::Success)), NOW_MS),
        Err(RefundRefusal::ExceedsRefundable),
        "processing refunds hold the whole amount"
    );
    assert!(refund_entries(&book).is_empty());
    assert_eq!(book.next_refund_settlement_ms(), Some(NOW_MS + 5_000));
    assert!(book.settle_due_refunds(NOW_MS + 4_999).is_empty());
    let events = book.settle_due_refunds(NOW_MS + 5_000);
    assert_eq!(events.len(), 2);
    let trade = book.find_trade("W1").expect("trade");
    let statuses: Vec<RefundStatus> = trade.refunds.iter().map(|refund| refund.status).collect();
    assert_eq!(statuses, [RefundStatus::Success, RefundStatus::Closed]);
    assert_eq!(trade.status, TradeStatus::Paid);
    assert_eq!(
        trade.refundable_fen(),
        70,
        "a closed refund frees its amount"
    );
    assert_eq!(refund_entries(&book), [30]);

    assert!(
        book.request_refund(
            refund("W1", "C", 70, after(RefundOutcome::Abnormal)),
            NOW_MS
        )
        .is_ok()
    );
    assert_eq!(book.settle_due_refunds(NOW_MS + 10_000).len(), 1);
    let trade = book.find_trade("W1").expect("trade");
    assert_eq!(
        trade.refundable_fen(),
        0,
        "an abnormal refund keeps holding its amount"
    );
    assert_eq!(refund_entries(&book), [30], "and moved no money");

    paid_trade(&mut book, ChannelKind::Wechat, "W2", 100);
    assert_eq!(
        book.request_refund(refund("W2", "A", 30, after(RefundOutcome::Success)), NOW_MS),
        Err(RefundRefusal::NumberUsed),
        "a WeChat refund number names one refund across trades"
    );
    assert_eq!(
        book.find_trade_by_wechat_refund("A")
            .map(|trade| trade.out_trade_no.as_str()),
        Some("W1")
    );
    assert_refund_invariants(&book);
}

#[test]
fn only_paid_trades_are_refunded_and_the_operator_may_refund_a_finished_one() {
    let mut book = TradeBook::default();
    let now = Settlement::Immediate;
    assert_eq!(
        book.request_refund(refund("NONE", "R1", 1, now), NOW_MS),
        Err(RefundRefusal::TradeNotFound)
    );
    assert!(
        book.create_trade(new_trade(ChannelKind::Alipay, "P1", 100), NOW_MS)
            .is_ok()
    );
    assert_eq!(
        book.request_refund(refund("P1", "R1", 1, now), NOW_MS),
        Err(RefundRefusal::NotPaid)
    );
    assert!(book.pay_trade("P1", NOW_MS).is_ok());
    assert!(book.finish_trade("P1", NOW_MS).is_ok());
    assert_eq!(
        book.request_refund(refund("P1", "R1", 1, now), NOW_MS),
        Err(RefundRefusal::Finished)
    );
    assert!(matches!(
        book.refund_trade("P1", NOW_MS),
        Ok((Applied::Changed, Some(_)))
    ));
    assert_eq!(
        book.refund_trade("P1", NOW_MS),
        Ok((Applied::AlreadyDone, None))
    );
    assert_eq!(refund_entries(&book), [100]);

    paid_trade(&mut book, ChannelKind::Wechat, "W1", 100);
    for number in 0..REFUNDS_PER_TRADE_MAX {
        assert!(
            book.request_refund(refund("W1", &format!("R{number}"), 1, now), NOW_MS)
                .is_ok()
        );
    }
    assert_eq!(
        book.request_refund(refund("W1", "ONE-MORE", 1, now), NOW_MS),
        Err(RefundRefusal::TooManyRefunds)
    );
    assert!(
        matches!(
            book.refund_trade("W1", NOW_MS),
            Ok((Applied::Changed, Some(_)))
        ),
        "the operator refunds the rest, beyond the merchants' limit of refunds"
    );
    assert_eq!(
        book.find_trade("W1").map(|trade| trade.status),
        Some(TradeStatus::Refunded)
    );
    assert_refund_invariants(&book);
}

#[test]
fn closing_an_unscanned_precreate_tells_nobody() {
    let mut book = TradeBook::default();
    assert!(
        book.create_trade(new_trade(ChannelKind::Alipay, "P1", 100), NOW_MS)
            .is_ok()
    );
    assert_eq!(
        book.close_trade("P1", CloseCause::Control, NOW_MS),
        Ok((Applied::Changed, None))
    );
    assert_eq!(book.scan_trade("P1", NOW_MS), Err(Refusal::Closed));
}
