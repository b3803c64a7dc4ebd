//! Group commit of first-time deducts (the `group-commit` wallet strategy, PostgreSQL): the
//! deducts that arrive while earlier groups are in flight go to the database together, as one
//! statement and one commit ([`deduct_group_postgres`]).
//!
//! There is no timer: a deduct that finds a free slot goes at once (a group of one, the
//! single statement), and the ones that queue meanwhile make the next group, up to
//! [`GROUP_COMMIT_REQUESTS_MAX`]. So an idle service adds no wait, and a busy one makes groups
//! as large as the time a group takes lets queue: the window is the round trip in flight,
//! not a guess (Tokio's timers tick in milliseconds, far coarser than the few hundred
//! microseconds a window should last). [`GROUP_COMMIT_IN_FLIGHT`] groups run at once.
//!
//! Each deduct gets its own answer: debited (its record written with its answer by the group's
//! statement), its own way (the group left it out or was undone: the caller deducts it alone,
//! in a transaction that begins its record first), or an unknown outcome (the connection broke
//! after the group's statement was sent; the request's key tells later). A full queue, a
//! stopped worker or a connection that cannot be had sends a deduct its own way too; so does
//! a second deduct of a key or of an order in the same group, which would make the group's
//! statement meet a unique key and undo everyone's. A deduct whose caller went away while it
//! queued (its request timed out) is dropped unwritten.

use std::collections::HashSet;
use std::sync::Arc;

use mideng::StoreError;
use mideng::record::AnswerTemplate;
use mideng::store::sql::{Dialect, FirstClaim, SqlStore};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::domain::clock::Clock;
use crate::domain::money::{Amount, Balance};
use crate::limits::{GROUP_COMMIT_IN_FLIGHT, GROUP_COMMIT_QUEUE_MAX, GROUP_COMMIT_REQUESTS_MAX};
use crate::store::rows::wallets::{
    Deduct, GroupOutcome, GroupedDeduct, deduct_group_postgres, deduct_recorded_postgres,
};

/// A first-time deduct waiting for its group: the record it writes, the answer, the deduct.
pub(super) struct Grouped {
    pub(super) claim: FirstClaim,
    pub(super) template: AnswerTemplate,
    pub(super) tenant_id: String,
    pub(super) user_id: String,
    pub(super) order_id: String,
    pub(super) amount: Amount,
    pub(super) entry_no: String,
}

impl Grouped {
    fn deduct(&self) -> Deduct<'_> {
        Deduct {
            tenant_id: &self.tenant_id,
            user_id: &self.user_id,
            order_id: &self.order_id,
            amount: self.amount,
            entry_no: &self.entry_no,
            now_ms: self.claim.now_ms(),
        }
    }
}

/// What became of one deduct of a group.
#[derive(Debug)]
pub(super) enum Settled {
    /// Debited down to this balance, its record written with its answer.
    Debited(Balance),
    /// Nothing written for it: the caller deducts it alone.
    OwnWay,
    /// The group's statement was sent and its answer lost: it may have committed.
    Unknown(String),
}

type Waiting = (Grouped, oneshot::Sender<Settled>);

/// The queue of an instance's deducts and the workers that send them in groups.
pub(crate) struct GroupCommit {
    queue: mpsc::Sender<Waiting>,
}

impl GroupCommit {
    /// Starts the workers on the current Tokio runtime; they stop when this is dropped.
    pub(super) fn start<D: Dialect>(store: SqlStore<D>, clock: Arc<dyn Clock>) -> Self {
        let (queue, waiting) = mpsc::channel(GROUP_COMMIT_QUEUE_MAX);
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..GROUP_COMMIT_IN_FLIGHT {
            tokio::spawn(work(store.clone(), clock.clone(), waiting.clone()));
        }
        Self { queue }
    }

    /// Sends `deduct` with the next group and waits for what became of it.
    pub(super) async fn settle(&self, deduct: Grouped) -> Settled {
        let (answer, settled) = oneshot::channel();
        if self.queue.try_send((deduct, answer)).is_err() {
            return Settled::OwnWay;
        }
        // A worker that stopped (its runtime shut down) drops the sender: the deduct's own way.
        settled.await.unwrap_or(Settled::OwnWay)
    }
}

