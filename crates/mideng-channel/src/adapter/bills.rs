//! What both adapters need to fetch a bill: a client that follows no redirect and waits long
//! enough for a day's file, a bounded read, and the rule for where a download URL may point.
//!
//! A download URL comes from the channel's signed answer, yet the adapter still fetches only
//! from the channel: the gateway's own origin (the simulator's, or WeChat Pay's API host), or
//! for Alipay an `https` host under `alipay.com` (its bill center). Nothing else is fetched,
//! whatever the answer says.

use std::time::Duration;

use super::{CONNECT_TIMEOUT, ChannelError, transport_error};
use crate::bill::BILL_BYTES_MAX;

/// How long one bill download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// A client for bill downloads: no redirects, a download's timeout.
pub(super) fn download_client() -> Result<reqwest::Client, ChannelError> {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(DOWNLOAD_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| ChannelError::Invalid(format!("HTTP client: {error}")))
}

/// The body of a successful download, at most [`BILL_BYTES_MAX`] bytes.
pub(super) async fn read_download(
    mut response: reqwest::Response,
) -> Result<Vec<u8>, ChannelError> {
    let status = response.status();
    if !status.is_success() {
        return Err(ChannelError::OutcomeUnknown(format!(
            "bill download answered {status}"
        )));
    }
    let limit = usize::try_from(BILL_BYTES_MAX).unwrap_or(usize::MAX);
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| transport_error(&error))?
    {
        if bytes.len().saturating_add(chunk.len()) > limit {
            return Err(ChannelError::OutcomeUnknown(format!(
                "bill larger than {BILL_BYTES_MAX} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Whether `url` has the scheme, host and port of `base`.
pub(super) fn same_origin(url: &reqwest::Url, base: &str) -> bool {
    reqwest::Url::parse(base).is_ok_and(|base| base.origin() == url.origin())
}

/// Whether an Alipay download URL may be fetched: on the gateway's origin, or `https` under
/// `alipay.com`.
pub(super) fn alipay_download_allowed(url: &reqwest::Url, gateway_url: &str) -> bool {
    same_origin(url, gateway_url)
        || (url.scheme() == "https"
            && url.port().is_none()
            && url
                .host_str()
                .is_some_and(|host| host == "alipay.com" || host.ends_with(".alipay.com")))
}

/// A bill file that could not be read exactly: ask again later.
pub(super) fn unreadable(error: &crate::bill::BillError) -> ChannelError {
    ChannelError::OutcomeUnknown(format!("bill: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_download_is_fetched_only_from_the_channel() {
        let url = |text: &str| reqwest::Url::parse(text).expect("url");
        let gateway = "http://127.0.0.1:8090/gateway.do";
        assert!(alipay_download_allowed(
            &url("http://127.0.0.1:8090/downloadBillFile.resource?fileId=a"),
            gateway
        ));
        assert!(alipay_download_allowed(
            &url("https://dwbillcenter.alipay.com/downloadBillFile.resource"),
            gateway
        ));
        for refused in [
            "http://127.0.0.1:8091/downloadBillFile.resource",
            "http://dwbillcenter.alipay.com/downloadBillFile.resource",
            "https://alipay.com.example.org/file",
            "https://evilalipay.com/file",
            "https://dwbillcenter.alipay.com:8443/file",
            "http://169.254.169.254/latest/meta-data",
        ] {
            assert!(
                !alipay_download_allowed(&url(refused), gateway),
                "{refused}"
            );
        }
        let base = "https://api.mch.weixin.qq.com";
        assert!(same_origin(
            &url("https://api.mch.weixin.qq.com/v3/billdownload/file?token=a"),
            base
        ));
        assert!(!same_origin(
            &url("https://api.mch.weixin.qq.com.example.org/v3/billdownload/file"),
            base
        ));
    }
}
