//! In-process store: every contract on a mutex-guarded map.
//!
//! For unit tests and single-process deployments. Nothing survives a restart, and two
//! processes do not see each other's records: use a SQL store or Redis as soon as more than one
//! instance serves the same keys. The mutex is a std mutex held only for map operations, never
//! across an `.await`.
//!
//! Tokens are the one table a caller outside can grow (any client of a route that issues them),
//! so it is bounded twice: by [`TokenLimits`] on the unspent ones, and by keeping no more
//! tokens than [`TokenLimits::total_max`] at all — a spent token, kept only to tell a duplicate
//! submission from a forgery, is forgotten first when the store is full (its duplicate is then
//! answered [`Consumption::Unknown`], still refused).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::now_ms;
use crate::error::StoreError;
use crate::key::{Fingerprint, IdempotencyKey, Name, Scope};
use crate::latency::{Backend, StoreTimer, op};
use crate::lock::{self, LockGuard, LockStore};
use crate::record::{
    Decision, Lease, Record, RecordPolicy, RecordState, RecordStore, StoredResponse, Verdict,
    judge, new_owner, retry_after,
};
use crate::state::StateStore;
use crate::token::{
    self, Consumption, IssueError, IssuedToken, Token, TokenCap, TokenLimits, TokenStore,
};

/// One token as kept.
struct TokenEntry {
    scope: Scope,
    expires_at_ms: i64,
    spent: bool,
    /// The idempotency key of the request that spent it, if it had one.
    spent_by: Option<IdempotencyKey>,
}

/// A token's place in an expiry order: (expires_at_ms, token).
type ByExpiry = BTreeSet<(i64, Arc<str>)>;

/// Every token kept until it expires, and the orders the limits and the purge walk. Issued
/// tokens are 256 random bits, so the text alone names one; its scope is checked on use.
#[derive(Default)]
struct Tokens {
    entries: HashMap<Arc<str>, TokenEntry>,
    /// Unspent tokens, all scopes: what [`TokenLimits::total_max`] counts.
    unspent: ByExpiry,
    /// Unspent tokens per scope: what [`TokenLimits::per_scope_max`] counts.
    unspent_by_scope: HashMap<Scope, ByExpiry>,
    /// Spent tokens, kept until they expire to recognise a duplicate; forgotten first when the
    /// store is full.
    spent: ByExpiry,
}

impl Tokens {
    /// Forgets at most `limit` tokens that expired at `now_ms`, earliest first; returns how many.
    fn forget_expired(&mut self, now_ms: i64, limit: usize) -> usize {
        let mut forgotten = 0;
        while forgotten < limit {
            let unspent = self.unspent.first().filter(|(at, _)| *at <= now_ms);
            let spent = self.spent.first().filter(|(at, _)| *at <= now_ms);
            let next = match (unspent, spent) {
                (Some(unspent), Some(spent)) if spent < unspent => spent.clone(),
                (Some(unspent), _) => unspent.clone(),
                (None, Some(spent)) => spent.clone(),
                (None, None) => break,
            };
            self.forget(&next);
            forgotten += 1;
        }
        forgotten
    }

    /// Forgets one token, wherever it is kept.
    fn forget(&mut self, place: &(i64, Arc<str>)) {
        self.unspent.remove(place);
        self.spent.remove(place);
        if let Some(entry) = self.entries.remove(&place.1) {
            self.remove_from_scope(&entry.scope, place);
        }
    }

    fn remove_from_scope(&mut self, scope: &Scope, place: &(i64, Arc<str>)) {
        if let Some(of_scope) = self.unspent_by_scope.get_mut(scope) {
            of_scope.remove(place);
            if of_scope.is_empty() {
                self.unspent_by_scope.remove(scope);
            }
        }
    }

    fn issue(
        &mut self,
        scope: &Scope,
        token: &Token,
        expires_at_ms: i64,
        limits: TokenLimits,
        now_ms: i64,
    ) -> Result<(), IssueError> {
        self.forget_expired(now_ms, usize::MAX);
        let per_scope_max = limits.per_scope_max() as usize;
        let total_max = limits.total_max() as usize;
        if let Some(of_scope) = self.unspent_by_scope.get(scope)
            && of_scope.len() >= per_scope_max
        {
            let earliest = of_scope.first().map(|(at, _)| *at);
            return Err(token::full(TokenCap::Scope, earliest, now_ms));
        }
        if self.unspent.len() >= total_max {
            let earliest = self.unspent.first().map(|(at, _)| *at);
            return Err(token::full(TokenCap::Total, earliest, now_ms));
        }
        // Room for an unspent one, but perhaps not for one more kept token: a spent one goes.
        while self.entries.len() >= total_max {
            let Some(oldest) = self.spent.first().cloned() else {
                break;
            };
            self.forget(&oldest);
        }
        let text: Arc<str> = Arc::from(token.as_str());
        let place = (expires_at_ms, text.clone());
        self.unspent.insert(place.clone());
        self.unspent_by_scope
            .entry(scope.clone())
            .or_default()
            .insert(place);
        self.entries.insert(
            text,
            TokenEntry {
                scope: scope.clone(),
                expires_at_ms,
                spent: false,
                spent_by: None,
            },
        );
        debug_assert!(self.entries.len() <= total_max);
        Ok(())
    }

