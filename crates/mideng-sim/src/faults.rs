//! Armed gateway faults: "the next call of this method fails with this code", optionally after
//! the call's state change was applied — the channel's *unknown outcome*, which the merchant
//! can only resolve by querying again. Beside them, the armed fate of the next WeChat Pay
//! refund (ABNORMAL or CLOSED instead of SUCCESS).
//!
//! Pure rules, no I/O. A fault is consumed by a call that passed authentication and parameter
//! checks, so that a malformed request never uses up the fault meant for a real one; the
//! refund fate is consumed by the next refund the channel accepts as new.

use std::collections::HashMap;

use mideng_channel::{alipay, wechat};

use crate::limits::FAULT_TIMES_MAX;
use crate::trades::RefundOutcome;

/// A gateway method that can be made to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GatewayMethod {
    /// `alipay.trade.precreate`.
    AlipayPrecreate,
    /// `alipay.trade.query`.
    AlipayQuery,
    /// `alipay.trade.close`.
    AlipayClose,
    /// `POST /v3/pay/transactions/native`.
    WechatNative,
    /// `GET /v3/pay/transactions/out-trade-no/{no}`.
    WechatQuery,
    /// `POST /v3/pay/transactions/out-trade-no/{no}/close`.
    WechatClose,
    /// `alipay.trade.refund`.
    AlipayRefund,
    /// `alipay.trade.fastpay.refund.query`.
    AlipayRefundQuery,
    /// `POST /v3/refund/domestic/refunds`.
    WechatRefund,
    /// `GET /v3/refund/domestic/refunds/{out_refund_no}`.
    WechatRefundQuery,
}

impl GatewayMethod {
    /// Every method, with its name in the control API.
    pub(crate) const ALL: [(GatewayMethod, &'static str); 10] = [
        (GatewayMethod::AlipayPrecreate, "alipay.trade.precreate"),
        (GatewayMethod::AlipayQuery, "alipay.trade.query"),
        (GatewayMethod::AlipayClose, "alipay.trade.close"),
        (GatewayMethod::AlipayRefund, "alipay.trade.refund"),
        (
            GatewayMethod::AlipayRefundQuery,
            "alipay.trade.fastpay.refund.query",
        ),
        (GatewayMethod::WechatNative, "wechat.native"),
        (GatewayMethod::WechatQuery, "wechat.query"),
        (GatewayMethod::WechatClose, "wechat.close"),
        (GatewayMethod::WechatRefund, "wechat.refund"),
        (GatewayMethod::WechatRefundQuery, "wechat.refund.query"),
    ];

    /// The method named `name` in the control API.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|(_, known)| *known == name)
            .map(|(method, _)| *method)
    }

    /// The method's name in the control API.
    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(method, _)| *method == self)
            .map_or("", |(_, name)| name)
    }

    /// Whether the method is Alipay's (else WeChat Pay's).
    pub(crate) fn is_alipay(self) -> bool {
        match self {
            GatewayMethod::AlipayPrecreate
            | GatewayMethod::AlipayQuery
            | GatewayMethod::AlipayClose
            | GatewayMethod::AlipayRefund
            | GatewayMethod::AlipayRefundQuery => true,
            GatewayMethod::WechatNative
            | GatewayMethod::WechatQuery
            | GatewayMethod::WechatClose
            | GatewayMethod::WechatRefund
            | GatewayMethod::WechatRefundQuery => false,
        }
    }
}

/// The failure answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultCode {
    /// Alipay 20000 `isp.unknow-error`.
    AlipayUnknown,
    /// Alipay 40004 `ACQ.SYSTEM_ERROR`.
    AlipaySystemError,
    /// WeChat Pay HTTP 500 `SYSTEM_ERROR`.
    WechatSystemError,
    /// Alipay 40004 `ACQ.CONTEXT_INCONSISTENT`: a definite business refusal. Armed with
    /// `apply_anyway` it is a channel that answers "failed" and made the trade all the same,
    /// which the buyer can then pay: the merchant holds a FAILED attempt the channel charges.
    AlipayRefused,
}

impl FaultCode {
    /// The code as the control API shows it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultCode::AlipayUnknown => alipay::CODE_UNKNOWN,
            FaultCode::AlipaySystemError => alipay::SUB_SYSTEM_ERROR,
            FaultCode::AlipayRefused => alipay::SUB_CONTEXT_INCONSISTENT,
            FaultCode::WechatSystemError => wechat::CODE_SYSTEM_ERROR,
        }
    }

    /// Reads the code asked for `method`; no code means the channel's usual unknown-outcome
    /// answer (Alipay 20000, WeChat Pay SYSTEM_ERROR).
    pub(crate) fn for_method(method: GatewayMethod, code: Option<&str>) -> Option<Self> {
        match (method.is_alipay(), code) {
            (true, None | Some(alipay::CODE_UNKNOWN | alipay::SUB_UNKNOWN_ERROR)) => {
                Some(FaultCode::AlipayUnknown)
            }
            (true, Some(alipay::CODE_BUSINESS_FAILED | alipay::SUB_SYSTEM_ERROR)) => {
                Some(FaultCode::AlipaySystemError)
            }
            (true, Some(alipay::SUB_CONTEXT_INCONSISTENT)) => Some(FaultCode::AlipayRefused),
            (false, None | Some("500" | wechat::CODE_SYSTEM_ERROR)) => {
                Some(FaultCode::WechatSystemError)
            }
            _ => None,
        }
    }
}

