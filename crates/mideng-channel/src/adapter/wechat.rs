//! The WeChat Pay v3 adapter: native transactions, query and close by out-trade-no, refunds
//! and their query, and verification and decryption of notifications (payments and refunds).
//!
//! A refund is accepted `PROCESSING` and ends `SUCCESS`, `CLOSED` or `ABNORMAL`, which a
//! `REFUND.*` notify reports (decoded into [`NotifiedState::Refund`]) and the refund query
//! confirms.
//!
//! The platform signs answers and notifies under a serial (`Wechatpay-Serial`). In public-key
//! mode the adapter knows one key under one serial. In certificate mode it downloads the
//! platform certificates (`GET /v3/certificates`, admitted by [`crate::platform_keys`]) and
//! keeps their keys by serial; when an answer or a notify names a serial it does not know — the
//! platform rotated its key — it downloads the list again, under a bound: one download at a
//! time, and at most one per [`PlatformKeySource::Certificates`]`::refresh_interval`, so that
//! notifies under made-up serials cannot make us hammer the channel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{
    Channel, ChannelError, ChannelKind, CreateTrade, CreatedTrade, NotifiedState, NotifyAnswer,
    NotifyRejection, NotifyVerdict, Payment, RawNotify, Refund, RefundState, RefundTrade,
    SendTraced as _, TradeState, VerifiedNotify, check_refund, check_refund_numbers, http_client,
    is_channel_amount, read_body, transport_error,
};
use crate::bill::{Bill, BillDate};
use crate::keys::{PrivateKey, PublicKey, aes_gcm_decrypt, random_nonce};
use crate::platform_keys::{self, PlatformCertificate, PlatformKey, SignedList};
use crate::strict;
mod bill;

use crate::wechat::{
    self as protocol, Authorization, Notification, RefundAmount, RefundNotice, RefundRecord,
    Transaction,
};

/// What the adapter needs to talk to one WeChat Pay merchant.
#[derive(Clone)]
pub struct WechatConfig {
    /// The API base, e.g. `https://api.mch.weixin.qq.com` (or the simulator's).
    pub base_url: String,
    /// Merchant id.
    pub mchid: String,
    /// App id.
    pub appid: String,
    /// Serial number of the merchant's certificate.
    pub merchant_serial: String,
    /// The merchant's private key (signs requests).
    pub merchant_key: PrivateKey,
    /// Where the keys that verify answers and notifications come from.
    pub platform_keys: PlatformKeySource,
    /// The 32-byte API v3 key (decrypts notifications). Never logged.
    pub api_v3_key: String,
    /// Where WeChat Pay sends notifications.
    pub notify_url: String,
}

impl std::fmt::Debug for WechatConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WechatConfig")
            .field("base_url", &self.base_url)
            .field("mchid", &self.mchid)
            .field("appid", &self.appid)
            .field("api_v3_key", &"redacted")
            .finish_non_exhaustive()
    }
}

/// Where the platform's keys come from.
#[derive(Clone, Debug)]
pub enum PlatformKeySource {
    /// Public-key mode: one key, handed over out of band, under its serial (`PUB_KEY_ID_…`, or
    /// a certificate's serial). A notify or answer under any other serial is refused.
    PublicKey {
        /// Verifies.
        key: PublicKey,
        /// The serial it signs under.
        serial: String,
    },
    /// Certificate mode: the keys of the certificates `GET /v3/certificates` serves, downloaded
    /// on the first unknown serial and again on each later one, at most once per
    /// `refresh_interval`.
    Certificates {
        /// A certificate trusted before any download (its key verifies the first list when
        /// the list is signed under its serial); replaced by the first list admitted.
        initial: Option<PlatformCertificate>,
        /// Shortest time between two downloads; [`CERTIFICATE_REFRESH_INTERVAL`] by default.
        refresh_interval: Duration,
    },
}

/// Shortest time between two certificate downloads, by default: a rotation is noticed within
/// a minute, and made-up serials cost the channel at most one call a minute.
pub const CERTIFICATE_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// The WeChat Pay channel.
#[derive(Clone, Debug)]
pub struct WechatChannel {
    config: WechatConfig,
    client: reqwest::Client,
    platform: Arc<PlatformKeyring>,
}