    fn consume(
        &mut self,
        scope: &Scope,
        token: &Token,
        key: Option<&IdempotencyKey>,
        now_ms: i64,
    ) -> Consumption {
        let Some(entry) = self
            .entries
            .get_mut(token.as_str())
            .filter(|entry| entry.scope == *scope)
        else {
            return Consumption::Unknown;
        };
        if entry.expires_at_ms <= now_ms {
            return Consumption::Unknown;
        }
        if entry.spent {
            return match (&entry.spent_by, key) {
                (Some(spent_by), Some(key)) if spent_by == key => Consumption::SameKey,
                _ => Consumption::AlreadyConsumed,
            };
        }
        entry.spent = true;
        entry.spent_by = key.cloned();
        let place = (entry.expires_at_ms, Arc::<str>::from(token.as_str()));
        self.unspent.remove(&place);
        self.remove_from_scope(scope, &place);
        self.spent.insert(place);
        Consumption::Consumed
    }
}

/// One held lock.
struct HeldLock {
    owner: String,
    fence: u64,
    held_until_ms: i64,
}

/// The held locks, and one fence counter for them all. An entry lives while its lock is held:
/// a release removes it, and every acquisition first forgets the locks whose time ran out, so
/// the table holds at most the locks held at once, however many names were ever locked. The
/// fence is one counter for every name, so it stays strictly increasing for each name although
/// a name's entry is forgotten, and it is never below the time in microseconds, so a new
/// process does not hand out fences that its predecessor already gave.
#[derive(Default)]
struct Locks {
    held: HashMap<Name, HeldLock>,
    /// (held_until_ms, name) of every held lock: the expiry order the sweep walks.
    by_expiry: BTreeSet<(i64, Name)>,
    last_fence: u64,
}

impl Locks {
    /// Forgets every lock whose time ran out by `now_ms`.
    fn forget_expired(&mut self, now_ms: i64) {
        while let Some((until, name)) = self.by_expiry.first().cloned() {
            if until > now_ms {
                break;
            }
            self.by_expiry.remove(&(until, name.clone()));
            self.held.remove(&name);
        }
    }

    fn try_acquire(&mut self, name: &Name, held_until_ms: i64, now_ms: i64) -> Option<LockGuard> {
        self.forget_expired(now_ms);
        if self.held.contains_key(name) {
            return None;
        }
        self.last_fence = crate::lock::next_fence(self.last_fence, now_ms);
        let owner = new_owner();
        self.by_expiry.insert((held_until_ms, name.clone()));
        self.held.insert(
            name.clone(),
            HeldLock {
                owner: owner.clone(),
                fence: self.last_fence,
                held_until_ms,
            },
        );
        Some(LockGuard {
            name: name.clone(),
            owner,
            fence: self.last_fence,
            held_until_ms,
        })
    }

    /// Removes the lock of `guard` if `guard` still holds it.
    fn release(&mut self, guard: &LockGuard) -> bool {
        match self.held.get(&guard.name) {
            Some(held) if held.owner == guard.owner && held.fence == guard.fence => {
                self.by_expiry
                    .remove(&(held.held_until_ms, guard.name.clone()));
                self.held.remove(&guard.name);
                true
            }
            _ => false,
        }
    }

    /// Extends the lock of `guard` to `held_until_ms` if `guard` still holds it, unexpired.
    fn renew(&mut self, guard: &LockGuard, held_until_ms: i64, now_ms: i64) -> bool {
        self.forget_expired(now_ms);
        match self.held.get_mut(&guard.name) {
            Some(held) if held.owner == guard.owner && held.fence == guard.fence => {
                self.by_expiry
                    .remove(&(held.held_until_ms, guard.name.clone()));
                held.held_until_ms = held_until_ms;
                self.by_expiry.insert((held_until_ms, guard.name.clone()));
                true
            }
            _ => false,
        }
    }
}

