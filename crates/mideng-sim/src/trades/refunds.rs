//! A trade's refunds: asked for by the merchant or the operator, settled at once or later,
//! each under its number, never above what the trade was paid (the rules are in the parent
//! module's documentation).

use super::*;

impl TradeBook {
    /// The operator refunds what is left of a paid (or finished) trade, at once, under a
    /// refund number of the simulator's own: the control API's full refund.
    pub(crate) fn refund_trade(
        &mut self,
        out_trade_no: &str,
        now_ms: i64,
    ) -> Result<(Applied, Option<TradeEvent>), Refusal> {
        let trade = self.trades.get(out_trade_no).ok_or(Refusal::NotFound)?;
        match trade.status {
            TradeStatus::Paid | TradeStatus::Finished => {}
            TradeStatus::Refunded => return Ok((Applied::AlreadyDone, None)),
            TradeStatus::Pending | TradeStatus::Closed => return Err(Refusal::NotPaid),
        }
        let amount_fen = trade.refundable_fen();
        if amount_fen < 1 {
            return Err(Refusal::NothingToRefund);
        }
        let out_refund_no = format!("SIMREFUND{:012}", self.next_sequence());
        let request = RefundRequest {
            out_trade_no: out_trade_no.to_owned(),
            out_refund_no,
            amount_fen,
            reason: "simulator control refund".to_owned(),
            notify_url: None,
            settlement: Settlement::Immediate,
        };
        let event = self
            .add_refund(request, now_ms)
            .expect("the trade was found above and nothing removes trades");
        Ok((Applied::Changed, event))
    }

    /// A merchant's refund request: a new refund, or the same refund again. A new refund under
    /// [`Settlement::Immediate`] succeeds now (its event in the answer); under
    /// [`Settlement::After`] it processes until [`TradeBook::settle_due_refunds`] ends it.
    /// Whether the trade shows at the channel is the caller's rule, as for closes.
    pub(crate) fn request_refund(
        &mut self,
        request: RefundRequest,
        now_ms: i64,
    ) -> Result<(RefundTaken, Option<TradeEvent>), RefundRefusal> {
        let trade = self
            .trades
            .get(&request.out_trade_no)
            .ok_or(RefundRefusal::TradeNotFound)?;
        // A known number is answered before any other rule: the retry of a refund that made the
        // trade fully refunded must find that refund, not a refusal.
        if let Some(existing) = trade.find_refund(&request.out_refund_no) {
            return if existing.amount_fen == request.amount_fen {
                Ok((RefundTaken::Repeated, None))
            } else {
                Err(RefundRefusal::NumberUsed)
            };
        }
        if trade.channel == ChannelKind::Wechat
            && self.wechat_refunds.contains_key(&request.out_refund_no)
        {
            return Err(RefundRefusal::NumberUsed);
        }
        match trade.status {
            TradeStatus::Paid => {}
            TradeStatus::Pending | TradeStatus::Closed => return Err(RefundRefusal::NotPaid),
            TradeStatus::Finished => return Err(RefundRefusal::Finished),
            TradeStatus::Refunded => return Err(RefundRefusal::FullyRefunded),
        }
        if trade.refunds.len() >= REFUNDS_PER_TRADE_MAX {
            return Err(RefundRefusal::TooManyRefunds);
        }
        if request.amount_fen < 1 || request.amount_fen > trade.refundable_fen() {
            return Err(RefundRefusal::ExceedsRefundable);
        }
        self.add_refund(request, now_ms)
            .map(|event| (RefundTaken::New, event))
    }