/// The platform keys trusted now, shared by the clones of one adapter.
#[derive(Debug)]
struct PlatformKeyring {
    /// By serial. A std lock: held only to read or swap the map, never across an await.
    keys: RwLock<HashMap<String, PlatformKey>>,
    /// When the last download started. An async lock held for the whole download, so that
    /// one download runs at a time; a caller that needs a key waits for it, bounded by the
    /// HTTP client's call timeout, and a notify does not wait at all.
    refreshing: Arc<tokio::sync::Mutex<Option<Instant>>>,
    /// Downloads ended, successful or not, for operators and tests.
    downloads: AtomicU64,
}

/// The signing headers of an answer, each given once.
struct AnswerSignature {
    timestamp: Option<String>,
    nonce: Option<String>,
    signature: Option<String>,
    serial: Option<String>,
    /// No `Wechatpay-Signature-Type` (older servers) or exactly ours.
    scheme_known: bool,
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// Length of request nonces.
const NONCE_CHARS: usize = 32;

impl WechatChannel {
    /// An adapter for `config`; the API v3 key must be 32 bytes.
    pub fn new(config: WechatConfig) -> Result<Self, ChannelError> {
        if config.api_v3_key.len() != 32 {
            return Err(ChannelError::Invalid(
                "the API v3 key is 32 bytes".to_owned(),
            ));
        }
        let keys = match &config.platform_keys {
            PlatformKeySource::PublicKey { key, serial } => {
                HashMap::from([(serial.clone(), PlatformKey::without_expiry(key.clone()))])
            }
            PlatformKeySource::Certificates { initial, .. } => initial
                .iter()
                .map(|certificate| (certificate.serial.clone(), certificate.key.clone()))
                .collect(),
        };
        Ok(Self {
            config,
            client: http_client()?,
            platform: Arc::new(PlatformKeyring {
                keys: RwLock::new(keys),
                refreshing: Arc::new(tokio::sync::Mutex::new(None)),
                downloads: AtomicU64::new(0),
            }),
        })
    }

    /// How many downloads of the platform certificates have ended, successful or not.
    pub fn platform_certificate_downloads(&self) -> u64 {
        self.platform.downloads.load(Ordering::Acquire)
    }

    /// The key trusted under `serial` at `now_ms`, if any.
    fn platform_key(&self, serial: &str, now_ms: i64) -> Option<PublicKey> {
        self.platform
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(serial)
            .filter(|key| key.is_valid_at(now_ms))
            .map(|key| key.public_key.clone())
    }

    /// Downloads the platform certificates now, unless another download is running (then it
    /// waits for that one) or one started less than the refresh interval ago. Whether a
    /// download was made; public-key mode never downloads.
    pub async fn refresh_platform_keys(&self) -> Result<bool, ChannelError> {
        let mut last_started = self.platform.refreshing.lock().await;
        self.download_certificates(&mut last_started).await
    }

    /// A download, if due; `last_started` is the guarded time of the last one.
    async fn download_certificates(
        &self,
        last_started: &mut Option<Instant>,
    ) -> Result<bool, ChannelError> {
        let PlatformKeySource::Certificates {
            refresh_interval, ..
        } = &self.config.platform_keys
        else {
            return Ok(false);
        };
        if last_started.is_some_and(|started| started.elapsed() < *refresh_interval) {
            return Ok(false);
        }
        *last_started = Some(Instant::now());
        let downloaded = self.download_and_trust_certificates().await;
        // Counted when the download has ended, with its keys trusted if it succeeded, and
        // released to the reader's acquire: whoever sees the count rise can already verify
        // under the keys that download brought.
        self.platform.downloads.fetch_add(1, Ordering::Release);
        downloaded.map(|()| true)
    }

