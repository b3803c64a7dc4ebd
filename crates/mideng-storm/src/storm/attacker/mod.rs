//! The attacker: a client that runs beside the storm's workload for the whole run and sends
//! the channel notifies that someone who can read, replay and edit them would send. None may
//! move money or state; the audit checks that none did.
//!
//! **Where its genuine notifies come from.** The attacker is a customer like any other: through
//! one of the tenants (in turn) it creates small orders of its own (ids `<run>-atk-…`, with an
//! entitlement, so that a second effect would show as a second grant), pays them at the
//! simulator (`POST /sim/trades/{no}/pay`: the channel really charges them), reads the trade
//! back (`GET /sim/trades/{no}`: the channel's trade number, amount, times and the id of the
//! notify the channel sends) and signs the same fields the channel signs with the channel's
//! key, which the storm holds in-process (it started the simulator, or shares its data
//! directory). That is the notify the channel itself sends again on its retry schedule: what a
//! captured notify re-sent looks like, down to the channel's `notify_id`.
//!
//! **Kinds** (one per round, in turn from a seeded start, so that a short storm sends each):
//! - *replay*: the genuine notify of its own charged payment, sent again 3 to 6 times, some
//!   copies at once: acknowledged as a duplicate, no second effect;
//! - *retarget*: a victim's `out_trade_no`, amount, a fresh `notify_id` and trade number
//!   prepended or appended to its own genuine Alipay notify (the form-pollution attack);
//! - *pollute*: `trade_status=TRADE_CLOSED` with a victim's number and amount, prepended or
//!   appended to its own genuine Alipay notify;
//! - *wrong key*: a success with a victim's fields signed with the merchant's key instead of
//!   the channel's;
//! - *cross channel*: a channel-signed Alipay success for a victim's WeChat payment with its
//!   real amount;
//! - *WeChat stale*: a correctly encrypted, platform-signed WeChat success for a victim's WeChat
//!   payment, signed a day ago;
//! - *WeChat unknown serial*: the same, fresh, under a platform serial we were never given.
//!
//! **Victims** are the workload's payments whose buyer never pays and that nobody closes (a
//! quarter of them: every tenant, both channels). Nothing the workload does changes them before
//! their expiry, so the audit can tell an attack that got through from the workload: an
//! attacked payment must end PENDING, or CLOSED at the channel too, or closed after its expiry
//! (the reconciler's close). Separately, an attack answered as accepted (Alipay `success`,
//! WeChat 2xx) is a violation whatever it did.
//!
//! With `--break-layer channel-key` the channel's key counts as leaked: the attacker also signs
//! victims' successes as the channel would, the service must accept them, and the audit must
//! report it — the proof that the audit catches an attack that gets through.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod boundary;
mod forge;

use mideng_channel::keys::PrivateKey;
use mideng_channel::{ChannelKind, alipay};
use serde::Serialize;
use serde_json::{Value, json};

pub use boundary::{BoundaryKind, BoundaryReport, BoundaryTargets};
pub(crate) use boundary::{BoundaryLog, probe_until};
pub use forge::{
    AttackerKeys, TradeFacts, alipay_success, polluted, retarget_fields, wechat_success,
};

use crate::storm::{Pending, PendingKind, Shared, WorkloadEnd, create_order, keyed};

/// A platform serial the service was never given.
const UNKNOWN_SERIAL: &str = "PUB_KEY_ID_0000000000000000000000000000000099";
/// How old the stale WeChat notifies are: a day, far outside the ±5 minutes a receiver allows.
const STALE_SECS: i64 = 86_400;
/// Rounds between two fresh payments of the attacker's own (per channel): each is replayed
/// over and over in between.
const OWN_PAYMENT_ROUNDS: u64 = 20;
/// How many times the attacker reads a trade back before giving up on it.
const TRADE_READS_MAX: usize = 30;
/// The victims remembered, at most (the attacker picks among them).
pub(crate) const VICTIMS_MAX: usize = 10_000;

/// What the attacker sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AttackKind {
    /// A genuine notify of a charged payment, again.
    Replay,
    /// A genuine notify with a victim's number, amount and notify id added.
    Retarget,
    /// A genuine notify with `trade_status=TRADE_CLOSED` and a victim's number added.
    Pollute,
    /// A victim's success signed with the merchant's key.
    WrongKey,
    /// A channel-signed Alipay success for a victim's WeChat payment.
    CrossChannel,
    /// A platform-signed WeChat success signed a day ago.
    WechatStale,
    /// A platform-signed WeChat success under an unknown serial.
    WechatUnknownSerial,
    /// A victim's success signed with the channel's own key (`--break-layer channel-key` only).
    LeakedChannelKey,
}

