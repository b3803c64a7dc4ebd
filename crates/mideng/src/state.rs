//! State machines with compare-and-set transitions.
//!
//! A machine declares its transition table; a transition is one conditional update
//! (`… SET state = to WHERE id = ? AND state = from`) whose affected-row count decides the
//! single winner among concurrent callers. Illegal transitions are refused before the store is
//! asked. The table check is pure ([`StateMachine::allows`]); the update is a [`StateStore`].

use async_trait::async_trait;

use crate::error::{InvalidInput, StoreError};
use crate::key::Name;

/// A state enum with its transition table.
pub trait StateMachine: Copy + Eq + Send + Sync + 'static {
    /// The kind of entity (for example `order`); names the machine in the store.
    const KIND: &'static str;
    /// Every allowed `(from, to)` pair.
    const TRANSITIONS: &'static [(Self, Self)];
    /// The persisted text of a state.
    fn as_str(self) -> &'static str;
    /// Parses persisted text.
    fn parse(text: &str) -> Option<Self>;

    /// Whether the table allows `from -> to`.
    fn allows(from: Self, to: Self) -> bool {
        Self::TRANSITIONS.contains(&(from, to))
    }
}

/// What a transition attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition<S> {
    /// This call moved the entity from `from` to `to`.
    Applied,
    /// The entity was already in `to`: a repeat of a done transition.
    AlreadyThere,
    /// The entity is in another state (a lost race or a stale `from`).
    Refused {
        /// The state found.
        current: S,
    },
    /// No such entity.
    Missing,
}

/// Storage of entity states, one row per kind + id.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Creates the entity in `initial`; false if it already exists (unchanged).
    async fn create_entity(&self, kind: &str, id: &Name, initial: &str)
    -> Result<bool, StoreError>;

    /// The entity's state and version (the number of transitions applied).
    async fn find_state(&self, kind: &str, id: &Name) -> Result<Option<(String, u64)>, StoreError>;

    /// Moves the entity from `from` to `to` if it is in `from`: true for exactly one of any
    /// number of concurrent callers.
    async fn compare_and_set(
        &self,
        kind: &str,
        id: &Name,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError>;
}

/// A shared store is a store.
#[async_trait]
impl<T: StateStore + ?Sized> StateStore for std::sync::Arc<T> {
    async fn create_entity(
        &self,
        kind: &str,
        id: &Name,
        initial: &str,
    ) -> Result<bool, StoreError> {
        (**self).create_entity(kind, id, initial).await
    }
    async fn find_state(&self, kind: &str, id: &Name) -> Result<Option<(String, u64)>, StoreError> {
        (**self).find_state(kind, id).await
    }
    async fn compare_and_set(
        &self,
        kind: &str,
        id: &Name,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        (**self).compare_and_set(kind, id, from, to).await
    }
}

/// A typed machine over a state store.
#[derive(Clone, Debug)]
pub struct Machine<S> {
    store: S,
}

impl<S: StateStore> Machine<S> {
    /// A machine using `store`.
    pub fn new(store: S) -> Self {
        Self { store }
    }

    /// Creates entity `id` in `initial`; false if it exists.
    pub async fn create<M: StateMachine>(&self, id: &Name, initial: M) -> Result<bool, StoreError> {
        self.store
            .create_entity(M::KIND, id, initial.as_str())
            .await
    }

    /// The entity's current state.
    pub async fn current<M: StateMachine>(&self, id: &Name) -> Result<Option<M>, StoreError> {
        match self.store.find_state(M::KIND, id).await? {
            None => Ok(None),
            Some((text, _)) => M::parse(&text)
                .map(Some)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown {} state {text:?}", M::KIND))),
        }
    }

    /// Moves entity `id` from `from` to `to`. Illegal transitions fail with
    /// [`InvalidInput::IllegalTransition`] without touching the store.
    pub async fn transition<M: StateMachine>(
        &self,
        id: &Name,
        from: M,
        to: M,
    ) -> Result<Transition<M>, StoreError> {
        if !M::allows(from, to) {
            return Err(InvalidInput::IllegalTransition {
                from: from.as_str(),
                to: to.as_str(),
            }
            .into());
        }
        if self
            .store
            .compare_and_set(M::KIND, id, from.as_str(), to.as_str())
            .await?
        {
            return Ok(Transition::Applied);
        }
        Ok(match self.current::<M>(id).await? {
            None => Transition::Missing,
            Some(current) if current == to => Transition::AlreadyThere,
            Some(current) => Transition::Refused { current },
        })
    }
}