    /// Downloads the certificate list, verifies it and trusts the keys it admits.
    async fn download_and_trust_certificates(&self) -> Result<(), ChannelError> {
        let (status, signed, text) = self
            .send(Method::GET, protocol::PATH_CERTIFICATES, None)
            .await?;
        if !status.is_success() {
            return Err(Self::rejection(status, &text));
        }
        let unsigned = || ChannelError::OutcomeUnknown("certificate list is not signed".to_owned());
        let (Some(timestamp), Some(nonce), Some(signature), Some(serial), true) = (
            &signed.timestamp,
            &signed.nonce,
            &signed.signature,
            &signed.serial,
            signed.scheme_known,
        ) else {
            return Err(unsigned());
        };
        let trusted = self
            .platform
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let admitted = platform_keys::admit_certificate_list(
            &SignedList {
                timestamp,
                nonce,
                signature,
                serial,
                body: &text,
            },
            self.config.api_v3_key.as_bytes(),
            &trusted,
            wall_clock_ms(),
        )
        .map_err(|error| ChannelError::OutcomeUnknown(format!("certificate list: {error}")))?;
        *self
            .platform
            .keys
            .write()
            .unwrap_or_else(PoisonError::into_inner) = admitted;
        Ok(())
    }

    /// A notify named a serial we do not know: start a download in the background, if none is
    /// running and one is due, and return at once. The notify itself is refused; the channel
    /// sends it again (15 s later first), and by then the new key is known.
    fn refresh_in_background(&self) {
        if !matches!(
            self.config.platform_keys,
            PlatformKeySource::Certificates { .. }
        ) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(mut last_started) = Arc::clone(&self.platform.refreshing).try_lock_owned() else {
            return;
        };
        let channel = self.clone();
        runtime.spawn(async move {
            if let Err(error) = channel.download_certificates(&mut last_started).await {
                tracing::warn!(%error, "WeChat Pay platform certificates not refreshed");
            }
        });
    }

    /// Whether a successful answer is signed by the platform; an unknown serial refreshes the
    /// keys first (bounded), as the SDKs do.
    async fn answer_is_signed(&self, signed: &AnswerSignature, text: &str) -> bool {
        let (Some(timestamp), Some(nonce), Some(signature), Some(serial), true) = (
            &signed.timestamp,
            &signed.nonce,
            &signed.signature,
            &signed.serial,
            signed.scheme_known,
        ) else {
            return false;
        };
        if signature.starts_with(protocol::SIGNTEST_PREFIX) {
            return false;
        }
        let mut key = self.platform_key(serial, wall_clock_ms());
        if key.is_none()
            && matches!(
                self.config.platform_keys,
                PlatformKeySource::Certificates { .. }
            )
        {
            let mut last_started = self.platform.refreshing.lock().await;
            // Another caller may have downloaded the new key while we waited.
            if self.platform_key(serial, wall_clock_ms()).is_none()
                && let Err(error) = self.download_certificates(&mut last_started).await
            {
                tracing::warn!(%error, "WeChat Pay platform certificates not refreshed");
            }
            drop(last_started);
            key = self.platform_key(serial, wall_clock_ms());
        }
        key.is_some_and(|key| {
            key.verify(
                protocol::notify_message(timestamp, nonce, text).as_bytes(),
                signature,
            )
        })
    }

    /// A signed call; the status and the verified body.
    async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, String), ChannelError> {
        let (status, signed, text) = self.send(method, path_and_query, body).await?;
        // Answers are signed by the platform; an unsigned or forged success is not believed.
        if status.is_success() && !self.answer_is_signed(&signed, &text).await {
            return Err(ChannelError::OutcomeUnknown(
                "response signature does not verify".to_owned(),
            ));
        }
        Ok((status, text))
    }