/// One worker: takes what is queued (waiting for the first), settles it as a group, again.
async fn work<D: Dialect>(
    store: SqlStore<D>,
    clock: Arc<dyn Clock>,
    waiting: Arc<Mutex<mpsc::Receiver<Waiting>>>,
) {
    loop {
        let mut group = Vec::new();
        {
            let mut waiting = waiting.lock().await;
            if waiting
                .recv_many(&mut group, GROUP_COMMIT_REQUESTS_MAX)
                .await
                == 0
            {
                return;
            }
        }
        // A caller that went away while it waited (its request timed out) is not acted for:
        // nothing is written under its key, and a retry starts afresh.
        group.retain(|(_, answer)| !answer.is_closed());
        // The first of the group for a key, and for an order, goes in it; a second would make
        // the group's statement fail on the unique key and undo everyone's deducts, so it goes
        // its own way (where it waits for the first and is judged by its record).
        let (group, own_way) = split_repeats(group);
        for (_, answer) in own_way {
            let _ = answer.send(Settled::OwnWay);
        }
        if group.is_empty() {
            continue;
        }
        let settled = settle_group(&store, clock.now_ms(), &group).await;
        metrics::histogram!(crate::metrics::GROUP_COMMIT_SIZE).record(group.len() as f64);
        for ((_, answer), settled) in group.into_iter().zip(settled) {
            // A caller that went away meanwhile no longer listens; its key tells a retry what
            // happened.
            let _ = answer.send(settled);
        }
    }
}

/// The group without repeats (the first deduct of each key and of each order), and the
/// repeats.
fn split_repeats(group: Vec<Waiting>) -> (Vec<Waiting>, Vec<Waiting>) {
    let mut keys = HashSet::new();
    let mut orders = HashSet::new();
    group.into_iter().partition(|(grouped, _)| {
        let lease = grouped.claim.lease();
        let key = (
            lease.scope.tenant().to_owned(),
            lease.scope.operation().to_owned(),
            lease.key.as_str().to_owned(),
        );
        let order = (
            grouped.tenant_id.clone(),
            grouped.user_id.clone(),
            grouped.order_id.clone(),
        );
        // Both sets learn the deduct before the answer is read, so that a repeat of either
        // is caught whichever comes first.
        let new_key = keys.insert(key);
        let new_order = orders.insert(order);
        new_key && new_order
    })
}

/// What became of each deduct of `group`, in order.
async fn settle_group<D: Dialect>(
    store: &SqlStore<D>,
    now_ms: i64,
    group: &[Waiting],
) -> Vec<Settled> {
    let own_way = || group.iter().map(|_| Settled::OwnWay).collect();
    let Ok(mut connection) = store.pool().acquire().await else {
        return own_way();
    };
    if let [(alone, _)] = group {
        let deduct = alone.deduct();
        return vec![match deduct_recorded_postgres::<D>(
            &mut connection,
            &alone.claim,
            &alone.template,
            &deduct,
        )
        .await
        {
            Ok(Some(after)) => Settled::Debited(after),
            Ok(None) => Settled::OwnWay,
            Err(StoreError::OutcomeUnknown(message)) => Settled::Unknown(message),
            Err(_) => Settled::OwnWay,
        }];
    }
    let deducts: Vec<Deduct<'_>> = group.iter().map(|(grouped, _)| grouped.deduct()).collect();
    let input: Vec<GroupedDeduct<'_>> = group
        .iter()
        .zip(&deducts)
        .zip(0_i64..)
        .map(|(((grouped, _), deduct), seq)| {
            GroupedDeduct::new(seq, &grouped.claim, &grouped.template, deduct)
        })
        .collect();
    match deduct_group_postgres::<D>(&mut connection, &input, now_ms).await {
        Ok(GroupOutcome::Committed(debited)) => {
            let mut settled: Vec<Settled> = own_way();
            for (seq, after) in debited {
                if let Some(slot) = usize::try_from(seq)
                    .ok()
                    .and_then(|seq| settled.get_mut(seq))
                {
                    *slot = Settled::Debited(after);
                }
            }
            settled
        }
        Ok(GroupOutcome::Undone) => own_way(),
        Err(StoreError::OutcomeUnknown(message)) => group
            .iter()
            .map(|_| Settled::Unknown(message.clone()))
            .collect(),
        Err(_) => own_way(),
    }
}
