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
//! | [`LinkFault::AnswersLate`] | what the client sends arrives at once (the server acts on it); every answer waits the given time, longer than the client waits: an effect whose answer comes after the client's timeout |
//! | [`LinkFault::ResetAfterAnswer`] | what the client sends arrives at once; when the server's answer comes, the connection is reset instead (RST): the server acted, the client hears a reset |
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
    /// Every chunk the server sends waits this long before it goes on to the client; what the
    /// client sends passes at once.
    AnswersLate(Duration),
    /// The server's first byte back on a connection resets it (RST) instead of reaching the
    /// client.
    ResetAfterAnswer,
}

/// What the link's state is shared as.
#[derive(Debug, Default)]
struct Link {
    up: AtomicBool,
    fault: Mutex<LinkFault>,
    swallowed: AtomicU64,
    reset: AtomicU64,
    late: AtomicU64,
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

    /// Connections the link reset when their answer came ([`LinkFault::ResetAfterAnswer`]).
    pub fn answers_reset(&self) -> u64 {
        self.link.reset.load(Ordering::Relaxed)
    }

    /// Chunks of answers the link held back ([`LinkFault::AnswersLate`]).
    pub fn answers_late(&self) -> u64 {
        self.link.late.load(Ordering::Relaxed)
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
                LinkFault::AnswersLate(delay) if direction == Direction::Down => {
                    link.late.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(delay).await;
                    break;
                }
                LinkFault::ResetAfterAnswer if direction == Direction::Down => {
                    // A zero linger makes the close a reset: the client reads an error, not
                    // an end of stream it could take for a short answer.
                    let _best_effort = to.as_ref().set_zero_linger();
                    link.reset.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                LinkFault::None
                | LinkFault::CommitAnswersLost
                | LinkFault::AnswersLostAfter(_)
                | LinkFault::AnswersLate(_)
                | LinkFault::ResetAfterAnswer => {
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

    /// A server that counts each message it receives as done, then answers `done`.
    async fn acting_server() -> (String, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let acted = Arc::new(AtomicU64::new(0));
        let counted = acted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buffer = [0_u8; 64];
                    while let Ok(read) = stream.read(&mut buffer).await {
                        if read == 0 {
                            return;
                        }
                        counted.fetch_add(1, Ordering::SeqCst);
                        if stream.write_all(b"done").await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (address, acted)
    }

    /// Sends one message through the proxy and reads the answer, waiting at most `patience`.
    async fn ask(proxy: &Proxy, patience: Duration) -> Result<Vec<u8>, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .map_err(|error| error.to_string())?;
        stream
            .write_all(b"pay")
            .await
            .map_err(|error| error.to_string())?;
        let mut answer = [0_u8; 16];
        match tokio::time::timeout(patience, stream.read(&mut answer)).await {
            Err(_) => Err("timed out".to_owned()),
            Ok(Err(error)) => Err(error.to_string()),
            Ok(Ok(0)) => Err("closed".to_owned()),
            Ok(Ok(read)) => Ok(answer[..read].to_vec()),
        }
    }

    #[tokio::test]
    async fn a_late_or_reset_answer_comes_after_the_server_acted() {
        let (server, acted) = acting_server().await;
        let proxy = Proxy::start(&server).await.expect("proxy");
        assert_eq!(
            ask(&proxy, Duration::from_secs(5)).await,
            Ok(b"done".to_vec())
        );
        assert_eq!(acted.load(Ordering::SeqCst), 1);

        // Late: the client gives up before the answer, after the server acted.
        proxy.set_fault(LinkFault::AnswersLate(Duration::from_secs(3)));
        assert_eq!(
            ask(&proxy, Duration::from_millis(300)).await,
            Err("timed out".to_owned())
        );
        assert_eq!(acted.load(Ordering::SeqCst), 2, "the server acted on it");

        // Reset: the server acted, the client reads a reset (or, at worst, the end).
        proxy.set_fault(LinkFault::ResetAfterAnswer);
        let reset = ask(&proxy, Duration::from_secs(5)).await;
        assert!(reset.is_err(), "{reset:?}");
        assert_eq!(acted.load(Ordering::SeqCst), 3);
        assert_eq!(proxy.answers_reset(), 1);

        // Healed: answers pass again.
        proxy.set_fault(LinkFault::None);
        assert_eq!(
            ask(&proxy, Duration::from_secs(5)).await,
            Ok(b"done".to_vec())
        );
    }

    #[test]
    fn a_commit_is_seen_in_any_case_and_nothing_else_is() {
        assert!(names(b"Q\0\0\0\x0bCOMMIT\0", b"COMMIT"));
        assert!(names(b"\x07\0\0\0\x03commit", b"COMMIT"));
        assert!(!names(b"Q\0\0\0\x0eROLLBACK\0", b"COMMIT"));
        assert!(!names(b"COMMI", b"COMMIT"));
        assert!(!names(b"anything", b""));
    }
}