    /// A request to `path_and_query`, signed for this merchant.
    fn signed_request(
        &self,
        client: &reqwest::Client,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<reqwest::RequestBuilder, ChannelError> {
        let body_text = body.map(Value::to_string).unwrap_or_default();
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| i64::try_from(since.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or_default();
        let nonce = random_nonce(NONCE_CHARS);
        let message = protocol::request_message(
            method.as_str(),
            path_and_query,
            timestamp,
            &nonce,
            &body_text,
        );
        let signature = self
            .config
            .merchant_key
            .sign(message.as_bytes())
            .map_err(|error| ChannelError::Invalid(format!("signing: {error}")))?;
        let authorization = Authorization {
            mchid: self.config.mchid.clone(),
            nonce,
            timestamp,
            serial: self.config.merchant_serial.clone(),
            signature,
        };
        let mut request = client
            .request(
                method,
                format!(
                    "{}{path_and_query}",
                    self.config.base_url.trim_end_matches('/')
                ),
            )
            .header(reqwest::header::AUTHORIZATION, authorization.to_header())
            .header(reqwest::header::ACCEPT, "application/json");
        if body.is_some() {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body_text);
        }
        Ok(request)
    }

    /// A signed request; the status, the answer's signing headers and its body, unverified.
    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, AnswerSignature, String), ChannelError> {
        let response = self
            .signed_request(&self.client, method.clone(), path_and_query, body)?
            .send_traced(&format!("{method} wechatpay"))
            .await
            .map_err(|error| transport_error(&error))?;
        let status = response.status();
        if status.is_server_error() {
            return Err(ChannelError::OutcomeUnknown(format!(
                "channel answered {status}"
            )));
        }
        // A signing header given twice is no signature at all: the copies could differ.
        let header = |name: &str| {
            let mut values = response.headers().get_all(name).iter();
            match (values.next(), values.next()) {
                (Some(value), None) => value.to_str().ok().map(str::to_owned),
                _ => None,
            }
        };
        // Older servers name no scheme; another scheme than ours, or the header twice, is a
        // signature we cannot check.
        let schemes: Vec<_> = response
            .headers()
            .get_all(protocol::HEADER_SIGNATURE_TYPE)
            .iter()
            .collect();
        let scheme_known = match schemes.as_slice() {
            [] => true,
            [scheme] => scheme.as_bytes() == protocol::AUTHORIZATION_SCHEME.as_bytes(),
            _ => false,
        };
        let signed = AnswerSignature {
            timestamp: header(protocol::HEADER_TIMESTAMP),
            nonce: header(protocol::HEADER_NONCE),
            signature: header(protocol::HEADER_SIGNATURE),
            serial: header(protocol::HEADER_SERIAL),
            scheme_known,
        };
        let text = read_body(response).await?;
        Ok((status, signed, text))
    }

    fn rejection(status: StatusCode, text: &str) -> ChannelError {
        let body: Value = strict::json(text).unwrap_or(Value::Null);
        ChannelError::Rejected {
            code: status.as_u16().to_string(),
            sub_code: body
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            message: body
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        }
    }
}

fn state_of(transaction: &Transaction) -> TradeState {
    match transaction.trade_state.as_str() {
        protocol::STATE_SUCCESS => TradeState::Paid(Payment {
            channel_trade_no: transaction.transaction_id.clone().unwrap_or_default(),
            amount_fen: transaction.amount.total,
            paid_at_ms: transaction
                .success_time
                .as_deref()
                .and_then(protocol::parse_rfc3339),
        }),
        protocol::STATE_REFUND => TradeState::Refunded,
        protocol::STATE_NOTPAY | "USERPAYING" => TradeState::Pending,
        // CLOSED, REVOKED, PAYERROR: the buyer can no longer pay this trade.
        _ => TradeState::Closed,
    }
}

/// Why a refund's amounts cannot be believed, if they cannot: each within the channels'
/// range, and the refund at most the order.
fn refund_amount_problem(amount: &RefundAmount) -> Option<&'static str> {
    if !is_channel_amount(amount.total) {
        Some("amount.total out of range")
    } else if !is_channel_amount(amount.refund) || amount.refund > amount.total {
        Some("amount.refund out of range")
    } else {
        None
    }
}

/// A refund's `success_time`: absent is `None`, and one that is not RFC 3339 is unreadable.
fn success_time_ms(success_time: Option<&str>) -> Result<Option<i64>, &'static str> {
    success_time
        .map(|text| protocol::parse_rfc3339(text).ok_or("success_time is not RFC 3339"))
        .transpose()
}

/// The state of a refund as an answer shows it.
fn refund_state_of(record: &RefundRecord) -> Result<RefundState, ChannelError> {
    let unknown = |why: &str| ChannelError::OutcomeUnknown(format!("refund answer: {why}"));
    if let Some(problem) = refund_amount_problem(&record.amount) {
        return Err(unknown(problem));
    }
    Ok(match record.status.as_str() {
        protocol::REFUND_STATUS_SUCCESS => RefundState::Succeeded(Refund {
            channel_refund_no: record.refund_id.clone(),
            refund_fen: record.amount.refund,
            refunded_at_ms: success_time_ms(record.success_time.as_deref()).map_err(unknown)?,
        }),
        protocol::REFUND_STATUS_PROCESSING => RefundState::Processing,
        protocol::REFUND_STATUS_CLOSED => RefundState::Closed,
        protocol::REFUND_STATUS_ABNORMAL => RefundState::Abnormal,
        other => return Err(unknown(&format!("unknown status {other:?}"))),
    })
}

