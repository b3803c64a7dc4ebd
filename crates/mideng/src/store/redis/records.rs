//! Idempotency records on Redis: a hash per record, begun, completed and abandoned each by one
//! Lua script, so that the judgement and the write are one step on the server.

use super::*;

/// Decides what a request arriving with a key must do: [`crate::record::judge`] in Lua.
///
/// KEYS: the record. ARGV: now, fingerprint, owner, lease_until, expires_at (Unix ms as
/// decimal text, written as given so that Lua never formats a large number).
///
/// Returns `{'proceed', fence, taken_over}`, `{'replay', status, headers, body}`,
/// `{'inflight', retry_after_ms}`, `{'mismatch'}` or `{'corrupt', what}`.
static BEGIN_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local record = KEYS[1]
local now = tonumber(ARGV[1])
if redis.call('EXISTS', record) == 0 then
  redis.call('HSET', record, 'fingerprint', ARGV[2], 'state', 'in_progress', 'fence', '1',
    'owner', ARGV[3], 'lease_until', ARGV[4], 'created_at', ARGV[1], 'expires_at', ARGV[5])
  redis.call('PEXPIREAT', record, ARGV[5])
  return {'proceed', 1, 0}
end
local found = redis.call('HMGET', record, 'fingerprint', 'state', 'fence', 'lease_until', 'expires_at')
local fingerprint, state = found[1], found[2]
local lease_until, expires_at = tonumber(found[4]), tonumber(found[5])
if not fingerprint or not tonumber(found[3]) or not lease_until or not expires_at then
  return {'corrupt', 'record fields missing or not numbers'}
end
if state ~= 'in_progress' and state ~= 'completed' and state ~= 'abandoned' then
  return {'corrupt', 'unknown record state'}
end
if expires_at > now and state ~= 'abandoned' then
  if fingerprint ~= ARGV[2] then
    return {'mismatch'}
  end
  if state == 'completed' then
    local response = redis.call('HMGET', record, 'status', 'headers', 'body')
    return {'replay', response[1], response[2], response[3]}
  end
  if lease_until > now then
    return {'inflight', math.max(1, lease_until - now)}
  end
end
redis.call('HDEL', record, 'status', 'headers', 'body')
local fence = redis.call('HINCRBY', record, 'fence', 1)
redis.call('HSET', record, 'fingerprint', ARGV[2], 'state', 'in_progress', 'owner', ARGV[3],
  'lease_until', ARGV[4], 'created_at', ARGV[1], 'expires_at', ARGV[5])
redis.call('PEXPIREAT', record, ARGV[5])
return {'proceed', fence, 1}
",
    )
});

/// Stores the response if the lease is current. KEYS: the record. ARGV: owner, fence, status,
/// headers, body, expires_at. Returns 1 when written, 0 for a stale lease.
static COMPLETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local found = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'state')
if found[1] ~= ARGV[1] or found[2] ~= ARGV[2] or found[3] ~= 'in_progress' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[3], 'headers', ARGV[4],
  'body', ARGV[5], 'expires_at', ARGV[6])
redis.call('PEXPIREAT', KEYS[1], ARGV[6])
return 1
",
    )
});

/// Frees the key if the lease is current. KEYS: the record. ARGV: owner, fence. Returns 1 when
/// written, 0 for a stale lease.
static ABANDON_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local found = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'state')
if found[1] ~= ARGV[1] or found[2] ~= ARGV[2] or found[3] ~= 'in_progress' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'abandoned', 'lease_until', '0')
return 1
",
    )
});

/// Rebuilds a stored response from the three hash fields, all present or all absent.
fn response_of(
    status: Value,
    headers: Value,
    body: Value,
) -> Result<Option<StoredResponse>, StoreError> {
    match (integer_of(status)?, text_of(headers)?, bytes_of(body)?) {
        (Some(status), Some(headers), Some(body)) => {
            StoredResponse::from_columns(status, &headers, body).map(Some)
        }
        (None, None, None) => Ok(None),
        _ => Err(corrupt("record with part of a response")),
    }
}

/// Turns the begin script's reply into a decision; `lease` builds the lease for a fence and
/// whether it took over.
fn decision_of(
    reply: Value,
    lease: impl FnOnce(u64, bool) -> Lease,
) -> Result<Decision, StoreError> {
    let Value::Array(items) = reply else {
        return Err(corrupt("begin script returned no array"));
    };
    let mut items = items.into_iter();
    let verdict = text_of(items.next().unwrap_or(Value::Nil))?;
    let mut next = || items.next().unwrap_or(Value::Nil);
    match verdict.as_deref() {
        Some("proceed") => {
            let fence = non_negative(required(integer_of(next())?, "a fence")?, "fence")?;
            let taken_over = required(integer_of(next())?, "a take-over flag")? != 0;
            Ok(Decision::Proceed(lease(fence, taken_over)))
        }
        Some("replay") => {
            let (status, headers, body) = (next(), next(), next());
            response_of(status, headers, body)?
                .map(Decision::Replay)
                .ok_or_else(|| corrupt("completed record without a response"))
        }
        Some("inflight") => {
            let retry_after_ms = required(integer_of(next())?, "a lease end")?;
            Ok(Decision::InFlight {
                retry_after: retry_after(retry_after_ms),
            })
        }
        Some("mismatch") => Ok(Decision::Mismatch),
        Some("corrupt") => Err(StoreError::Corrupt(
            text_of(next())?.unwrap_or_else(|| "record unreadable".to_owned()),
        )),
        _ => Err(corrupt("begin script returned an unknown verdict")),
    }
}

