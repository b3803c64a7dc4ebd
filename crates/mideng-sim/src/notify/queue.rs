//! The notify queue: which notifies exist, when each delivery is due, what the merchant
//! answered, and the delivery policies. Pure rules, no I/O; the dispatcher does the sending.
//!
//! A notify's deliveries follow its channel's retry schedule counted from a base time (the
//! event, or the event plus a policy's hold): delivery *n* is due at `base + schedule[n]`. A
//! delivery that was late (the clock was advanced, the merchant was slow) makes the next one due
//! at once if its time has passed too, so an advance of a day sends the whole schedule promptly.
//!
//! The policy in force when a notify is created (the trade's own, else the global one) decides
//! its fate for good; changing the policy later affects only later notifies.

use std::collections::{BTreeSet, HashMap};

use mideng_channel::{ChannelKind, alipay, wechat};
use serde::{Deserialize, Serialize};

use crate::limits::{
    DELIVERY_RECORDS_PER_NOTIFY_MAX, NOTIFIES_PENDING_MAX, POLICY_DELAY_SECONDS_DEFAULT,
    TRADE_POLICIES_MAX,
};

/// What happens to notifies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PolicyMode {
    /// Deliver on the channel's schedule until acknowledged.
    #[default]
    Normal,
    /// Never deliver: the notify is lost for good.
    Drop,
    /// Deliver every delivery twice, one copy after the other.
    Duplicate,
    /// Deliver every delivery as two copies at the same time.
    Concurrent,
    /// Hold the first delivery for `delay_seconds`, then follow the schedule from there.
    Delay,
    /// Hold a trade's first notify for `delay_seconds`; a later notify of the same trade created
    /// while it is held goes out at once, overtaking it.
    Reorder,
}

/// A notify policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct NotifyPolicy {
    /// What happens.
    pub(crate) mode: PolicyMode,
    /// The hold of `delay` and `reorder`, channel seconds.
    pub(crate) delay_seconds: u64,
    /// Stop after this many deliveries, acknowledged or not.
    pub(crate) stop_after: Option<u32>,
}

impl NotifyPolicy {
    /// A policy; `delay_seconds` defaults for the modes that hold.
    pub(crate) fn new(
        mode: PolicyMode,
        delay_seconds: Option<u64>,
        stop_after: Option<u32>,
    ) -> Self {
        let delay_seconds = match mode {
            PolicyMode::Delay | PolicyMode::Reorder => {
                delay_seconds.unwrap_or(POLICY_DELAY_SECONDS_DEFAULT)
            }
            _ => delay_seconds.unwrap_or(0),
        };
        Self {
            mode,
            delay_seconds,
            stop_after,
        }
    }
}

/// How many copies each delivery sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Copies {
    /// One.
    One,
    /// Two, the second after the first was answered.
    TwoInSequence,
    /// Two at once.
    TwoAtOnce,
}

/// What a notify carries, fixed when the event happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Alipay form parameters, without `notify_time` and `sign` (fresh on every delivery).
    AlipayForm(Vec<(String, String)>),
    /// The WeChat Pay notification body (JSON with the encrypted resource); headers are signed
    /// on every delivery.
    WechatJson(String),
}

/// A notify about to be queued.
#[derive(Clone, Debug)]
pub(crate) struct NewNotify {
    pub(crate) channel: ChannelKind,
    pub(crate) out_trade_no: String,
    /// The channel's notify id (Alipay `notify_id`, WeChat Pay notification `id`): the same on
    /// every delivery.
    pub(crate) notify_id: String,
    /// `TRADE_SUCCESS`, `TRADE_CLOSED`, …, `TRANSACTION.SUCCESS`.
    pub(crate) event: &'static str,
    pub(crate) url: String,
    pub(crate) payload: Payload,
}

/// One delivery to hand to the dispatcher.
#[derive(Clone, Debug)]
pub(crate) struct DeliveryJob {
    pub(crate) key: u64,
    pub(crate) channel: ChannelKind,
    pub(crate) url: String,
    pub(crate) payload: Payload,
    pub(crate) copies: Copies,
    /// 1 for the first delivery.
    pub(crate) delivery_number: u32,
}

/// What happened to one copy of one delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct DeliveryRecord {
    /// Which delivery, from 1.
    pub(crate) delivery: u32,
    /// Which copy of it, from 1.
    pub(crate) copy: u32,
    /// When it was sent, channel time, Unix milliseconds.
    pub(crate) at_ms: i64,
    /// The merchant's HTTP status, if it answered.
    pub(crate) status: Option<u16>,
    /// The start of the merchant's answer body.
    pub(crate) answer: Option<String>,
    /// Why there was no answer (timeout, connection refused, …).
    pub(crate) error: Option<String>,
    /// Whether the answer acknowledged the notify.
    pub(crate) acknowledged: bool,
}