impl AttackKind {
    /// Every kind the attacker sends in a normal storm.
    pub const EVERY: [AttackKind; 7] = [
        AttackKind::Replay,
        AttackKind::Retarget,
        AttackKind::Pollute,
        AttackKind::WrongKey,
        AttackKind::CrossChannel,
        AttackKind::WechatStale,
        AttackKind::WechatUnknownSerial,
    ];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            AttackKind::Replay => "replay",
            AttackKind::Retarget => "retarget",
            AttackKind::Pollute => "pollute",
            AttackKind::WrongKey => "wrong key",
            AttackKind::CrossChannel => "cross channel",
            AttackKind::WechatStale => "wechat stale",
            AttackKind::WechatUnknownSerial => "wechat unknown serial",
            AttackKind::LeakedChannelKey => "leaked channel key",
        }
    }

    /// The layer and outcome expected to stop it (the service's decision counters).
    pub fn stopped_by(self) -> &'static str {
        match self {
            AttackKind::Replay => "dedup:duplicate",
            AttackKind::Retarget | AttackKind::Pollute => "signature:malformed",
            AttackKind::WrongKey => "signature:bad_signature",
            AttackKind::CrossChannel => "signature:channel_mismatch",
            AttackKind::WechatStale => "signature:stale_timestamp",
            AttackKind::WechatUnknownSerial => "signature:unknown_serial",
            AttackKind::LeakedChannelKey => "nothing: the audit must report it",
        }
    }

    /// Whether the service must refuse it (a replay is acknowledged, as a duplicate).
    fn must_be_refused(self) -> bool {
        self != AttackKind::Replay
    }
}

/// How the service answered one attack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Alipay `success`, WeChat 2xx: taken (or taken before), the channel stops sending.
    Acknowledged,
    /// Alipay `failure`, WeChat 4xx: not taken.
    Refused,
    /// No answer, or a WeChat 5xx (not processed now): neither.
    NoAnswer,
}

/// What an answer to a notify means, as the channel reads it: Alipay reads only the body
/// (exactly `success`), WeChat only the status.
pub fn verdict(channel: ChannelKind, status: Option<u16>, body: &[u8]) -> Verdict {
    match (channel, status) {
        (_, None) => Verdict::NoAnswer,
        (ChannelKind::Alipay, Some(200)) if body == alipay::NOTIFY_ACK.as_bytes() => {
            Verdict::Acknowledged
        }
        (ChannelKind::Alipay, Some(200)) => Verdict::Refused,
        (ChannelKind::Alipay, Some(_)) => Verdict::NoAnswer,
        (ChannelKind::Wechat, Some(status)) if (200..300).contains(&status) => {
            Verdict::Acknowledged
        }
        (ChannelKind::Wechat, Some(status)) if (400..500).contains(&status) => Verdict::Refused,
        (ChannelKind::Wechat, Some(_)) => Verdict::NoAnswer,
    }
}

/// The attacks of one kind and their answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AttackCounts {
    /// Notifies sent.
    pub sent: u64,
    /// Answered as taken.
    pub acknowledged: u64,
    /// Answered as refused.
    pub refused: u64,
    /// Not answered (a crashed instance, a 5xx during a fault).
    pub unanswered: u64,
    /// What is expected to stop it (`layer:outcome` of the service's counters).
    pub stopped_by: &'static str,
}

/// What the attacker did, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AttackReport {
    /// By kind.
    pub kinds: BTreeMap<String, AttackCounts>,
    /// Distinct victims attacked.
    pub victims: usize,
    /// Victims' tenants (every tenant with a victim).
    pub victim_tenants: usize,
    /// Attacks on a victim of another tenant than the attacker's own payment.
    pub cross_tenant: u64,
    /// Attacks that had to be refused and were acknowledged (each also a violation).
    pub accepted: u64,
    /// The boundary attacker's probes and what its listeners saw (empty when it did not run:
    /// a deployment the storm did not start).
    pub boundary: BoundaryReport,
}

impl AttackReport {
    /// How many notifies the attacker sent.
    pub fn sent(&self) -> u64 {
        self.kinds.values().map(|counts| counts.sent).sum()
    }
}

