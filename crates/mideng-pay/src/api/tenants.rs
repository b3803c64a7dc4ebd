//! API keys resolved to tenants, kept in memory for a short bounded time, so that a request
//! (a replay above all) does not read the tenants table every time.
//!
//! The price is a revocation delay: a key that is re-keyed or removed keeps working on an
//! instance that resolved it for at most the cache's time to live
//! ([`crate::flows::PaymentSettings::tenant_cache`], 5 s by default; zero turns the cache off).
//! Only keys that resolved are kept, so a key provisioned a moment ago works at once, and
//! unknown keys always reach the database (they cost a read each, as before). The cache is
//! bounded by entry count, least recently used first out.

use std::time::Duration;

use mideng::clock;
use quick_cache::sync::Cache;

use crate::domain::keys::KeyKind;

/// Most API keys held: far more tenants than one deployment serves.
const TENANTS_CACHED_MAX: usize = 10_000;

/// Resolved API keys (by the SHA-256 of the key, as stored), each with its tenant, its kind and
/// the end of its time in the cache.
pub struct TenantCache {
    tenants: Option<Cache<String, (String, KeyKind, i64)>>,
    ttl_ms: i64,
}

impl std::fmt::Debug for TenantCache {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TenantCache")
            .field("on", &self.tenants.is_some())
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

impl TenantCache {
    /// Keys kept for `ttl` (zero: nothing kept).
    pub fn new(ttl: Duration) -> Self {
        Self {
            tenants: (!ttl.is_zero()).then(|| Cache::new(TENANTS_CACHED_MAX)),
            ttl_ms: clock::duration_ms(ttl),
        }
    }

    /// The tenant of the key with this hash and the key's kind, if it was resolved less than
    /// the time to live ago.
    pub fn get(&self, api_key_hash: &str, now_ms: i64) -> Option<(String, KeyKind)> {
        let tenants = self.tenants.as_ref()?;
        match tenants.get(api_key_hash) {
            Some((tenant, kind, until_ms)) if until_ms > now_ms => Some((tenant, kind)),
            Some(_) => {
                tenants.remove(api_key_hash);
                None
            }
            None => None,
        }
    }

    /// Remembers that the key with this hash is `tenant`'s key of `kind`, as read from the
    /// database now.
    pub fn put(&self, api_key_hash: &str, tenant: &str, kind: KeyKind, now_ms: i64) {
        if let Some(tenants) = &self.tenants {
            tenants.insert(
                api_key_hash.to_owned(),
                (tenant.to_owned(), kind, now_ms.saturating_add(self.ttl_ms)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_kept_for_its_time_to_live_and_not_after() {
        let cache = TenantCache::new(Duration::from_secs(5));
        assert_eq!(cache.get("h1", 1_000), None, "nothing before a read");
        cache.put("h1", "shop-1", KeyKind::Publishable, 1_000);
        assert_eq!(
            cache.get("h1", 5_999),
            Some(("shop-1".to_owned(), KeyKind::Publishable))
        );
        assert_eq!(cache.get("h1", 6_000), None, "gone at the end of its time");
        assert_eq!(cache.get("h1", 6_001), None);
        assert_eq!(cache.get("h2", 1_000), None, "another key is not this one");
    }

    #[test]
    fn a_zero_time_to_live_keeps_nothing() {
        let cache = TenantCache::new(Duration::ZERO);
        cache.put("h1", "shop-1", KeyKind::Secret, 1_000);
        assert_eq!(cache.get("h1", 1_000), None);
    }
}
