//! Asynchronous notifies: the channel telling the merchant that a trade changed, again and
//! again until the merchant acknowledges, and — on request — lost, doubled, delayed or
//! reordered.
//!
//! - [`queue`] — pure: notifies, their schedules, policies and delivery history.
//! - [`payload`] — pure: what each channel's notify says for an event.
//! - [`dispatcher`] — the background task that sends due deliveries over HTTP.

pub(crate) mod dispatcher;
pub(crate) mod payload;
pub(crate) mod queue;