/// Reads a refund answer, which must be about the refund `out_refund_no` of `out_trade_no`.
fn read_refund_record(
    text: &str,
    out_trade_no: &str,
    out_refund_no: &str,
) -> Result<RefundRecord, ChannelError> {
    let record: RefundRecord = strict::json(text)
        .map_err(|_| ChannelError::OutcomeUnknown("refund answer is not a refund".to_owned()))?;
    if record.out_refund_no != out_refund_no || record.out_trade_no != out_trade_no {
        return Err(ChannelError::OutcomeUnknown(
            "refund answer names another refund".to_owned(),
        ));
    }
    Ok(record)
}

impl WechatChannel {
    /// Decodes the refund of a `REFUND.*` notification (already verified and decrypted): ours
    /// by merchant id, its amounts within range, and its status the one the event names.
    fn refund_notify(
        &self,
        notification: Notification,
        plaintext: &[u8],
    ) -> Result<VerifiedNotify, NotifyRejection> {
        if notification.resource.original_type.as_deref() != Some(protocol::REFUND_ASSOCIATED_DATA)
        {
            return Err(NotifyRejection::Malformed(
                "a refund event without a refund resource",
            ));
        }
        let notice: RefundNotice = strict::json_bytes(plaintext)
            .map_err(|_| NotifyRejection::Malformed("resource is not a refund"))?;
        if notice.mchid != self.config.mchid {
            return Err(NotifyRejection::WrongMerchant);
        }
        if let Some(problem) = refund_amount_problem(&notice.amount) {
            return Err(NotifyRejection::Malformed(problem));
        }
        let state = match (
            notification.event_type.as_str(),
            notice.refund_status.as_str(),
        ) {
            (protocol::EVENT_REFUND_SUCCESS, protocol::REFUND_STATUS_SUCCESS) => {
                RefundState::Succeeded(Refund {
                    channel_refund_no: notice.refund_id,
                    refund_fen: notice.amount.refund,
                    refunded_at_ms: success_time_ms(notice.success_time.as_deref())
                        .map_err(NotifyRejection::Malformed)?,
                })
            }
            (protocol::EVENT_REFUND_ABNORMAL, protocol::REFUND_STATUS_ABNORMAL) => {
                RefundState::Abnormal
            }
            (protocol::EVENT_REFUND_CLOSED, protocol::REFUND_STATUS_CLOSED) => RefundState::Closed,
            _ => {
                return Err(NotifyRejection::Malformed(
                    "refund event and refund_status disagree",
                ));
            }
        };
        Ok(VerifiedNotify {
            notify_id: notification.id,
            out_trade_no: notice.out_trade_no,
            // The trade's amount, which the merchant checks against its payment.
            amount_fen: notice.amount.total,
            state: NotifiedState::Refund {
                out_refund_no: notice.out_refund_no,
                refund_fen: notice.amount.refund,
                state,
            },
        })
    }
}

