//! Which channel: the one name for Alipay and WeChat Pay that the adapters, the simulator and
//! the payment service all use.
//!
//! A channel travels as text in many places — the service's API bodies and database rows, the
//! simulator's trade views, logs. One enum with one spelling (`alipay`, `wechat`) keeps those
//! from drifting apart: every crate parses and prints through it, and the spelling is exact
//! (`Alipay` is refused), so a row written by one crate is always read back by another.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A payment channel. Serialized, displayed and parsed as `alipay` or `wechat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// Alipay open platform.
    Alipay,
    /// WeChat Pay API v3.
    Wechat,
}

/// A channel name that is neither `alipay` nor `wechat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("channel must be alipay or wechat")]
pub struct UnknownChannel;

impl ChannelKind {
    /// Every channel, for code that sets something up per channel.
    pub const ALL: [ChannelKind; 2] = [ChannelKind::Alipay, ChannelKind::Wechat];

    /// `alipay` or `wechat`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Alipay => "alipay",
            ChannelKind::Wechat => "wechat",
        }
    }

    /// Parses `alipay` or `wechat`, exactly: another case or surrounding space is refused, so
    /// that no two spellings of one channel are ever stored.
    pub fn parse(text: &str) -> Result<Self, UnknownChannel> {
        match text {
            "alipay" => Ok(ChannelKind::Alipay),
            "wechat" => Ok(ChannelKind::Wechat),
            _ => Err(UnknownChannel),
        }
    }
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for ChannelKind {
    type Err = UnknownChannel;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ChannelKind::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_named_exactly() {
        assert_eq!(ChannelKind::parse("alipay"), Ok(ChannelKind::Alipay));
        assert_eq!(ChannelKind::parse("wechat"), Ok(ChannelKind::Wechat));
        for bad in ["Alipay", "WECHAT", " alipay", "wechat ", "weixin", ""] {
            assert_eq!(ChannelKind::parse(bad), Err(UnknownChannel), "{bad:?}");
            assert_eq!(bad.parse::<ChannelKind>(), Err(UnknownChannel), "{bad:?}");
        }
    }

    #[test]
    fn every_form_of_a_channel_is_the_same_text() {
        for kind in ChannelKind::ALL {
            let text = kind.as_str();
            assert_eq!(kind.to_string(), text);
            assert_eq!(text.parse::<ChannelKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).expect("a unit variant serializes");
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<ChannelKind>(&json).ok(), Some(kind));
        }
        assert!(serde_json::from_str::<ChannelKind>("\"Alipay\"").is_err());
    }
}