/// Where a notify is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NotifyState {
    /// Waiting for its next delivery.
    Scheduled,
    /// A delivery is on its way.
    Delivering,
    /// The merchant acknowledged it.
    Acknowledged,
    /// Every delivery of the schedule went unacknowledged.
    Exhausted,
    /// `stop_after` deliveries went unacknowledged.
    Stopped,
    /// The `drop` policy lost it.
    Dropped,
    /// Too many notifies were pending; this one was never queued.
    QueueFull,
}

/// One notify and its history.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Notify {
    notify_id: String,
    event: &'static str,
    #[serde(skip)]
    channel: ChannelKind,
    url: String,
    policy: PolicyMode,
    state: NotifyState,
    created_at_ms: i64,
    /// When the next delivery is due, while one is.
    next_delivery_at_ms: Option<i64>,
    deliveries_made: u32,
    deliveries_allowed: u32,
    deliveries: Vec<DeliveryRecord>,
    /// Records not kept beyond [`DELIVERY_RECORDS_PER_NOTIFY_MAX`].
    deliveries_omitted: u32,
    #[serde(skip)]
    payload: Option<Payload>,
    #[serde(skip)]
    base_ms: i64,
    #[serde(skip)]
    copies: Copies,
}

impl Notify {
    /// The channel's retry schedule, seconds after the base time.
    fn schedule(&self) -> &'static [u64] {
        match self.channel {
            ChannelKind::Alipay => &alipay::NOTIFY_SCHEDULE_SECS,
            ChannelKind::Wechat => &wechat::NOTIFY_SCHEDULE_SECS,
        }
    }

    /// When delivery `index` (from 0) is due.
    fn due_ms(&self, index: u32) -> Option<i64> {
        let seconds = *self.schedule().get(usize::try_from(index).ok()?)?;
        let offset_ms = i64::try_from(seconds.saturating_mul(1000)).ok()?;
        Some(self.base_ms.saturating_add(offset_ms))
    }
}

/// A per-trade policy could not be stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooManyPolicies;

/// The queue.
#[derive(Debug, Default)]
pub(crate) struct NotifyQueue {
    notifies: HashMap<u64, Notify>,
    /// Merchant number → its notifies' keys, oldest first.
    by_trade: HashMap<String, Vec<u64>>,
    /// (due time, key) of every scheduled notify.
    due: BTreeSet<(i64, u64)>,
    /// Notifies scheduled or being delivered.
    pending: usize,
    next_key: u64,
    global_policy: NotifyPolicy,
    trade_policies: HashMap<String, NotifyPolicy>,
    /// Set when the queue gained work, so the dispatcher is woken only when needed.
    changed: bool,
}

impl NotifyQueue {
    /// Sets the global policy (no trade) or one trade's policy.
    pub(crate) fn set_policy(
        &mut self,
        out_trade_no: Option<&str>,
        policy: NotifyPolicy,
    ) -> Result<(), TooManyPolicies> {
        match out_trade_no {
            None => self.global_policy = policy,
            Some(out_trade_no) => {
                if !self.trade_policies.contains_key(out_trade_no)
                    && self.trade_policies.len() >= TRADE_POLICIES_MAX
                {
                    return Err(TooManyPolicies);
                }
                self.trade_policies.insert(out_trade_no.to_owned(), policy);
            }
        }
        Ok(())
    }

