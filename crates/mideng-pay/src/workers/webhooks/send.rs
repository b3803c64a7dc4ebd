//! The dispatcher's side of one attempt: the HTTP client, its resolver behind the
//! outbound-address guard, the signed POST and the texts an attempt records.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use super::WebhookSettings;
use crate::domain::outbound::{TargetPolicy, literal_address};
use crate::domain::webhook::{secret_key, signatures, signing_secrets};
use crate::store::webhooks::{Attempt, DueDelivery};

/// What an attempt that could not connect records, whatever stopped it: the outbound-address
/// guard, nothing listening, no DNS answer, a failed TLS handshake. One text (and no status),
/// so that a tenant's delivery history cannot tell a refused address from a closed port or an
/// open one from a filtered one: it is no scanner of our network. The cause goes to the
/// operator's log.
pub(super) const CONNECTION_REFUSED: &str = "connection refused";

/// What an attempt records when its answer did not come in time.
pub(super) const TIMED_OUT: &str = "timed out";

/// The HTTP client of the dispatcher: names resolved by the `GuardedResolver`, no proxies
/// (an environment's `HTTP_PROXY` would connect in our stead, past the guard), no redirects (an
/// endpoint answers itself or fails), the attempt's timeout.
pub fn client(settings: &WebhookSettings) -> Result<reqwest::Client, reqwest::Error> {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    let mut hosts: HashMap<String, Vec<SocketAddr>> = HashMap::new();
    for (name, address) in &settings.hosts {
        hosts.entry(host_key(name)).or_default().push(*address);
    }
    reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(GuardedResolver {
            targets: settings.targets.clone(),
            hosts: Arc::new(hosts),
        })
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(settings.timeout.min(Duration::from_secs(5)))
        .timeout(settings.timeout)
        .user_agent("mideng-webhooks/1")
        .build()
}

/// The dispatcher's resolver: the system's, or the pinned addresses of
/// [`WebhookSettings::hosts`], with every answer judged by the outbound-address rule
/// ([`TargetPolicy::permits_resolved`]) and those not global dropped, unless private targets
/// are allowed. reqwest
/// connects only to what it returns, so what is judged is what is connected to: a name that
/// resolves into our network (an /etc/hosts entry, a rebinding DNS server) is never reached.
#[derive(Clone, Debug)]
pub(super) struct GuardedResolver {
    targets: TargetPolicy,
    /// Pinned names, by [`host_key`].
    hosts: Arc<HashMap<String, Vec<SocketAddr>>>,
}

/// A name none of whose addresses the guard lets the dispatcher connect to.
#[derive(Debug, thiserror::Error)]
#[error("{name} resolves to no address this service connects to on a tenant's behalf")]
pub(super) struct NoPermittedAddress {
    name: String,
}

/// A name as the pinned hosts are keyed: lowercase, without the trailing dot of a fully
/// qualified name.
pub(super) fn host_key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.clone();
        let name = name.as_str().to_owned();
        Box::pin(async move { resolver.permitted_addresses(name).await })
    }
}

impl GuardedResolver {
    /// The addresses of `name` that the guard lets the dispatcher connect to; an error when
    /// there are none.
    async fn permitted_addresses(
        self,
        name: String,
    ) -> Result<reqwest::dns::Addrs, Box<dyn std::error::Error + Send + Sync>> {
        let answers: Vec<SocketAddr> = match self.hosts.get(&host_key(&name)) {
            Some(pinned) => pinned.clone(),
            // Port 0: reqwest puts the URL's port (or the scheme's) in its place.
            None => tokio::net::lookup_host((name.as_str(), 0)).await?.collect(),
        };
        let permitted: Vec<SocketAddr> = answers
            .into_iter()
            .filter(|answer| self.targets.permits_resolved(answer.ip()))
            .collect();
        if permitted.is_empty() {
            return Err(NoPermittedAddress { name }.into());
        }
        Ok(Box::new(permitted.into_iter()))
    }
}

pub(super) fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One attempt: the signed POST and what came of it. Unless `targets` permits it, a URL
/// whose host is an IP literal that is not global is refused here, before anything is sent:
/// reqwest hands only names to the resolver and connects to a literal directly, and URLs
/// stored before registration judged every address must be judged at send time too.
pub(super) async fn attempt(
    client: &reqwest::Client,
    due: &DueDelivery,
    targets: &TargetPolicy,
    at_ms: i64,
) -> (Attempt, bool) {
    let started = Instant::now();
    let timestamp = at_ms.div_euclid(1000);
    let delivery = &due.delivery;
    // The current secret signs, and the previous one too while its rotation's overlap lasts.
    let keys: Option<Vec<Vec<u8>>> = signing_secrets(
        &due.secret,
        due.previous_secret
            .as_ref()
            .map(|(secret, until_ms)| (secret.as_str(), *until_ms)),
        at_ms,
    )
    .into_iter()
    .map(secret_key)
    .collect();
    let (status_code, error) = match (keys, reqwest::Url::parse(&due.url)) {
        (None, _) => (None, Some("the endpoint's secret is unreadable".to_owned())),
        (Some(_), Err(_)) => (None, Some("the endpoint's URL is unreadable".to_owned())),
        (Some(_), Ok(url)) if literal_address(&url).is_some() && !targets.permits_url(&url) => {
            crate::flows::decision(
                "outbound",
                "webhook.deliver",
                &delivery.tenant_id,
                &delivery.delivery_id,
                "target_refused",
            );
            (None, Some(CONNECTION_REFUSED.to_owned()))
        }
        (Some(keys), Ok(url)) => {
            let signed = signatures(
                &keys,
                &delivery.event_id,
                timestamp,
                delivery.payload.as_bytes(),
            );
            // Its own span (a trace of its own: the event's request ended long ago), whose
            // `traceparent` the merchant's tracing may continue.
            let span = tracing::info_span!(
                "webhook.deliver",
                otel.name = "POST webhook",
                otel.kind = "client",
                webhook.id = %delivery.event_id,
                webhook.endpoint_id = %delivery.endpoint_id,
            );
            let traced = span.in_scope(crate::telemetry::outbound_headers);
            let sent = client
                .post(url)
                .headers(traced)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header("webhook-id", &delivery.event_id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signed)
                .body(delivery.payload.clone())
                .send()
                .instrument(span)
                .await;
            match sent {
                Ok(response) if response.status().is_success() => {
                    (Some(i64::from(response.status().as_u16())), None)
                }
                Ok(response) => {
                    let code = response.status().as_u16();
                    (Some(i64::from(code)), Some(format!("HTTP {code}")))
                }
                Err(error) => {
                    tracing::debug!(%error, endpoint_id = %delivery.endpoint_id, "webhook attempt failed");
                    (None, Some(failure_text(&error).to_owned()))
                }
            }
        }
    };
    let delivered = error.is_none();
    (
        Attempt {
            attempt: delivery.attempts.saturating_add(1),
            at_ms,
            status_code,
            error,
            duration_ms: ms(started.elapsed()),
        },
        delivered,
    )
}

/// What a tenant's attempt records of a request that got no HTTP answer: any failure before
/// the connection stood is [`CONNECTION_REFUSED`] (even one that timed out), a later one that
/// ran out of time [`TIMED_OUT`], anything else (the endpoint closed the connection, or
/// answered something that is not HTTP) that there was no answer.
pub(super) fn failure_text(error: &reqwest::Error) -> &'static str {
    if error.is_connect() {
        CONNECTION_REFUSED
    } else if error.is_timeout() {
        TIMED_OUT
    } else {
        "no HTTP answer"
    }
}
