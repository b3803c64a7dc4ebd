//! Payment attempts: [`create`](mod@create), [`close`](mod@close) and the one
//! [`settle`](mod@settle) table they share with reconciliation.

pub mod close;
pub mod create;
pub mod settle;

pub use close::{Closed, close, close_sibling};
pub use create::{Created, create};
pub use settle::{OnClose, Settled, settle};

pub(in crate::flows) use crate::flows::order_lock::{Locked, lock_order, lost_the_lock, unlock};
