//! Payment attempts: [`create`](mod@create), [`close`](mod@close), the one
//! [`settle`](mod@settle) table they share with reconciliation, and reading one
//! ([`show`](mod@show)).

pub mod close;
pub mod create;
pub mod settle;
pub mod show;

pub use close::{Closed, close, close_sibling};
pub use create::{Created, create};
pub use settle::{OnClose, Settled, settle};
pub use show::{Payable, Shown, page, payable, show};

pub(in crate::flows) use crate::flows::order_lock::{Locked, lock_order, lost_the_lock, unlock};