/// What the attacker has done so far; lives in the storm's log.
#[derive(Clone, Debug, Default)]
pub(crate) struct AttackLog {
    kinds: BTreeMap<AttackKind, AttackCounts>,
    victims: BTreeSet<String>,
    victim_tenants: BTreeSet<usize>,
    cross_tenant: u64,
    /// Attacks that had to be refused and were acknowledged, described.
    pub(crate) accepted: Vec<String>,
}

impl AttackLog {
    /// Records one attack and its answer.
    pub(crate) fn record(&mut self, kind: AttackKind, target: &Target, verdict: Verdict) {
        let counts = self.kinds.entry(kind).or_insert_with(|| AttackCounts {
            stopped_by: kind.stopped_by(),
            ..AttackCounts::default()
        });
        counts.sent += 1;
        match verdict {
            Verdict::Acknowledged => counts.acknowledged += 1,
            Verdict::Refused => counts.refused += 1,
            Verdict::NoAnswer => counts.unanswered += 1,
        }
        if let Some(victim) = &target.victim {
            self.victims.insert(victim.payment_no.clone());
            self.victim_tenants.insert(victim.tenant);
            if victim.tenant != target.own_tenant {
                self.cross_tenant += 1;
            }
        }
        if kind.must_be_refused() && verdict == Verdict::Acknowledged {
            let aimed = target
                .victim
                .as_ref()
                .map_or("the attacker's own payment", |victim| {
                    victim.payment_no.as_str()
                });
            self.accepted
                .push(format!("{} aimed at {aimed} was acknowledged", kind.name()));
        }
    }

    /// The payments attacked (the audit checks that none of them moved).
    pub(crate) fn victims(&self) -> &BTreeSet<String> {
        &self.victims
    }

    /// The report's figures.
    pub(crate) fn report(&self) -> AttackReport {
        AttackReport {
            kinds: self
                .kinds
                .iter()
                .map(|(kind, counts)| (kind.name().to_owned(), counts.clone()))
                .collect(),
            victims: self.victims.len(),
            victim_tenants: self.victim_tenants.len(),
            cross_tenant: self.cross_tenant,
            accepted: self.accepted.len() as u64,
            boundary: BoundaryReport::default(),
        }
    }
}

/// A payment of the workload that its buyer never pays and nobody closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Victim {
    /// Index of its tenant.
    pub(crate) tenant: usize,
    /// Its number (`out_trade_no`).
    pub(crate) payment_no: String,
    /// `alipay` or `wechat`.
    pub(crate) channel: String,
    /// Fen.
    pub(crate) amount_fen: i64,
}

/// Whom one attack aims at, for the log.
pub(crate) struct Target {
    own_tenant: usize,
    victim: Option<Victim>,
}

/// A payment of the attacker's own, charged at the channel.
#[derive(Clone, Debug)]
struct OwnPayment {
    tenant: usize,
    channel: ChannelKind,
    trade: TradeFacts,
}

/// One notify to send: where, headers, body.
struct Notify {
    channel: ChannelKind,
    headers: Vec<(String, String)>,
    body: String,
}

/// A fresh identifier the attacker makes up (notify ids, trade numbers, nonces), seeded.
fn fresh(rng: &mut fastrand::Rng, length: usize) -> String {
    (0..length).map(|_| rng.alphanumeric()).collect()
}

fn now_secs() -> i64 {
    mideng::clock::now_ms().div_euclid(1000)
}

/// Runs the attacker until the workload's `end`: one attack per round, rounds a moment apart.
pub(crate) async fn attack_until(
    shared: &Shared,
    keys: &AttackerKeys,
    rng: &mut fastrand::Rng,
    end: &WorkloadEnd,
    leaked_channel_key: bool,
) {
    let mut kinds: Vec<AttackKind> = AttackKind::EVERY.to_vec();
    if leaked_channel_key {
        kinds.push(AttackKind::LeakedChannelKey);
    }
    let mut next = rng.usize(..kinds.len());
    let mut own: BTreeMap<&'static str, OwnPayment> = BTreeMap::new();
    let mut round: u64 = 0;
    while !end.passed() {
        round += 1;
        for channel in [ChannelKind::Alipay, ChannelKind::Wechat] {
            let due =
                !own.contains_key(channel.as_str()) || round.is_multiple_of(OWN_PAYMENT_ROUNDS);
            if due && let Some(payment) = own_payment(shared, rng, channel, round).await {
                own.insert(channel.as_str(), payment);
            }
        }
        let kind = kinds[next % kinds.len()];
        if attack(shared, keys, rng, kind, &own).await.is_some() {
            next += 1;
        }
        // A pause between rounds: the attacker is one client among the workload's, not a
        // flood (the bench measures floods).
        tokio::time::sleep(Duration::from_millis(rng.u64(50..250))).await;
    }
}