    /// Queues a notify under the policy in force.
    pub(crate) fn enqueue(&mut self, new: NewNotify, now_ms: i64) {
        let policy = self
            .trade_policies
            .get(&new.out_trade_no)
            .copied()
            .unwrap_or(self.global_policy);
        let hold_ms = i64::try_from(policy.delay_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        let trade_has_held_notify = self.by_trade.get(&new.out_trade_no).is_some_and(|keys| {
            keys.iter()
                .filter_map(|key| self.notifies.get(key))
                .any(|notify| {
                    notify.state == NotifyState::Scheduled
                        && notify.deliveries_made == 0
                        && notify
                            .next_delivery_at_ms
                            .is_some_and(|due_ms| due_ms > now_ms)
                })
        });
        let base_ms = match policy.mode {
            PolicyMode::Delay => now_ms.saturating_add(hold_ms),
            PolicyMode::Reorder if !trade_has_held_notify => now_ms.saturating_add(hold_ms),
            _ => now_ms,
        };
        let copies = match policy.mode {
            PolicyMode::Duplicate => Copies::TwoInSequence,
            PolicyMode::Concurrent => Copies::TwoAtOnce,
            _ => Copies::One,
        };
        self.next_key = self.next_key.saturating_add(1);
        let key = self.next_key;
        let mut notify = Notify {
            notify_id: new.notify_id,
            event: new.event,
            channel: new.channel,
            url: new.url,
            policy: policy.mode,
            state: NotifyState::Scheduled,
            created_at_ms: now_ms,
            next_delivery_at_ms: None,
            deliveries_made: 0,
            deliveries_allowed: 0,
            deliveries: Vec::new(),
            deliveries_omitted: 0,
            payload: Some(new.payload),
            base_ms,
            copies,
        };
        let schedule_length = u32::try_from(notify.schedule().len()).unwrap_or(u32::MAX);
        notify.deliveries_allowed = policy.stop_after.map_or(schedule_length, |stop_after| {
            stop_after.min(schedule_length)
        });
        if policy.mode == PolicyMode::Drop {
            notify.state = NotifyState::Dropped;
        } else if notify.deliveries_allowed == 0 {
            notify.state = NotifyState::Stopped;
        } else if self.pending >= NOTIFIES_PENDING_MAX {
            notify.state = NotifyState::QueueFull;
            tracing::warn!(
                out_trade_no = %new.out_trade_no,
                "notify queue full; notify recorded as lost"
            );
        } else {
            let due_ms = notify.due_ms(0).unwrap_or(base_ms);
            notify.next_delivery_at_ms = Some(due_ms);
            self.due.insert((due_ms, key));
            self.pending += 1;
            self.changed = true;
        }
        if notify.state != NotifyState::Scheduled {
            notify.payload = None;
        }
        self.by_trade.entry(new.out_trade_no).or_default().push(key);
        self.notifies.insert(key, notify);
    }

    /// Takes up to `limit` deliveries due at `now_ms`, marking their notifies as delivering.
    pub(crate) fn take_due(&mut self, now_ms: i64, limit: usize) -> Vec<DeliveryJob> {
        let mut jobs = Vec::new();
        while jobs.len() < limit
            && let Some((due_ms, _)) = self.due.first()
            && *due_ms <= now_ms
        {
            let Some((_, key)) = self.due.pop_first() else {
                break;
            };
            let Some(notify) = self.notifies.get_mut(&key) else {
                continue;
            };
            let Some(payload) = notify.payload.clone() else {
                continue;
            };
            notify.state = NotifyState::Delivering;
            notify.next_delivery_at_ms = None;
            jobs.push(DeliveryJob {
                key,
                channel: notify.channel,
                url: notify.url.clone(),
                payload,
                copies: notify.copies,
                delivery_number: notify.deliveries_made.saturating_add(1),
            });
        }
        jobs
    }

    /// When the next delivery is due.
    pub(crate) fn next_due_ms(&self) -> Option<i64> {
        self.due.first().map(|(due_ms, _)| *due_ms)
    }

    /// Records a finished delivery (all its copies) and schedules the next one, if any.
    pub(crate) fn record_delivery(&mut self, key: u64, records: Vec<DeliveryRecord>) {
        let Some(notify) = self.notifies.get_mut(&key) else {
            return;
        };
        let acknowledged = records.iter().any(|record| record.acknowledged);
        notify.deliveries_made = notify.deliveries_made.saturating_add(1);
        for record in records {
            if notify.deliveries.len() < DELIVERY_RECORDS_PER_NOTIFY_MAX {
                notify.deliveries.push(record);
            } else {
                notify.deliveries_omitted = notify.deliveries_omitted.saturating_add(1);
            }
        }
        let next_due_ms = notify.due_ms(notify.deliveries_made);
        notify.state = if acknowledged {
            NotifyState::Acknowledged
        } else if notify.deliveries_made >= notify.deliveries_allowed {
            if next_due_ms.is_some() {
                NotifyState::Stopped
            } else {
                NotifyState::Exhausted
            }
        } else {
            NotifyState::Scheduled
        };
        match (notify.state, next_due_ms) {
            (NotifyState::Scheduled, Some(due_ms)) => {
                notify.next_delivery_at_ms = Some(due_ms);
                self.due.insert((due_ms, key));
                self.changed = true;
            }
            _ => {
                notify.payload = None;
                self.pending = self.pending.saturating_sub(1);
            }
        }
    }

    /// Returns whether work arrived since the last call, and clears the mark.
    pub(crate) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// A trade's notifies, oldest first.
    pub(crate) fn notifies_of_trade(&self, out_trade_no: &str) -> Vec<&Notify> {
        self.by_trade
            .get(out_trade_no)
            .map(|keys| {
                keys.iter()
                    .filter_map(|key| self.notifies.get(key))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Notify {
    /// The notify's id.
    #[cfg(test)]
    pub(crate) fn notify_id(&self) -> &str {
        &self.notify_id
    }

    /// Where it is.
    #[cfg(test)]
    pub(crate) fn state(&self) -> NotifyState {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_796_011_200_000;

    fn new_notify(out_trade_no: &str, notify_id: &str) -> NewNotify {
        NewNotify {
            channel: ChannelKind::Alipay,
            out_trade_no: out_trade_no.to_owned(),
            notify_id: notify_id.to_owned(),
            event: "TRADE_SUCCESS",
            url: "http://127.0.0.1:1/".to_owned(),
            payload: Payload::AlipayForm(Vec::new()),
        }
    }

    fn refused(delivery: u32) -> Vec<DeliveryRecord> {
        vec![DeliveryRecord {
            delivery,
            copy: 1,
            at_ms: NOW_MS,
            status: Some(200),
            answer: Some("failure".to_owned()),
            error: None,
            acknowledged: false,
        }]
    }

    #[test]
    fn unacknowledged_deliveries_follow_the_schedule_until_it_is_exhausted() {
        let mut queue = NotifyQueue::default();
        queue.enqueue(new_notify("P1", "N1"), NOW_MS);
        let mut due_times = Vec::new();
        let mut now_ms = NOW_MS;
        while let Some(due_ms) = queue.next_due_ms() {
            due_times.push((due_ms - NOW_MS) / 1000);
            now_ms = now_ms.max(due_ms);
            let jobs = queue.take_due(now_ms, 10);
            assert_eq!(jobs.len(), 1);
            queue.record_delivery(jobs[0].key, refused(jobs[0].delivery_number));
        }
        let expected: Vec<i64> = alipay::NOTIFY_SCHEDULE_SECS
            .iter()
            .map(|seconds| i64::try_from(*seconds).expect("small"))
            .collect();
        assert_eq!(due_times, expected);
        let notifies = queue.notifies_of_trade("P1");
        assert_eq!(notifies[0].state(), NotifyState::Exhausted);
        assert_eq!(queue.pending, 0);
    }

    #[test]
    fn stop_after_and_drop_limit_deliveries() {
        let mut queue = NotifyQueue::default();
        assert!(
            queue
                .set_policy(
                    Some("P1"),
                    NotifyPolicy::new(PolicyMode::Normal, None, Some(2))
                )
                .is_ok()
        );
        queue.enqueue(new_notify("P1", "N1"), NOW_MS);
        for _ in 0..2 {
            let due_ms = queue.next_due_ms().expect("due");
            let jobs = queue.take_due(due_ms, 10);
            queue.record_delivery(jobs[0].key, refused(jobs[0].delivery_number));
        }
        assert_eq!(queue.next_due_ms(), None);
        assert_eq!(
            queue.notifies_of_trade("P1")[0].state(),
            NotifyState::Stopped
        );

        assert!(
            queue
                .set_policy(None, NotifyPolicy::new(PolicyMode::Drop, None, None))
                .is_ok()
        );
        queue.enqueue(new_notify("P2", "N2"), NOW_MS);
        assert_eq!(queue.next_due_ms(), None);
        assert_eq!(
            queue.notifies_of_trade("P2")[0].state(),
            NotifyState::Dropped
        );
    }

    #[test]
    fn under_reorder_a_later_notify_overtakes_a_held_one() {
        let mut queue = NotifyQueue::default();
        assert!(
            queue
                .set_policy(None, NotifyPolicy::new(PolicyMode::Reorder, Some(60), None))
                .is_ok()
        );
        queue.enqueue(new_notify("P1", "FIRST"), NOW_MS);
        assert!(queue.take_due(NOW_MS + 1000, 10).is_empty(), "held");
        queue.enqueue(new_notify("P1", "SECOND"), NOW_MS + 1000);
        let jobs = queue.take_due(NOW_MS + 1000, 10);
        assert_eq!(jobs.len(), 1);
        let overtaking = queue.notifies.get(&jobs[0].key).expect("notify");
        assert_eq!(overtaking.notify_id(), "SECOND");
        assert_eq!(
            queue.take_due(NOW_MS + 60_000, 10).len(),
            1,
            "then the held one"
        );
    }

    #[test]
    fn an_acknowledged_notify_is_done() {
        let mut queue = NotifyQueue::default();
        queue.enqueue(new_notify("P1", "N1"), NOW_MS);
        let jobs = queue.take_due(NOW_MS, 10);
        let mut records = refused(1);
        records[0].acknowledged = true;
        queue.record_delivery(jobs[0].key, records);
        assert_eq!(queue.next_due_ms(), None);
        assert_eq!(
            queue.notifies_of_trade("P1")[0].state(),
            NotifyState::Acknowledged
        );
    }
}
