//! One-time tokens in two stores: the merchant's server's, and the checkout pages' own.
//!
//! A page's tokens live in their own scope per order ([`crate::domain::keys::scope_tenant`]),
//! and in a store of their own with caps of their own ([`crate::limits::PAGE_TOKENS_PER_ORDER_MAX`]
//! per order, [`crate::limits::PAGE_TOKENS_TOTAL_MAX`] in all): however many tokens visitors
//! take, the server's store keeps every place it had. [`SplitTokens`] sends each call to the
//! store of its scope, so the route's token guard, the token route and the purge each see one
//! store.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mideng::token::{Consumption, IssueError, IssuedToken, Token, TokenStore};
use mideng::{IdempotencyKey, Scope, StoreError};

use crate::domain::keys::is_page_scope;

/// The server's token store and the pages' (see the module documentation).
pub struct SplitTokens {
    server: Arc<dyn TokenStore>,
    pages: Arc<dyn TokenStore>,
}

impl SplitTokens {
    /// Tokens of pages' scopes in `pages`, every other in `server`.
    pub fn new(server: Arc<dyn TokenStore>, pages: Arc<dyn TokenStore>) -> Self {
        Self { server, pages }
    }

    fn of(&self, scope: &Scope) -> &dyn TokenStore {
        if is_page_scope(scope.tenant()) {
            self.pages.as_ref()
        } else {
            self.server.as_ref()
        }
    }
}

#[async_trait]
impl TokenStore for SplitTokens {
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, IssueError> {
        self.of(scope).issue_token(scope, ttl).await
    }

    async fn consume_token_for(
        &self,
        scope: &Scope,
        token: &Token,
        key: Option<&IdempotencyKey>,
    ) -> Result<Consumption, StoreError> {
        self.of(scope).consume_token_for(scope, token, key).await
    }

    async fn purge_expired_tokens(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let server = self.server.purge_expired_tokens(now_ms, limit).await?;
        let pages = self.pages.purge_expired_tokens(now_ms, limit).await?;
        Ok(server.saturating_add(pages))
    }
}
