//! The upper floor: the ports whose methods compose several aggregates, each method one local
//! transaction over [`super::rows`] — the only code that writes several tables together.
//!
//! | module | port | one transaction does |
//! |---|---|---|
//! | [`orders`] | [`Orders`] | an order created once; moved along its state machine under its row lock; read with its payments |
//! | [`payments`] | [`Payments`] | an attempt opened under its order's lock; the success flow (payment, order, refund case, event) by the one-PAID rule; a close with its event |
//! | [`refunds`] | [`Refunds`] | a refund reserved on its payment and inserted; settled with the amount given back, the order moved and the event written |
//! | [`refund_cases`] | [`RefundCases`] | a case turned into its one refund |
//! | [`notifies`] | [`Notifies`] | a verified notify matched ([`crate::domain::notify`]), deduplicated and applied with its record |
//! | [`grants`] | [`Grants`] | an event's grant or revocation with its dedup claim |
//! | [`wallets`] | [`Wallets`] | a credit or deduct with its idempotency record and stored answer |
//! | [`overview`] | [`Overviews`] | counts by state across the tables, for the console |

pub mod grants;
pub mod notifies;
pub mod orders;
pub mod overview;
pub mod payments;
pub mod refund_cases;
pub mod refunds;
pub mod wallets;

pub use grants::Grants;
pub use notifies::Notifies;
pub use orders::Orders;
pub use overview::Overviews;
pub use payments::Payments;
pub use refund_cases::RefundCases;
pub use refunds::Refunds;
pub use wallets::Wallets;
