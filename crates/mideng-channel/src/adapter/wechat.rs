//! The WeChat Pay v3 adapter: native transactions, query and close by out-trade-no, and
//! verification and decryption of notifications.

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{
    Channel, ChannelError, ChannelKind, CreateTrade, CreatedTrade, NotifiedState, NotifyAnswer,
    NotifyRejection, NotifyVerdict, Payment, RawNotify, TradeState, VerifiedNotify, http_client,
    read_body, transport_error,
};
use crate::keys::{PrivateKey, PublicKey, aes_gcm_decrypt, random_nonce};
use crate::strict;
use crate::wechat::{self as protocol, Authorization, Notification, Transaction};

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
    /// The platform's public key (verifies responses and notifications).
    pub platform_public_key: PublicKey,
    /// The serial of that key (its certificate's serial, or `PUB_KEY_ID_…` in public-key
    /// mode): a notify signed under any other serial is refused.
    pub platform_serial: String,
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

/// The WeChat Pay channel.
#[derive(Clone, Debug)]
pub struct WechatChannel {
    config: WechatConfig,
    client: reqwest::Client,
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
        Ok(Self {
            config,
            client: http_client()?,
        })
    }

    /// A signed call; the status and the verified body.
    async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, String), ChannelError> {
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
        let mut request = self
            .client
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
        let response = request
            .send()
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
        let signed = (
            header(protocol::HEADER_TIMESTAMP),
            header(protocol::HEADER_NONCE),
            header(protocol::HEADER_SIGNATURE),
        );
        // Older servers name no scheme; another scheme than ours, or the header twice, is a
        // signature we cannot check. The platform signs under the one serial we were given.
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
        let serial_known = header(protocol::HEADER_SERIAL).as_deref()
            == Some(self.config.platform_serial.as_str());
        let text = read_body(response).await?;
        if status.is_success() {
            // Answers are signed by the platform; an unsigned or forged success is not believed.
            let verified = match &signed {
                (Some(timestamp), Some(nonce), Some(signature)) if scheme_known && serial_known => {
                    !signature.starts_with(protocol::SIGNTEST_PREFIX)
                        && self.config.platform_public_key.verify(
                            protocol::notify_message(timestamp, nonce, &text).as_bytes(),
                            signature,
                        )
                }
                _ => false,
            };
            if !verified {
                return Err(ChannelError::OutcomeUnknown(
                    "response signature does not verify".to_owned(),
                ));
            }
        }
        Ok((status, text))
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
            if !matches!(&rejection, ChannelError::Rejected { sub_code, .. } if sub_code == "ORDERPAID")
            {
                return Err(rejection);
            }
        }
        // 204 is also the answer for an unknown or already closed trade, and ORDERPAID means
        // the buyer won the race: the query says what the channel really holds.
        self.query_trade(out_trade_no).await
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
        // were not given is not a key we can trust, whatever the signature.
        if serial != self.config.platform_serial {
            return Err(NotifyRejection::UnknownSerial);
        }
        let signed_at_secs: i64 = timestamp
            .parse()
            .map_err(|_| NotifyRejection::Malformed("timestamp"))?;
        if !protocol::timestamp_is_fresh(signed_at_secs, now_ms) {
            return Err(NotifyRejection::StaleTimestamp);
        }
        let body = std::str::from_utf8(&notify.body)
            .map_err(|_| NotifyRejection::Malformed("body is not UTF-8"))?;
        if signature.starts_with(protocol::SIGNTEST_PREFIX)
            || !self.config.platform_public_key.verify(
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
        let transaction: Transaction = strict::json_bytes(&plaintext)
            .map_err(|_| NotifyRejection::Malformed("resource is not a transaction"))?;
        if transaction.mchid != self.config.mchid || transaction.appid != self.config.appid {
            return Err(NotifyRejection::WrongMerchant);
        }
        let state = match state_of(&transaction) {
            TradeState::Paid(payment) if notification.event_type == "TRANSACTION.SUCCESS" => {
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
        // again. A bad notify gets a 4xx (nothing of ours failed); a 5xx is kept for our own
        // failures, so that an alert on 5xx means something.
        let (status, body) = match verdict {
            NotifyVerdict::Accepted => (204, String::new()),
            NotifyVerdict::Refused => (
                400,
                r#"{"code":"FAIL","message":"notify refused"}"#.to_owned(),
            ),
            NotifyVerdict::RetryLater => (
                500,
                r#"{"code":"FAIL","message":"not processed, please retry"}"#.to_owned(),
            ),
        };
        NotifyAnswer {
            status,
            content_type: "application/json",
            body,
        }
    }
}