/// The hash fields `find_record` reads, in the order it decodes them.
const RECORD_FIELDS: [&str; 10] = [
    "fingerprint",
    "state",
    "fence",
    "owner",
    "lease_until",
    "status",
    "headers",
    "body",
    "created_at",
    "expires_at",
];

fn record_of(
    fields: Vec<Value>,
    scope: &Scope,
    key: &IdempotencyKey,
) -> Result<Option<Record>, StoreError> {
    // HMGET answers nil for every field of a missing key.
    if fields.iter().all(|field| matches!(field, Value::Nil)) {
        return Ok(None);
    }
    let [
        fingerprint,
        state,
        fence,
        owner,
        lease_until,
        status,
        headers,
        body,
        created_at,
        expires_at,
    ]: [Value; 10] = fields
        .try_into()
        .map_err(|_| corrupt("HMGET returned the wrong number of fields"))?;
    let fingerprint = Fingerprint::from_hex(&required(text_of(fingerprint)?, "a fingerprint")?)
        .map_err(|_| corrupt("stored fingerprint is not 64 hexadecimal digits"))?;
    let state_text = required(text_of(state)?, "a state")?;
    let state = RecordState::parse(&state_text).ok_or_else(|| corrupt("unknown record state"))?;
    Ok(Some(Record {
        scope: scope.clone(),
        key: key.clone(),
        fingerprint,
        state,
        fence: non_negative(required(integer_of(fence)?, "a fence")?, "fence")?,
        owner: required(text_of(owner)?, "an owner")?,
        lease_until_ms: required(integer_of(lease_until)?, "a lease end")?,
        response: response_of(status, headers, body)?,
        created_at_ms: required(integer_of(created_at)?, "a creation time")?,
        expires_at_ms: required(integer_of(expires_at)?, "an expiry")?,
    }))
}

/// The ownership arguments shared by `complete` and `abandon`.
fn lease_invocation<'a>(
    script: &'a Script,
    record_key: &str,
    lease: &Lease,
) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    invocation
        .key(record_key)
        .arg(lease.owner.as_str())
        .arg(lease.fence.to_string());
    invocation
}

#[async_trait]
impl<C> RecordStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_BEGIN);
        let now = now_ms();
        let owner = new_owner();
        let lease_until_ms = now.saturating_add(policy.lease_ms());
        let expires_at_ms = now.saturating_add(policy.retention_ms());
        let mut invocation = BEGIN_SCRIPT.prepare_invoke();
        invocation
            .key(self.record_key(scope, key))
            .arg(now)
            .arg(fingerprint.to_hex())
            .arg(owner.as_str())
            .arg(lease_until_ms)
            .arg(expires_at_ms);
        let reply: Value = self.invoke(&invocation).await?;
        decision_of(reply, |fence, taken_over| Lease {
            scope: scope.clone(),
            key: key.clone(),
            fence,
            owner,
            lease_until_ms,
            retention_ms: policy.retention_ms(),
            taken_over,
        })
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_COMPLETE);
        response.validate()?;
        let expires_at_ms = now_ms().saturating_add(lease.retention_ms);
        let record_key = self.record_key(&lease.scope, &lease.key);
        let mut invocation = lease_invocation(&COMPLETE_SCRIPT, &record_key, lease);
        invocation
            .arg(i64::from(response.status))
            .arg(response.headers_json())
            .arg(response.body.as_slice())
            .arg(expires_at_ms);
        let written: i64 = self.invoke(&invocation).await?;
        if written == 1 {
            Ok(())
        } else {
            Err(StoreError::StaleLease)
        }
    }

    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_ABANDON);
        let record_key = self.record_key(&lease.scope, &lease.key);
        let invocation = lease_invocation(&ABANDON_SCRIPT, &record_key, lease);
        let written: i64 = self.invoke(&invocation).await?;
        if written == 1 {
            Ok(())
        } else {
            Err(StoreError::StaleLease)
        }
    }

    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_FIND);
        let mut command = redis::cmd("HMGET");
        command
            .arg(self.record_key(scope, key))
            .arg(&RECORD_FIELDS[..]);
        let fields: Vec<Value> = self.query(&command).await?;
        record_of(fields, scope, key)
    }

    /// Always 0: records carry `PEXPIREAT` at their expiry, and Redis deletes them itself.
    async fn purge_expired(&self, _now_ms: i64, _limit: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
}