/// A small order of the attacker's own, paid at the channel; its trade as the channel reports
/// it. `None` when any step did not work out (a fault, a lost answer): the next round tries
/// again.
async fn own_payment(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    channel: ChannelKind,
    round: u64,
) -> Option<OwnPayment> {
    let tenant = rng.usize(..shared.tenants.len());
    let order_id = format!("{}-atk-o-{round}-{}", shared.run, channel.as_str());
    let body = json!({
        "order_id": order_id,
        "user_id": format!("{}-atk-u", shared.run),
        "amount": rng.i64(1..100),
        "currency": "CNY",
        "entitlement": {"sku": "vip-month", "quantity": 1},
    });
    let mut created = false;
    for attempt in 0..10 {
        let answers = create_order(shared, attempt, tenant, &body, 1).await;
        if answers
            .iter()
            .flatten()
            .any(|answer| matches!(answer.status, 200 | 201))
        {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if !created {
        return None;
    }
    let pending = Pending {
        label: format!("payment/{tenant}/pay-{order_id}"),
        tenant,
        path: format!("/v1/orders/{order_id}/payments"),
        body: json!({"channel": channel.as_str()}),
        key: format!("pay-{order_id}"),
        token_needed: true,
        kind: PendingKind::Payment,
    };
    let (answer, _) = keyed(shared, rng, pending, None, Duration::from_secs(20), 8).await;
    let number = answer?.json()["payment_no"].as_str()?.to_owned();
    shared
        .sim(
            reqwest::Method::POST,
            &format!("/sim/trades/{number}/pay"),
            json!({}),
        )
        .await?;
    // The channel queues its notify as it charges; read the trade until it shows it.
    for _ in 0..TRADE_READS_MAX {
        let trade = shared
            .sim(
                reqwest::Method::GET,
                &format!("/sim/trades/{number}"),
                Value::Null,
            )
            .await
            .unwrap_or(Value::Null);
        if let Some(facts) = paid_trade(&trade) {
            return Some(OwnPayment {
                tenant,
                channel,
                trade: facts,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// A paid trade's facts from the simulator's view of it, with the id of its success notify.
fn paid_trade(trade: &Value) -> Option<TradeFacts> {
    if trade["status"] != "PAID" {
        return None;
    }
    let notify_id = trade["notifies"].as_array()?.iter().find(|notify| {
        matches!(
            notify["event"].as_str(),
            Some("TRADE_SUCCESS" | "TRANSACTION.SUCCESS")
        )
    })?["notify_id"]
        .as_str()?
        .to_owned();
    Some(TradeFacts {
        out_trade_no: trade["out_trade_no"].as_str()?.to_owned(),
        trade_no: trade["channel_trade_id"].as_str()?.to_owned(),
        amount_fen: trade["amount_fen"].as_i64()?,
        notify_id,
        paid_at_ms: trade["paid_at_ms"].as_i64()?,
    })
}

/// A victim of `channel` (any channel when `None`), at random; `None` while there is none.
/// A tenant no attack has aimed at yet is preferred while it has a victim, so that the attacks
/// reach every tenant with waiting payments rather than whichever the draws favour (the audit
/// wants victims of more than one tenant).
fn pick_victim(shared: &Shared, rng: &mut fastrand::Rng, channel: Option<&str>) -> Option<Victim> {
    let log = shared.log();
    let candidates: Vec<&Victim> = log
        .victims
        .iter()
        .filter(|victim| channel.is_none_or(|channel| victim.channel == channel))
        .collect();
    let untouched: Vec<&Victim> = candidates
        .iter()
        .copied()
        .filter(|victim| !log.attacks.victim_tenants.contains(&victim.tenant))
        .collect();
    let pool = if untouched.is_empty() {
        candidates
    } else {
        untouched
    };
    if pool.is_empty() {
        return None;
    }
    Some(pool[rng.usize(..pool.len())].clone())
}

/// A victim's trade as a forger states it: its number and real amount, made-up rest.
fn forged_trade(victim: &Victim, rng: &mut fastrand::Rng) -> TradeFacts {
    TradeFacts {
        out_trade_no: victim.payment_no.clone(),
        trade_no: format!("2099{}", fresh(rng, 20)),
        amount_fen: victim.amount_fen,
        notify_id: format!("atk{}", fresh(rng, 24)),
        paid_at_ms: mideng::clock::now_ms(),
    }
}

/// Sends one round of `kind`; `None` when it could not be sent yet (no victim of the right
/// channel, no payment of its own yet).
async fn attack(
    shared: &Shared,
    keys: &AttackerKeys,
    rng: &mut fastrand::Rng,
    kind: AttackKind,
    own: &BTreeMap<&'static str, OwnPayment>,
) -> Option<()> {
    let own_alipay = own.get("alipay");
    let now_ms = mideng::clock::now_ms();
    let (victim, notifies): (Option<Victim>, Vec<Notify>) = match kind {
        AttackKind::Replay => {
            let payment = if rng.bool() {
                own.get("alipay").or(own.get("wechat"))
            } else {
                own.get("wechat").or(own.get("alipay"))
            }?;
            let mut notifies = Vec::new();
            for _ in 0..rng.usize(3..7) {
                notifies.push(genuine(keys, rng, payment).ok()?);
            }
            (None, notifies)
        }
        AttackKind::Retarget | AttackKind::Pollute => {
            let payment = own_alipay?;
            let victim = pick_victim(shared, rng, None)?;
            let genuine =
                alipay_success(keys, &keys.alipay_channel, &payment.trade, now_ms).ok()?;
            let fields = retarget_fields(
                &victim.payment_no,
                victim.amount_fen,
                &format!("atk{}", fresh(rng, 24)),
                kind == AttackKind::Pollute,
            )
            .ok()?;
            let notify = Notify {
                channel: ChannelKind::Alipay,
                headers: Vec::new(),
                body: polluted(&genuine, &fields, rng.bool()),
            };
            (Some(victim), vec![notify])
        }
        AttackKind::WrongKey => {
            let victim = pick_victim(shared, rng, None)?;
            let (alipay, wechat) = (&keys.alipay_merchant, &keys.wechat_merchant);
            let notify = success_for(keys, &victim, rng, now_ms, alipay, wechat)?;
            (Some(victim), vec![notify])
        }
        AttackKind::CrossChannel => {
            let victim = pick_victim(shared, rng, Some("wechat"))?;
            let trade = forged_trade(&victim, rng);
            let form = alipay_success(keys, &keys.alipay_channel, &trade, now_ms).ok()?;
            (Some(victim), vec![alipay_notify(form)])
        }
        AttackKind::WechatStale | AttackKind::WechatUnknownSerial => {
            let victim = pick_victim(shared, rng, Some("wechat"))?;
            let trade = forged_trade(&victim, rng);
            let (signed_at, serial) = if kind == AttackKind::WechatStale {
                (now_secs() - STALE_SECS, keys.wechat_serial.as_str())
            } else {
                (now_secs(), UNKNOWN_SERIAL)
            };
            let notification = wechat_success(
                keys,
                &keys.wechat_platform,
                &trade,
                signed_at,
                serial,
                &fresh(rng, 12),
            )
            .ok()?;
            (Some(victim), vec![wechat_notify(notification)])
        }
        AttackKind::LeakedChannelKey => {
            let victim = pick_victim(shared, rng, None)?;
            let (alipay, wechat) = (&keys.alipay_channel, &keys.wechat_platform);
            let notify = success_for(keys, &victim, rng, now_ms, alipay, wechat)?;
            (Some(victim), vec![notify])
        }
    };
    let own_tenant = match kind {
        AttackKind::Replay | AttackKind::Retarget | AttackKind::Pollute => own_alipay
            .or(own.get("wechat"))
            .map_or(usize::MAX, |payment| payment.tenant),
        // Forged from nothing: no payment of its own behind it, so never "across tenants".
        _ => victim.as_ref().map_or(usize::MAX, |victim| victim.tenant),
    };
    let target = Target { own_tenant, victim };
    // Some copies at once, as a channel's concurrent retries or a replaying client send them.
    let mut notifies = notifies.into_iter();
    while let Some(first) = notifies.next() {
        let second = if rng.bool() { notifies.next() } else { None };
        let instance = rng.usize(..shared.bases.len());
        let (one, two) = tokio::join!(send(shared, instance, &first), async {
            match &second {
                Some(notify) => Some(send(shared, instance + 1, notify).await),
                None => None,
            }
        });
        let mut log = shared.log();
        log.attacks.record(kind, &target, one);
        if let Some(two) = two {
            log.attacks.record(kind, &target, two);
        }
    }
    Some(())
}

/// The genuine notify of the attacker's own payment, as the channel sends it again.
fn genuine(
    keys: &AttackerKeys,
    rng: &mut fastrand::Rng,
    payment: &OwnPayment,
) -> anyhow::Result<Notify> {
    Ok(match payment.channel {
        ChannelKind::Alipay => alipay_notify(alipay_success(
            keys,
            &keys.alipay_channel,
            &payment.trade,
            mideng::clock::now_ms(),
        )?),
        ChannelKind::Wechat => wechat_notify(wechat_success(
            keys,
            &keys.wechat_platform,
            &payment.trade,
            now_secs(),
            &keys.wechat_serial,
            &fresh(rng, 12),
        )?),
    })
}

/// A success for `victim`'s payment in its channel's format, signed with `alipay_key` or
/// `wechat_key` (under the platform's serial): the merchant's keys for a forgery, the channel's
/// for a leaked key.
fn success_for(
    keys: &AttackerKeys,
    victim: &Victim,
    rng: &mut fastrand::Rng,
    now_ms: i64,
    alipay_key: &PrivateKey,
    wechat_key: &PrivateKey,
) -> Option<Notify> {
    let trade = forged_trade(victim, rng);
    Some(match ChannelKind::parse(&victim.channel).ok()? {
        ChannelKind::Alipay => {
            alipay_notify(alipay_success(keys, alipay_key, &trade, now_ms).ok()?)
        }
        ChannelKind::Wechat => wechat_notify(
            wechat_success(
                keys,
                wechat_key,
                &trade,
                now_secs(),
                &keys.wechat_serial,
                &fresh(rng, 12),
            )
            .ok()?,
        ),
    })
}

fn alipay_notify(body: String) -> Notify {
    Notify {
        channel: ChannelKind::Alipay,
        headers: Vec::new(),
        body,
    }
}

fn wechat_notify((headers, body): (Vec<(String, String)>, String)) -> Notify {
    Notify {
        channel: ChannelKind::Wechat,
        headers,
        body,
    }
}

async fn send(shared: &Shared, instance: usize, notify: &Notify) -> Verdict {
    let content_type = match notify.channel {
        ChannelKind::Alipay => "application/x-www-form-urlencoded",
        ChannelKind::Wechat => "application/json",
    };
    let answer = shared
        .post_notify(
            instance,
            notify.channel.as_str(),
            content_type,
            &notify.headers,
            notify.body.clone(),
        )
        .await;
    match answer {
        Some((status, body)) => verdict(notify.channel, Some(status), &body),
        None => Verdict::NoAnswer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_mean_what_the_channel_reads_in_them() {
        use ChannelKind::{Alipay, Wechat};
        assert_eq!(
            verdict(Alipay, Some(200), b"success"),
            Verdict::Acknowledged
        );
        assert_eq!(verdict(Alipay, Some(200), b"failure"), Verdict::Refused);
        assert_eq!(verdict(Alipay, Some(502), b""), Verdict::NoAnswer);
        assert_eq!(verdict(Wechat, Some(204), b""), Verdict::Acknowledged);
        assert_eq!(verdict(Wechat, Some(400), b"{}"), Verdict::Refused);
        assert_eq!(verdict(Wechat, Some(500), b"{}"), Verdict::NoAnswer);
        assert_eq!(verdict(Wechat, None, b""), Verdict::NoAnswer);
    }

    /// An attack that had to be refused and was acknowledged is kept for the audit; a replay
    /// acknowledged is what should happen.
    #[test]
    fn an_acknowledged_attack_is_kept_and_an_acknowledged_replay_is_not() {
        let mut log = AttackLog::default();
        let victim = Victim {
            tenant: 1,
            payment_no: "VICTIM1".to_owned(),
            channel: "alipay".to_owned(),
            amount_fen: 888_800,
        };
        let own = Target {
            own_tenant: 0,
            victim: None,
        };
        let aimed = Target {
            own_tenant: 0,
            victim: Some(victim),
        };
        log.record(AttackKind::Replay, &own, Verdict::Acknowledged);
        log.record(AttackKind::Retarget, &aimed, Verdict::Refused);
        assert!(log.accepted.is_empty());
        log.record(AttackKind::Retarget, &aimed, Verdict::Acknowledged);
        assert_eq!(log.accepted, ["retarget aimed at VICTIM1 was acknowledged"]);
        let report = log.report();
        assert_eq!(
            (report.victims, report.cross_tenant, report.accepted),
            (1, 2, 1)
        );
        assert_eq!(report.kinds["retarget"].sent, 2);
        assert_eq!(report.sent(), 3);
    }
}