/// An armed fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    /// What to answer.
    pub(crate) code: FaultCode,
    /// Whether to apply the call's state change before answering the failure.
    pub(crate) apply_anyway: bool,
    /// How many more calls fail.
    pub(crate) remaining: u32,
}

/// The armed faults, at most one per method, and the fate of the next WeChat Pay refund.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: HashMap<GatewayMethod, Fault>,
    /// How the next new WeChat Pay refund ends; none means SUCCESS.
    next_refund_outcome: Option<RefundOutcome>,
}

impl Faults {
    /// Arms a fault for the next `times` calls of `method`, replacing any armed before.
    pub(crate) fn arm(
        &mut self,
        method: GatewayMethod,
        code: FaultCode,
        apply_anyway: bool,
        times: u32,
    ) {
        let remaining = times.clamp(1, FAULT_TIMES_MAX);
        self.armed.insert(
            method,
            Fault {
                code,
                apply_anyway,
                remaining,
            },
        );
    }

    /// Makes the next new WeChat Pay refund end as `outcome`, replacing any armed before.
    pub(crate) fn arm_refund_outcome(&mut self, outcome: RefundOutcome) {
        self.next_refund_outcome = Some(outcome);
    }

    /// How the next new WeChat Pay refund ends: the armed fate, or SUCCESS.
    pub(crate) fn next_refund_outcome(&self) -> RefundOutcome {
        self.next_refund_outcome.unwrap_or_default()
    }

    /// The armed fate, consumed by a new refund that took it.
    pub(crate) fn take_refund_outcome(&mut self) -> RefundOutcome {
        self.next_refund_outcome.take().unwrap_or_default()
    }

    /// Consumes one failure of `method`, if one is armed.
    pub(crate) fn take(&mut self, method: GatewayMethod) -> Option<Fault> {
        let fault = self.armed.get_mut(&method)?;
        let taken = *fault;
        fault.remaining = fault.remaining.saturating_sub(1);
        if fault.remaining == 0 {
            self.armed.remove(&method);
        }
        Some(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fails_exactly_the_armed_number_of_calls() {
        let mut faults = Faults::default();
        faults.arm(
            GatewayMethod::AlipayClose,
            FaultCode::AlipayUnknown,
            true,
            2,
        );
        assert!(faults.take(GatewayMethod::AlipayQuery).is_none());
        assert!(faults.take(GatewayMethod::AlipayClose).is_some());
        assert!(faults.take(GatewayMethod::AlipayClose).is_some());
        assert!(faults.take(GatewayMethod::AlipayClose).is_none());
    }

    #[test]
    fn codes_must_belong_to_the_methods_channel() {
        assert_eq!(
            FaultCode::for_method(GatewayMethod::AlipayClose, Some("40004")),
            Some(FaultCode::AlipaySystemError)
        );
        assert_eq!(
            FaultCode::for_method(GatewayMethod::WechatClose, None),
            Some(FaultCode::WechatSystemError)
        );
        assert_eq!(
            FaultCode::for_method(GatewayMethod::WechatClose, Some("20000")),
            None
        );
        assert_eq!(
            FaultCode::for_method(
                GatewayMethod::AlipayPrecreate,
                Some("ACQ.CONTEXT_INCONSISTENT")
            ),
            Some(FaultCode::AlipayRefused)
        );
        assert_eq!(
            GatewayMethod::from_name("wechat.query"),
            Some(GatewayMethod::WechatQuery)
        );
        assert_eq!(GatewayMethod::WechatQuery.name(), "wechat.query");
        assert_eq!(GatewayMethod::from_name("alipay.trade.pay"), None);
        for (method, name) in GatewayMethod::ALL {
            assert_eq!(GatewayMethod::from_name(name), Some(method));
            assert_eq!(method.is_alipay(), name.starts_with("alipay."), "{name}");
        }
    }

    #[test]
    fn the_refund_fate_applies_to_one_refund_then_success_again() {
        let mut faults = Faults::default();
        assert_eq!(faults.take_refund_outcome(), RefundOutcome::Success);
        faults.arm_refund_outcome(RefundOutcome::Abnormal);
        assert_eq!(
            faults.next_refund_outcome(),
            RefundOutcome::Abnormal,
            "a look keeps it"
        );
        assert_eq!(faults.take_refund_outcome(), RefundOutcome::Abnormal);
        assert_eq!(faults.take_refund_outcome(), RefundOutcome::Success);
    }
}
