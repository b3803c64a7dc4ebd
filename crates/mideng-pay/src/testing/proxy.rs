//! A TCP forwarder in front of a server (a database, Redis, a broker), and the faults of the
//! link it stands for — on the wire, without stopping servers that other users of the machine
//! share. The storm cuts Redis and RabbitMQ and troubles the database link with it; the
//! service's tests cut a broker and lose a commit's answer.
//!
//! | fault | what the client sees |
//! |---|---|
//! | [`Proxy::cut`] | every connection closed, new ones refused: the server is gone |
//! | [`LinkFault::Latency`] | every chunk, each way, delayed by the latency ± the jitter (in order: a TCP stream never reorders) |
//! | [`LinkFault::Held`] | nothing passes either way, nothing is closed — a partition: bytes wait (as TCP retransmits them) and flow again when it heals |
//! | [`LinkFault::CommitAnswersLost`] | a connection that sends `COMMIT` gets no byte back from then on, and is closed [`SWALLOWED_FOR`] later: the transaction committed (or not) and the client cannot know |
//! | [`LinkFault::AnswersLostAfter`] | the same once a connection that prepared a statement whose text holds the given bytes sends its next message (the statement's execution): for a statement that commits itself, outside a transaction (a connection prepares a statement, with its text, the first time it runs it, and waits for the answer before it runs it) |
//!
//! The kernel's own tools for this (`tc netem`, nftables) need network namespaces and a kernel
//! with `sch_netem`; this forwarder needs neither, and sees the protocol well enough to aim a
//! fault at a commit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

/// How long a connection whose commit answer was swallowed stays open, answering nothing,
/// before it is closed (as a client's or the kernel's timeout would end it).
pub const SWALLOWED_FOR: Duration = Duration::from_millis(800);
/// How often a held direction looks whether the partition healed.
const HELD_POLL: Duration = Duration::from_millis(20);
/// Bytes read per chunk.
const CHUNK: usize = 16 * 1024;

/// A fault of the link, besides [`Proxy::cut`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkFault {
    /// Bytes pass.
    #[default]
    None,
    /// Every chunk each way waits `latency` ± `jitter`.
    Latency {
        /// The mean delay.
        latency: Duration,
        /// At most this much more or less, uniformly.
        jitter: Duration,
    },
    /// Nothing passes; connections stay open.
    Held,
    /// A connection that sends `COMMIT` hears nothing more and is closed [`SWALLOWED_FOR`]
    /// later.
    CommitAnswersLost,
    /// A connection that sends these bytes (a statement's text, which goes with its
    /// preparation the first time a connection runs it) and then its next message (the
    /// statement's execution) hears nothing more from then on, and is closed [`SWALLOWED_FOR`]
    /// later.
    AnswersLostAfter(&'static [u8]),
}

/// What the link's state is shared as.
#[derive(Debug, Default)]
struct Link {
    up: AtomicBool,
    fault: Mutex<LinkFault>,
    swallowed: AtomicU64,
}