#[async_trait]
impl Channel for WechatChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Wechat
    }

    async fn create_trade(&self, trade: &CreateTrade) -> Result<CreatedTrade, ChannelError> {
        if !(crate::money::AMOUNT_FEN_MIN..=crate::money::AMOUNT_FEN_MAX)
            .contains(&trade.amount_fen)
        {
            return Err(ChannelError::Invalid(format!(
                "amount {} fen out of range",
                trade.amount_fen
            )));
        }
        let body = json!({
            "appid": self.config.appid,
            "mchid": self.config.mchid,
            "description": trade.subject,
            "out_trade_no": trade.out_trade_no,
            "time_expire": protocol::format_rfc3339(trade.expires_at_ms),
            "notify_url": self.config.notify_url,
            "amount": { "total": trade.amount_fen, "currency": "CNY" },
        });
        let (status, text) = self
            .call(Method::POST, protocol::PATH_NATIVE, Some(&body))
            .await?;
        if !status.is_success() {
            return Err(Self::rejection(status, &text));
        }
        let answer: Value = strict::json(&text)
            .map_err(|_| ChannelError::OutcomeUnknown("create answer is not JSON".to_owned()))?;
        Ok(CreatedTrade {
            pay_url: answer
                .get("code_url")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
    }

    async fn query_trade(&self, out_trade_no: &str) -> Result<TradeState, ChannelError> {
        let path = format!(
            "{}{out_trade_no}?mchid={}",
            protocol::PATH_OUT_TRADE_NO,
            self.config.mchid
        );
        let (status, text) = self.call(Method::GET, &path, None).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(TradeState::NotFound);
        }
        if !status.is_success() {
            return Err(Self::rejection(status, &text));
        }
        let transaction: Transaction = strict::json(&text).map_err(|_| {
            ChannelError::OutcomeUnknown("query answer is not a transaction".to_owned())
        })?;
        Ok(state_of(&transaction))
    }

    async fn close_trade(&self, out_trade_no: &str) -> Result<TradeState, ChannelError> {
        let path = format!("{}{out_trade_no}/close", protocol::PATH_OUT_TRADE_NO);
        let (status, text) = self
            .call(
                Method::POST,
                &path,
                Some(&json!({ "mchid": self.config.mchid })),
            )
            .await?;
        if !status.is_success() {
            let rejection = Self::rejection(status, &text);
            if !matches!(&rejection, ChannelError::Rejected { sub_code, .. } if sub_code == protocol::CODE_ORDERPAID)
            {
                return Err(rejection);
            }
        }
        // 204 is also the answer for an unknown or already closed trade, and ORDERPAID means
        // the buyer won the race: the query says what the channel really holds.
        self.query_trade(out_trade_no).await
    }

    async fn refund(&self, refund: &RefundTrade) -> Result<RefundState, ChannelError> {
        check_refund(refund)?;
        let mut body = json!({
            "out_trade_no": refund.out_trade_no,
            "out_refund_no": refund.out_refund_no,
            "notify_url": self.config.notify_url,
            "amount": {
                "refund": refund.refund_fen,
                "total": refund.total_fen,
                "currency": "CNY",
            },
        });
        if !refund.reason.is_empty()
            && let Value::Object(fields) = &mut body
        {
            fields.insert("reason".to_owned(), Value::String(refund.reason.clone()));
        }
        let (status, text) = self
            .call(Method::POST, protocol::PATH_REFUNDS, Some(&body))
            .await?;
        if !status.is_success() {
            return Err(Self::rejection(status, &text));
        }
        let record = read_refund_record(&text, &refund.out_trade_no, &refund.out_refund_no)?;
        // The channel refuses one number with another amount, so an answer with other amounts
        // is not about this request.
        if record.amount.refund != refund.refund_fen || record.amount.total != refund.total_fen {
            return Err(ChannelError::OutcomeUnknown(
                "refund answer states other amounts".to_owned(),
            ));
        }
        refund_state_of(&record)
    }

    async fn query_refund(
        &self,
        out_trade_no: &str,
        out_refund_no: &str,
    ) -> Result<RefundState, ChannelError> {
        check_refund_numbers(out_trade_no, out_refund_no)?;
        let path = format!("{}/{out_refund_no}", protocol::PATH_REFUNDS);
        let (status, text) = self.call(Method::GET, &path, None).await?;
        if !status.is_success() {
            let rejection = Self::rejection(status, &text);
            // Only the channel's own "no such refund" means none; another 404 (no such API,
            // a proxy's page) says nothing about the refund.
            return match &rejection {
                ChannelError::Rejected { sub_code, .. }
                    if status == StatusCode::NOT_FOUND
                        && sub_code == protocol::CODE_RESOURCE_NOT_EXISTS =>
                {
                    Ok(RefundState::NotFound)
                }
                _ => Err(rejection),
            };
        }
        refund_state_of(&read_refund_record(&text, out_trade_no, out_refund_no)?)
    }

    fn verify_notify(
        &self,
        notify: &RawNotify,
        now_ms: i64,
    ) -> Result<VerifiedNotify, NotifyRejection> {
        let header =
            |name: &'static str| notify.header(name)?.ok_or(NotifyRejection::Malformed(name));
        let (timestamp, nonce, signature, serial) = (
            header(protocol::HEADER_TIMESTAMP)?,
            header(protocol::HEADER_NONCE)?,
            header(protocol::HEADER_SIGNATURE)?,
            header(protocol::HEADER_SERIAL)?,
        );
        if let Some(kind) = notify.header(protocol::HEADER_SIGNATURE_TYPE)?
            && kind != protocol::AUTHORIZATION_SCHEME
        {
            return Err(NotifyRejection::Malformed("unsupported signature type"));
        }
        // The platform signs under the serial of its certificate (or public key): a serial we
        // do not know is not a key we can trust, whatever the signature. Verification stays
        // synchronous: in certificate mode an unknown serial starts a bounded download in the
        // background and the notify is refused; the channel's resend then verifies. Waiting
        // here instead would let each forged notify hold a request open for a download.
        let Some(platform_key) = self.platform_key(serial, now_ms) else {
            self.refresh_in_background();
            return Err(NotifyRejection::UnknownSerial);
        };
        let signed_at_secs: i64 = timestamp
            .parse()
            .map_err(|_| NotifyRejection::Malformed("timestamp"))?;
        if !protocol::timestamp_is_fresh(signed_at_secs, now_ms) {
            return Err(NotifyRejection::StaleTimestamp);
        }
        let body = std::str::from_utf8(&notify.body)
            .map_err(|_| NotifyRejection::Malformed("body is not UTF-8"))?;
        if signature.starts_with(protocol::SIGNTEST_PREFIX)
            || !platform_key.verify(
                protocol::notify_message(timestamp, nonce, body).as_bytes(),
                signature,
            )
        {
            return Err(NotifyRejection::BadSignature);
        }
        // The body is signed whole, but it is still read once, refusing a repeated key, so
        // that no reader of it can see another value than this one.
        let notification: Notification =
            strict::json(body).map_err(|_| NotifyRejection::Malformed("not a notification"))?;
        let resource = &notification.resource;
        if resource.algorithm != protocol::RESOURCE_ALGORITHM {
            return Err(NotifyRejection::Malformed("unsupported resource algorithm"));
        }
        let plaintext = aes_gcm_decrypt(
            self.config.api_v3_key.as_bytes(),
            resource.nonce.as_bytes(),
            resource.associated_data.as_bytes(),
            &resource.ciphertext,
        )
        .map_err(|_| NotifyRejection::Undecryptable)?;
        if matches!(
            notification.event_type.as_str(),
            protocol::EVENT_REFUND_SUCCESS
                | protocol::EVENT_REFUND_ABNORMAL
                | protocol::EVENT_REFUND_CLOSED
        ) {
            return self.refund_notify(notification, &plaintext);
        }
        let transaction: Transaction = strict::json_bytes(&plaintext)
            .map_err(|_| NotifyRejection::Malformed("resource is not a transaction"))?;
        if transaction.mchid != self.config.mchid || transaction.appid != self.config.appid {
            return Err(NotifyRejection::WrongMerchant);
        }
        let state = match state_of(&transaction) {
            TradeState::Paid(payment)
                if notification.event_type == protocol::EVENT_TRANSACTION_SUCCESS =>
            {
                NotifiedState::Paid(payment)
            }
            TradeState::Closed => NotifiedState::Closed,
            _ => NotifiedState::Other(transaction.trade_state.clone()),
        };
        Ok(VerifiedNotify {
            notify_id: notification.id,
            out_trade_no: transaction.out_trade_no,
            amount_fen: transaction.amount.total,
            state,
        })
    }

    fn answer(&self, verdict: NotifyVerdict) -> NotifyAnswer {
        // WeChat Pay reads only the status: 200/204 stops the resends, anything else is sent
        // again. A bad notify gets a 4xx (nothing of ours failed); one we cannot take now (the
        // database or the order's lock unavailable) a 503, as any answer that asks to come
        // back: a 500 is kept for a failure of ours, which a fault never excuses.
        let (status, body) = match verdict {
            NotifyVerdict::Accepted => (204, String::new()),
            NotifyVerdict::Refused => (
                400,
                r#"{"code":"FAIL","message":"notify refused"}"#.to_owned(),
            ),
            NotifyVerdict::RetryLater => (
                503,
                r#"{"code":"FAIL","message":"not processed, please retry"}"#.to_owned(),
            ),
        };
        NotifyAnswer {
            status,
            content_type: "application/json",
            body,
        }
    }

    async fn bill(&self, date: BillDate) -> Result<Option<Bill>, ChannelError> {
        self.fetch_bill(date).await
    }
}