    /// Adds a refund the caller checked (the trade exists and is paid or finished, the number
    /// is new, the amount fits) and, if it is immediate, makes it.
    fn add_refund(
        &mut self,
        request: RefundRequest,
        now_ms: i64,
    ) -> Result<Option<TradeEvent>, RefundRefusal> {
        let refund_id = format!("5030{:016}{}", self.next_sequence(), channel_date(now_ms));
        let trade = self
            .trades
            .get_mut(&request.out_trade_no)
            .ok_or(RefundRefusal::TradeNotFound)?;
        // The book's invariant, checked before it is written: the refunds not closed never
        // exceed the trade's amount.
        assert!(
            (1..=trade.refundable_fen()).contains(&request.amount_fen),
            "a refund beyond what is refundable reached the book"
        );
        let (outcome, settles_at_ms) = match request.settlement {
            Settlement::Immediate => (RefundOutcome::Success, None),
            Settlement::After { delay_ms, outcome } => {
                (outcome, Some(now_ms.saturating_add(delay_ms.max(0))))
            }
        };
        trade.refunds.push(TradeRefund {
            out_refund_no: request.out_refund_no.clone(),
            refund_id,
            amount_fen: request.amount_fen,
            reason: request.reason,
            status: RefundStatus::Processing,
            notify_url: request.notify_url,
            outcome,
            requested_at_ms: now_ms,
            settles_at_ms,
            ended_at_ms: None,
        });
        if trade.channel == ChannelKind::Wechat {
            self.wechat_refunds
                .insert(request.out_refund_no.clone(), request.out_trade_no.clone());
        }
        match settles_at_ms {
            Some(at_ms) => {
                self.refund_settlements.insert((
                    at_ms,
                    request.out_trade_no,
                    request.out_refund_no,
                ));
                Ok(None)
            }
            None => Ok(self.end_refund(&request.out_trade_no, &request.out_refund_no, now_ms)),
        }
    }

    /// Ends a processing refund as its outcome says, at `at_ms`: on success the money goes
    /// back (a ledger entry) and a trade refunded in full becomes REFUNDED. The event, unless
    /// the refund was not processing.
    fn end_refund(
        &mut self,
        out_trade_no: &str,
        out_refund_no: &str,
        at_ms: i64,
    ) -> Option<TradeEvent> {
        let trade = self.trades.get_mut(out_trade_no)?;
        let refund = trade
            .refunds
            .iter_mut()
            .find(|refund| refund.out_refund_no == out_refund_no)?;
        if refund.status != RefundStatus::Processing {
            return None;
        }
        refund.status = match refund.outcome {
            RefundOutcome::Success => RefundStatus::Success,
            RefundOutcome::Abnormal => RefundStatus::Abnormal,
            RefundOutcome::Closed => RefundStatus::Closed,
        };
        refund.settles_at_ms = None;
        refund.ended_at_ms = Some(at_ms);
        let moved_fen = (refund.status == RefundStatus::Success).then_some(refund.amount_fen);
        let refund_id = refund.refund_id.clone();
        if let Some(amount_fen) = moved_fen {
            let refunded_fen = trade.refunded_fen();
            assert!(
                refunded_fen <= trade.terms.amount_fen,
                "refunds beyond the trade's amount moved money"
            );
            if refunded_fen == trade.terms.amount_fen {
                trade.status = TradeStatus::Refunded;
                trade.refunded_at_ms = Some(at_ms);
            }
            let entry = LedgerEntry {
                sequence: 0,
                at_ms,
                kind: LedgerKind::Refund,
                channel: trade.channel,
                out_trade_no: trade.out_trade_no.clone(),
                channel_trade_id: trade.channel_trade_id.clone(),
                amount_fen,
                out_refund_no: Some(out_refund_no.to_owned()),
                refund_id: Some(refund_id),
            };
            self.append_ledger(entry);
        }
        Some(TradeEvent {
            out_trade_no: out_trade_no.to_owned(),
            kind: TradeEventKind::Refund {
                out_refund_no: out_refund_no.to_owned(),
            },
        })
    }

    /// Ends every processing refund whose time is at or before `now_ms`, each at its own time.
    pub(crate) fn settle_due_refunds(&mut self, now_ms: i64) -> Vec<TradeEvent> {
        let mut events = Vec::new();
        while let Some((at_ms, _, _)) = self.refund_settlements.first()
            && *at_ms <= now_ms
        {
            let Some((at_ms, out_trade_no, out_refund_no)) = self.refund_settlements.pop_first()
            else {
                break;
            };
            events.extend(self.end_refund(&out_trade_no, &out_refund_no, at_ms));
        }
        events
    }

    /// The next end of a processing refund, for the dispatcher's timer.
    pub(crate) fn next_refund_settlement_ms(&self) -> Option<i64> {
        self.refund_settlements.first().map(|(at_ms, _, _)| *at_ms)
    }

    /// The WeChat Pay trade that holds the refund `out_refund_no`.
    pub(crate) fn find_trade_by_wechat_refund(&self, out_refund_no: &str) -> Option<&Trade> {
        self.wechat_refunds
            .get(out_refund_no)
            .and_then(|out_trade_no| self.trades.get(out_trade_no))
    }
}
