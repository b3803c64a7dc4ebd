//! State machines on Redis: an entity's state and version in a hash, created once and moved
//! by compare-and-set in one Lua script.

use super::*;

/// Creates an entity unless it exists. KEYS: the entity. ARGV: initial state. Returns 1 or 0.
static CREATE_ENTITY_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'version', '0')
return 1
",
    )
});

/// Moves an entity from one state to another. KEYS: the entity. ARGV: from, to. Returns 1 when
/// moved, 0 when the entity is missing or in another state.
static COMPARE_AND_SET_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], 'state') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'state', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  return 1
end
return 0
",
    )
});

#[async_trait]
impl<C> StateStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn create_entity(
        &self,
        kind: &str,
        id: &Name,
        initial: &str,
    ) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::STATE_CREATE);
        let mut invocation = CREATE_ENTITY_SCRIPT.prepare_invoke();
        invocation.key(self.state_key(kind, id)).arg(initial);
        let created: i64 = self.invoke(&invocation).await?;
        Ok(created == 1)
    }

    async fn find_state(&self, kind: &str, id: &Name) -> Result<Option<(String, u64)>, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::STATE_FIND);
        let mut command = redis::cmd("HMGET");
        command
            .arg(self.state_key(kind, id))
            .arg("state")
            .arg("version");
        let fields: Vec<Value> = self.query(&command).await?;
        let [state, version]: [Value; 2] = fields
            .try_into()
            .map_err(|_| corrupt("HMGET returned the wrong number of fields"))?;
        match (text_of(state)?, integer_of(version)?) {
            (Some(state), Some(version)) => Ok(Some((state, non_negative(version, "version")?))),
            (None, None) => Ok(None),
            _ => Err(corrupt(
                "entity with a state but no version, or the reverse",
            )),
        }
    }

    async fn compare_and_set(
        &self,
        kind: &str,
        id: &Name,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::STATE_TRANSITION);
        let mut invocation = COMPARE_AND_SET_SCRIPT.prepare_invoke();
        invocation.key(self.state_key(kind, id)).arg(from).arg(to);
        let moved: i64 = self.invoke(&invocation).await?;
        Ok(moved == 1)
    }
}
