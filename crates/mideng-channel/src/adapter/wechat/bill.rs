//! The WeChat Pay trade bill: `GET /v3/bill/tradebill` (gzip) announces a download URL and
//! the file's SHA-1 in a signed answer; the file, fetched signed from the API's own origin,
//! must hash to it and add up to its own summary before it is read.

use reqwest::Method;

use super::super::{ChannelError, SendTraced as _, bills, transport_error};
use super::{WechatChannel, protocol};
use crate::bill::{self, Bill, BillDate};
use crate::strict;

impl WechatChannel {
    /// The day's trade bill: `None` before it is published.
    pub(super) async fn fetch_bill(&self, date: BillDate) -> Result<Option<Bill>, ChannelError> {
        let asked = format!(
            "{}?bill_date={date}&bill_type=ALL&tar_type=GZIP",
            protocol::PATH_TRADE_BILL
        );
        let (status, text) = self.call(Method::GET, &asked, None).await?;
        if !status.is_success() {
            let rejection = Self::rejection(status, &text);
            return match &rejection {
                ChannelError::Rejected { sub_code, .. }
                    if sub_code == protocol::CODE_STATEMENT_CREATING =>
                {
                    Ok(None)
                }
                // Published, and nothing moved that day.
                ChannelError::Rejected { sub_code, .. }
                    if sub_code == protocol::CODE_NO_STATEMENT_EXIST =>
                {
                    Ok(Some(Bill {
                        date,
                        entries: Vec::new(),
                    }))
                }
                _ => Err(rejection),
            };
        }
        let answer: BillUrl = strict::json(&text)
            .map_err(|_| ChannelError::OutcomeUnknown("bill answer unreadable".to_owned()))?;
        if answer.hash_type != bill::WECHAT_HASH_TYPE {
            return Err(ChannelError::OutcomeUnknown(format!(
                "bill hash type {}",
                answer.hash_type
            )));
        }
        let url = reqwest::Url::parse(&answer.download_url)
            .map_err(|_| ChannelError::OutcomeUnknown("download_url is not a URL".to_owned()))?;
        if !bills::same_origin(&url, &self.config.base_url) {
            return Err(ChannelError::Invalid(format!(
                "bill download URL outside the API: {}",
                url.origin().ascii_serialization()
            )));
        }
        let path_and_query = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        // The download is signed like every request; its answer is the file, unsigned: the
        // hash from the signed answer above is what vouches for it.
        let response = self
            .signed_request(
                &bills::download_client()?,
                Method::GET,
                &path_and_query,
                None,
            )?
            .send_traced("GET wechatpay bill")
            .await
            .map_err(|error| transport_error(&error))?;
        let compressed = bills::read_download(response).await?;
        let plain = bill::read_bounded(flate2::read::GzDecoder::new(compressed.as_slice()))
            .map_err(|error| bills::unreadable(&error))?;
        if !bill::wechat_hash(&plain).eq_ignore_ascii_case(&answer.hash_value) {
            return Err(ChannelError::OutcomeUnknown(
                "the bill's SHA-1 is not the one announced".to_owned(),
            ));
        }
        let text = String::from_utf8(plain)
            .map_err(|_| ChannelError::OutcomeUnknown("bill is not UTF-8".to_owned()))?;
        bill::read_wechat(&text, date)
            .map(Some)
            .map_err(|error| bills::unreadable(&error))
    }
}

/// The answer of `GET /v3/bill/tradebill`.
#[derive(serde::Deserialize)]
struct BillUrl {
    hash_type: String,
    hash_value: String,
    download_url: String,
}