#[derive(Default)]
struct Tables {
    records: HashMap<(Scope, IdempotencyKey), Record>,
    tokens: Tokens,
    locks: Locks,
    /// (kind, id) -> (state, version)
    states: HashMap<(String, Name), (String, u64)>,
}

/// The in-process store. Cloning shares the same tables.
#[derive(Clone, Default)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
    token_limits: TokenLimits,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("MemoryStore")
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store (the same tables) issuing tokens under `limits` instead of the default
    /// ones; the limits belong to this handle, the tables to every clone.
    pub fn with_token_limits(mut self, limits: TokenLimits) -> Self {
        self.token_limits = limits;
        self
    }

    /// How many locks the store keeps: the ones held now (and not yet found expired), never
    /// one per name ever locked.
    pub fn lock_entries(&self) -> usize {
        self.tables().locks.held.len()
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // A panic while holding this lock leaves maps that are still consistent (every update
        // is a single insert or field write), so a poisoned lock is safe to keep using.
        self.tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn owns(record: &Record, lease: &Lease) -> bool {
    record.owner == lease.owner
        && record.fence == lease.fence
        && record.state == RecordState::InProgress
}

#[async_trait]
impl RecordStore for MemoryStore {
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::RECORD_BEGIN);
        let now = now_ms();
        let mut tables = self.tables();
        let identity = (scope.clone(), key.clone());
        let (fence, taken_over) = match tables.records.get(&identity) {
            None => (1, false),
            Some(record) => match judge(
                record.state,
                &record.fingerprint,
                record.lease_until_ms,
                record.expires_at_ms,
                fingerprint,
                now,
            ) {
                Verdict::TakeOver => (record.fence + 1, true),
                Verdict::Replay => {
                    let response = record.response.clone().ok_or_else(|| {
                        StoreError::Corrupt("completed record without a response".to_owned())
                    })?;
                    return Ok(Decision::Replay(response));
                }
                Verdict::InFlight { retry_after_ms } => {
                    return Ok(Decision::InFlight {
                        retry_after: retry_after(retry_after_ms),
                    });
                }
                Verdict::Mismatch => return Ok(Decision::Mismatch),
            },
        };
        let lease = Lease {
            scope: scope.clone(),
            key: key.clone(),
            fence,
            owner: new_owner(),
            lease_until_ms: now.saturating_add(policy.lease_ms()),
            retention_ms: policy.retention_ms(),
            taken_over,
        };
        tables.records.insert(
            identity,
            Record {
                scope: scope.clone(),
                key: key.clone(),
                fingerprint: *fingerprint,
                state: RecordState::InProgress,
                fence,
                owner: lease.owner.clone(),
                lease_until_ms: lease.lease_until_ms,
                response: None,
                created_at_ms: now,
                expires_at_ms: now.saturating_add(policy.retention_ms()),
            },
        );
        Ok(Decision::Proceed(lease))
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::RECORD_COMPLETE);
        response.validate()?;
        let now = now_ms();
        let mut tables = self.tables();
        let record = tables
            .records
            .get_mut(&(lease.scope.clone(), lease.key.clone()))
            .filter(|record| owns(record, lease))
            .ok_or(StoreError::StaleLease)?;
        record.state = RecordState::Completed;
        record.response = Some(response.clone());
        record.expires_at_ms = now.saturating_add(lease.retention_ms);
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::RECORD_ABANDON);
        let mut tables = self.tables();
        let record = tables
            .records
            .get_mut(&(lease.scope.clone(), lease.key.clone()))
            .filter(|record| owns(record, lease))
            .ok_or(StoreError::StaleLease)?;
        record.state = RecordState::Abandoned;
        record.lease_until_ms = 0;
        Ok(())
    }

    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::RECORD_FIND);
        Ok(self
            .tables()
            .records
            .get(&(scope.clone(), key.clone()))
            .cloned())
    }

    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::RECORD_PURGE);
        let mut tables = self.tables();
        let doomed: Vec<_> = tables
            .records
            .iter()
            .filter(|(_, record)| record.expires_at_ms <= now_ms && record.lease_until_ms <= now_ms)
            .map(|(identity, _)| identity.clone())
            .take(limit as usize)
            .collect();
        for identity in &doomed {
            tables.records.remove(identity);
        }
        Ok(doomed.len() as u64)
    }
}

