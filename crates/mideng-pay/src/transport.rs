//! The HTTP/1 server under the API and the metrics listener, with a bound on every wait and size
//! a client controls.
//!
//! `axum::serve` gives no access to hyper's connection settings, so a client could hold a
//! connection forever: headers never finished, a large `Content-Length` with one byte sent, an
//! idle kept-alive socket. [`serve`] accepts connections itself and hands each to hyper's
//! HTTP/1 connection builder, with:
//!
//! - a deadline for the request head (hyper's `header_read_timeout`). Hyper starts that clock
//!   whenever it waits for a head, so it is also the idle timeout of a kept-alive connection:
//!   one setting bounds both;
//! - a deadline for the whole request body, from the end of its head
//!   ([`mideng::http::RequestBodyDeadlineLayer`]; the API answers 408 `request-body-timeout`);
//! - a bound on the head's size and number of fields (hyper answers 431 itself, with an empty
//!   body, and closes: it writes that answer without calling the service);
//! - at most [`TransportSettings::connections_max`] connections at once: further ones are not
//!   accepted until one closes, so they wait in the kernel's accept backlog rather than being
//!   refused — a burst is delayed, not dropped, and the process never holds more sockets than
//!   the bound.
//!
//! Shutdown is graceful as with `axum::serve`: stop accepting, let hyper finish the requests in
//! flight and close idle connections, then return. Every wait above is bounded, so a slow
//! client delays shutdown by at most a head or body deadline.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use mideng::http::RequestBodyDeadlineLayer;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Pause after a failed `accept` (typically out of file descriptors), so that the loop does not
/// spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Bounds on what one client may hold; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportSettings {
    /// How long a request head may take to arrive, and how long a kept-alive connection may
    /// stay idle (default 10 s: a head is one packet or a few; Apache keeps idle connections
    /// 5 s).
    pub header_read_timeout: Duration,
    /// How long a whole request body may take to arrive after its head (default 30 s: the
    /// largest body the API takes, 64 KiB, needs about 2 KiB/s).
    pub body_read_timeout: Duration,
    /// Connections served at once (default 1024: well below the usual 65 536 open files,
    /// leaving room for database and broker connections).
    pub connections_max: usize,
    /// Largest request head, request line included (default 16 KiB: an API key, a key, a token
    /// and the usual headers take well under 2 KiB).
    pub header_bytes_max: usize,
    /// Most header fields in one request (default 64).
    pub headers_max: usize,
}

impl Default for TransportSettings {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            connections_max: 1024,
            header_bytes_max: 16 * 1024,
            headers_max: 64,
        }
    }
}

/// Serves `router` on `listener` within `settings` until `shutdown` completes, then finishes the
/// requests in flight.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: TransportSettings,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let router = router.layer(RequestBodyDeadlineLayer::new(settings.body_read_timeout));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_header_size(settings.header_bytes_max)
        .max_headers(settings.headers_max);
    // One permit per open connection; a connection returns its permit when it ends.
    let permits = Arc::new(Semaphore::new(settings.connections_max));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => {
                permit.expect("the semaphore is never closed")
            }
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Answers are small and sent whole: do not let Nagle hold their last segment back.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                // Timeouts, resets and malformed requests end here; none is the service's fault.
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