impl Link {
    fn fault(&self) -> LinkFault {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A forwarder to one upstream address.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    link: Arc<Link>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let link = Arc::new(Link {
            up: AtomicBool::new(true),
            ..Link::default()
        });
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::new(Mutex::new(Vec::new()));
        let upstream = upstream.to_owned();
        let accept = {
            let link = link.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    if !link.up.load(Ordering::SeqCst) {
                        continue; // dropped at once: the server is "down"
                    }
                    let upstream = upstream.clone();
                    let link = link.clone();
                    let task = tokio::spawn(async move {
                        if let Ok(outbound) = TcpStream::connect(&upstream).await {
                            forward(inbound, outbound, &link).await;
                        }
                    });
                    if let Ok(mut open) = connections.lock() {
                        open.retain(|connection| !connection.is_finished());
                        open.push(task.abort_handle());
                    }
                }
            })
        };
        Ok(Self {
            port,
            link,
            connections,
            accept,
        })
    }

    /// The loopback port to connect to instead of the upstream.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Breaks every connection and refuses new ones.
    pub fn cut(&self) {
        self.link.up.store(false, Ordering::SeqCst);
        if let Ok(mut open) = self.connections.lock() {
            for connection in open.drain(..) {
                connection.abort();
            }
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.link.up.store(true, Ordering::SeqCst);
    }

    /// Troubles the link with `fault` from now on ([`LinkFault::None`] heals it).
    pub fn set_fault(&self, fault: LinkFault) {
        *self.link.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    /// Commits whose answer the link swallowed so far.
    pub fn commits_swallowed(&self) -> u64 {
        self.link.swallowed.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Forwards both ways until either side closes, or a swallowed connection's time is up.
async fn forward(inbound: TcpStream, outbound: TcpStream, link: &Link) {
    let (client_read, client_write) = inbound.into_split();
    let (server_read, server_write) = outbound.into_split();
    let swallowed_since: Mutex<Option<Instant>> = Mutex::new(None);
    let up = pump(
        client_read,
        server_write,
        link,
        Direction::Up,
        &swallowed_since,
    );
    let down = pump(
        server_read,
        client_write,
        link,
        Direction::Down,
        &swallowed_since,
    );
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// One direction of a connection, chunk by chunk, under the link's fault.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    link: &Link,
    direction: Direction,
    swallowed_since: &Mutex<Option<Instant>>,
) {
    let mut buffer = vec![0_u8; CHUNK];
    let mut rng = fastrand::Rng::new();
    // Up: the statement named by `AnswersLostAfter` was prepared on this connection; what the
    // connection sends next runs it.
    let mut armed = false;
    loop {
        let since = *swallowed_since.lock().unwrap_or_else(|e| e.into_inner());
        let read = match since {
            // Swallowing: read (and drop) until the connection's time is up.
            Some(since) => {
                match tokio::time::timeout_at(since + SWALLOWED_FOR, from.read(&mut buffer)).await {
                    Ok(read) => read,
                    Err(_) => return,
                }
            }
            None => from.read(&mut buffer).await,
        };
        let Ok(read) = read else { return };
        if read == 0 {
            return;
        }
        let chunk = &buffer[..read];
        // Read again: the commit may have gone up while this direction waited for bytes.
        if direction == Direction::Down
            && swallowed_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
        {
            continue;
        }
        loop {
            match link.fault() {
                LinkFault::Held => tokio::time::sleep(HELD_POLL).await,
                LinkFault::Latency { latency, jitter } => {
                    let spread = u64::try_from(jitter.as_micros()).unwrap_or(u64::MAX);
                    let offset = rng.u64(0..=spread.saturating_mul(2));
                    let delay = (latency + Duration::from_micros(offset)).saturating_sub(jitter);
                    tokio::time::sleep(delay).await;
                    break;
                }
                LinkFault::CommitAnswersLost
                    if direction == Direction::Up && names(chunk, b"COMMIT") =>
                {
                    let mut since = swallowed_since.lock().unwrap_or_else(|e| e.into_inner());
                    if since.is_none() {
                        *since = Some(Instant::now());
                        link.swallowed.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
                LinkFault::AnswersLostAfter(needle)
                    if direction == Direction::Up && !armed && names(chunk, needle) =>
                {
                    armed = true;
                    break;
                }
                LinkFault::AnswersLostAfter(_) if direction == Direction::Up && armed => {
                    let mut since = swallowed_since.lock().unwrap_or_else(|e| e.into_inner());
                    if since.is_none() {
                        *since = Some(Instant::now());
                        link.swallowed.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
                LinkFault::None | LinkFault::CommitAnswersLost | LinkFault::AnswersLostAfter(_) => {
                    break;
                }
            }
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// Whether a chunk the client sent carries `needle`, in any case: a `COMMIT` statement
/// (PostgreSQL's simple query and MySQL's `COM_QUERY` both send its text as is), or a
/// statement's text.
fn names(chunk: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && chunk
            .windows(needle.len())
            .any(|window| window.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_is_seen_in_any_case_and_nothing_else_is() {
        assert!(names(b"Q\0\0\0\x0bCOMMIT\0", b"COMMIT"));
        assert!(names(b"\x07\0\0\0\x03commit", b"COMMIT"));
        assert!(!names(b"Q\0\0\0\x0eROLLBACK\0", b"COMMIT"));
        assert!(!names(b"COMMI", b"COMMIT"));
        assert!(!names(b"anything", b""));
    }
}