#[async_trait]
impl TokenStore for MemoryStore {
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, IssueError> {
        let _timer = StoreTimer::start(Backend::Memory, op::TOKEN_ISSUE);
        let now = now_ms();
        let expires_at_ms = now.saturating_add(token::ttl_ms(ttl)?);
        let token = Token::generate();
        self.tables()
            .tokens
            .issue(scope, &token, expires_at_ms, self.token_limits, now)?;
        Ok(IssuedToken {
            token,
            expires_at_ms,
        })
    }

    async fn consume_token_for(
        &self,
        scope: &Scope,
        token: &Token,
        key: Option<&IdempotencyKey>,
    ) -> Result<Consumption, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::TOKEN_CONSUME);
        let now = now_ms();
        Ok(self.tables().tokens.consume(scope, token, key, now))
    }

    async fn purge_expired_tokens(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::TOKEN_PURGE);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let forgotten = self.tables().tokens.forget_expired(now_ms, limit);
        Ok(u64::try_from(forgotten).unwrap_or(u64::MAX))
    }
}

#[async_trait]
impl LockStore for MemoryStore {
    async fn try_acquire(
        &self,
        name: &Name,
        ttl: Duration,
    ) -> Result<Option<LockGuard>, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::LOCK_ACQUIRE);
        let ttl_ms = lock::ttl_ms(ttl)?;
        let now = now_ms();
        Ok(self
            .tables()
            .locks
            .try_acquire(name, now.saturating_add(ttl_ms), now))
    }

    async fn release(&self, guard: &LockGuard) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::LOCK_RELEASE);
        Ok(self.tables().locks.release(guard))
    }

    async fn renew(&self, guard: &LockGuard, ttl: Duration) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::LOCK_RENEW);
        let ttl_ms = lock::ttl_ms(ttl)?;
        let now = now_ms();
        Ok(self
            .tables()
            .locks
            .renew(guard, now.saturating_add(ttl_ms), now))
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    async fn create_entity(
        &self,
        kind: &str,
        id: &Name,
        initial: &str,
    ) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::STATE_CREATE);
        let mut tables = self.tables();
        let identity = (kind.to_owned(), id.clone());
        if tables.states.contains_key(&identity) {
            return Ok(false);
        }
        tables.states.insert(identity, (initial.to_owned(), 0));
        Ok(true)
    }

    async fn find_state(&self, kind: &str, id: &Name) -> Result<Option<(String, u64)>, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::STATE_FIND);
        Ok(self
            .tables()
            .states
            .get(&(kind.to_owned(), id.clone()))
            .cloned())
    }

    async fn compare_and_set(
        &self,
        kind: &str,
        id: &Name,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::STATE_TRANSITION);
        let mut tables = self.tables();
        match tables.states.get_mut(&(kind.to_owned(), id.clone())) {
            Some((state, version)) if state == from => {
                *state = to.to_owned();
                *version += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_store_forgets_spent_tokens_first_and_never_keeps_more_than_its_total() {
        let limits = TokenLimits::new(1, 2).expect("valid limits");
        let scopes: Vec<Scope> = (0..3)
            .map(|index| Scope::new(&format!("t{index}"), "checkout").expect("scope"))
            .collect();
        let (now, expires) = (1_000, 60_000);
        let mut tokens = Tokens::default();
        let spent = Token::generate();
        tokens
            .issue(&scopes[0], &spent, expires, limits, now)
            .expect("room");
        assert_eq!(
            tokens.consume(&scopes[0], &spent, None, now),
            Consumption::Consumed
        );
        let kept = Token::generate();
        tokens
            .issue(&scopes[1], &kept, expires, limits, now)
            .expect("room: one unspent");
        assert_eq!(
            tokens.consume(&scopes[0], &spent, None, now),
            Consumption::AlreadyConsumed,
            "a spent token is kept while there is room"
        );
        let last = Token::generate();
        tokens
            .issue(&scopes[2], &last, expires, limits, now)
            .expect("two unspent is the total");
        assert_eq!(tokens.entries.len(), 2, "the spent one made room");
        assert_eq!(
            tokens.consume(&scopes[0], &spent, None, now),
            Consumption::Unknown,
            "forgotten, and still refused"
        );
        assert!(matches!(
            tokens.issue(&scopes[0], &Token::generate(), expires, limits, now),
            Err(IssueError::Full {
                cap: TokenCap::Total,
                ..
            })
        ));
        assert_eq!(
            tokens.consume(&scopes[2], &last, None, now),
            Consumption::Consumed
        );
        assert_eq!(tokens.forget_expired(expires, usize::MAX), 2);
        assert!(tokens.entries.is_empty() && tokens.unspent_by_scope.is_empty());
    }
}
