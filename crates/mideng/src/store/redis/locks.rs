//! Locks on Redis: one key per held lock with its owner and native expiry, each fence the
//! slot's counter or the server's time in microseconds, whichever is higher.

use super::*;

/// Takes a lock. KEYS: the lock, its slot's fence. ARGV: owner, time-to-live in ms. Returns
/// the new fence, or 0 when the lock is held: the slot's last fence plus one, or the server's
/// time in microseconds when that is higher (below 2^53, so exact in Lua's numbers).
static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now_us)
  local text = string.format('%.0f', fence)
  redis.call('SET', KEYS[2], text)
  return text
end
return '0'
",
    )
});

/// Releases a lock only if the caller still owns it: a plain `DEL` would free the lock of
/// whoever took it after the caller's time ran out. KEYS: the lock. ARGV: owner. Returns 1 or 0.
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Extends a lock only if the caller still owns it. KEYS: the lock. ARGV: owner, time-to-live
/// in ms. Returns 1 or 0.
static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
",
    )
});

#[async_trait]
impl<C> LockStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn try_acquire(
        &self,
        name: &Name,
        ttl: Duration,
    ) -> Result<Option<LockGuard>, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::LOCK_ACQUIRE);
        let ttl_ms = lock::ttl_ms(ttl)?;
        let held_until_ms = now_ms().saturating_add(ttl_ms);
        let owner = new_owner();
        let mut invocation = ACQUIRE_SCRIPT.prepare_invoke();
        invocation
            .key(self.lock_key(name))
            .key(self.fence_key(name))
            .arg(owner.as_str())
            .arg(ttl_ms);
        let fence: String = self.invoke(&invocation).await?;
        let fence: u64 = fence
            .parse()
            .map_err(|_| corrupt("a lock's fence is not a number"))?;
        if fence == 0 {
            return Ok(None);
        }
        Ok(Some(LockGuard {
            name: name.clone(),
            owner,
            fence,
            held_until_ms,
        }))
    }

    async fn release(&self, guard: &LockGuard) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::LOCK_RELEASE);
        let mut invocation = RELEASE_SCRIPT.prepare_invoke();
        invocation
            .key(self.lock_key(&guard.name))
            .arg(guard.owner.as_str());
        let released: i64 = self.invoke(&invocation).await?;
        Ok(released == 1)
    }

    async fn renew(&self, guard: &LockGuard, ttl: Duration) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::LOCK_RENEW);
        let ttl_ms = lock::ttl_ms(ttl)?;
        let mut invocation = RENEW_SCRIPT.prepare_invoke();
        invocation
            .key(self.lock_key(&guard.name))
            .arg(guard.owner.as_str())
            .arg(ttl_ms);
        let renewed: i64 = self.invoke(&invocation).await?;
        Ok(renewed == 1)
    }
}
