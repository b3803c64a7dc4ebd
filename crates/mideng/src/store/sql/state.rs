//! State machines on SQL ([`StateStore`]).
//!
//! A transition is one compare-and-set update (`WHERE state = from`), so of two concurrent
//! transitions from one state exactly one applies, and the version counts the transitions.

use async_trait::async_trait;

use super::engine::{Arg, Dialect, SqlRow, SqlStore, as_fence, timer};
use super::statements::PerDialect;
use crate::error::StoreError;
use crate::key::Name;
use crate::latency::op;
use crate::state::StateStore;

const INSERT: PerDialect<&str> = crate::dialect_sql!(
    // INSERT IGNORE reports 0 affected rows on a duplicate whatever the FOUND_ROWS flag; the
    // values are validated first, so it cannot hide a truncation.
    { mysql: "INSERT IGNORE INTO", _: "INSERT INTO" }
    " mideng_states (kind, entity_id, state, version) VALUES (" ? ", " ? ", " ? ", 0)"
    { mysql: "", _: " ON CONFLICT (kind, entity_id) DO NOTHING" }
);
const SELECT: PerDialect<&str> = crate::dialect_sql!(
    "SELECT state, version FROM mideng_states WHERE kind = " ? " AND entity_id = " ?
);
const COMPARE_AND_SET: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_states SET state = " ? ", version = version + 1 WHERE kind = " ?
    " AND entity_id = " ? " AND state = " ?
);

#[async_trait]
impl<D: Dialect> StateStore for SqlStore<D> {
    async fn create_entity(
        &self,
        kind: &str,
        id: &Name,
        initial: &str,
    ) -> Result<bool, StoreError> {
        let _timer = timer::<D>(op::STATE_CREATE);
        let changed = self
            .run_once(
                INSERT.get::<D>(),
                &[Arg::Text(kind), Arg::Text(id.as_str()), Arg::Text(initial)],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn find_state(&self, kind: &str, id: &Name) -> Result<Option<(String, u64)>, StoreError> {
        let _timer = timer::<D>(op::STATE_FIND);
        self.read_row(
            SELECT.get::<D>(),
            &[Arg::Text(kind), Arg::Text(id.as_str())],
            |row| {
                let read =
                    |error: sqlx::Error| StoreError::Corrupt(format!("unreadable state: {error}"));
                Ok((
                    row.text(0).map_err(read)?,
                    as_fence(row.int(1).map_err(read)?)?,
                ))
            },
        )
        .await
    }

    async fn compare_and_set(
        &self,
        kind: &str,
        id: &Name,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        let _timer = timer::<D>(op::STATE_TRANSITION);
        let changed = self
            .run_once(
                COMPARE_AND_SET.get::<D>(),
                &[
                    Arg::Text(to),
                    Arg::Text(kind),
                    Arg::Text(id.as_str()),
                    Arg::Text(from),
                ],
            )
            .await?;
        Ok(changed == 1)
    }
}
