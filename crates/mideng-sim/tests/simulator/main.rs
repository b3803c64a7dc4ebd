//! The simulator over real HTTP on 127.0.0.1, with the `mideng-channel` primitives playing
//! the merchant: every gateway method of both channels, signatures both ways, races between
//! close and pay, refunds through the real adapters, the daily bills, the full notify retry schedules under a
//! fast clock, notify policies, unknown outcomes, expiry, and bad input.

mod adapters;
mod alipay_gateway;
mod alipay_v3_gateway;
mod bills;
mod control_api;
mod harness;
mod notify_policies;
mod platform_rotation;
mod refunds;
mod wechat_gateway;
