//! In-process store: every contract on a mutex-guarded map.
//!
//! For unit tests and single-process deployments. Nothing survives a restart, and two
//! processes do not see each other's records: use a SQL store or Redis as soon as more than one
//! instance serves the same keys. The mutex is a std mutex held only for map operations, never
//! across an `.await`.

use std::collections::HashMap;
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
use crate::token::{self, Consumption, IssuedToken, Token, TokenStore};

#[derive(Default)]
struct Tables {
    records: HashMap<(Scope, IdempotencyKey), Record>,
    /// token -> (scope, expires_at_ms, consumed)
    tokens: HashMap<(Scope, String), (i64, bool)>,
    /// name -> (owner, fence, held_until_ms)
    locks: HashMap<Name, (String, u64, i64)>,
    /// (kind, id) -> (state, version)
    states: HashMap<(String, Name), (String, u64)>,
}

/// The in-process store. Cloning shares the same tables.
#[derive(Clone, Default)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
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
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::TOKEN_ISSUE);
        let expires_at_ms = now_ms().saturating_add(token::ttl_ms(ttl)?);
        let token = Token::generate();
        self.tables().tokens.insert(
            (scope.clone(), token.as_str().to_owned()),
            (expires_at_ms, false),
        );
        Ok(IssuedToken {
            token,
            expires_at_ms,
        })
    }

    async fn consume_token(&self, scope: &Scope, token: &Token) -> Result<Consumption, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::TOKEN_CONSUME);
        let now = now_ms();
        let mut tables = self.tables();
        Ok(
            match tables
                .tokens
                .get_mut(&(scope.clone(), token.as_str().to_owned()))
            {
                Some((expires_at_ms, _)) if *expires_at_ms <= now => Consumption::Unknown,
                Some((_, consumed)) if *consumed => Consumption::AlreadyConsumed,
                Some((_, consumed)) => {
                    *consumed = true;
                    Consumption::Consumed
                }
                None => Consumption::Unknown,
            },
        )
    }

    async fn purge_expired_tokens(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::TOKEN_PURGE);
        let mut tables = self.tables();
        let doomed: Vec<_> = tables
            .tokens
            .iter()
            .filter(|(_, (expires_at_ms, _))| *expires_at_ms <= now_ms)
            .map(|(identity, _)| identity.clone())
            .take(limit as usize)
            .collect();
        for identity in &doomed {
            tables.tokens.remove(identity);
        }
        Ok(doomed.len() as u64)
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
        let held_until_ms = now_ms().saturating_add(lock::ttl_ms(ttl)?);
        let now = now_ms();
        let mut tables = self.tables();
        let fence = match tables.locks.get(name) {
            Some((_, _, until)) if *until > now => return Ok(None),
            Some((_, fence, _)) => fence + 1,
            None => 1,
        };
        let owner = new_owner();
        tables
            .locks
            .insert(name.clone(), (owner.clone(), fence, held_until_ms));
        Ok(Some(LockGuard {
            name: name.clone(),
            owner,
            fence,
            held_until_ms,
        }))
    }

    async fn release(&self, guard: &LockGuard) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::LOCK_RELEASE);
        let mut tables = self.tables();
        match tables.locks.get_mut(&guard.name) {
            Some((owner, _, until)) if *owner == guard.owner => {
                owner.clear();
                *until = 0;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn renew(&self, guard: &LockGuard, ttl: Duration) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Memory, op::LOCK_RENEW);
        let held_until_ms = now_ms().saturating_add(lock::ttl_ms(ttl)?);
        let mut tables = self.tables();
        match tables.locks.get_mut(&guard.name) {
            Some((owner, _, until)) if *owner == guard.owner => {
                *until = held_until_ms;
                Ok(true)
            }
            _ => Ok(false),
        }
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
