//! A TCP forwarder in front of a server (Redis, a broker): `cut` closes every connection and
//! refuses new ones — to the service the server is gone, as when it is stopped — and `restore`
//! lets connections through again. Faults on the wire, without stopping servers that other
//! users of the machine share: the storm cuts Redis and RabbitMQ with it, the service tests a
//! broker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

/// A forwarder to one upstream address.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::new(Mutex::new(Vec::new()));
        let upstream = upstream.to_owned();
        let accept = {
            let up = up.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        continue; // dropped at once: the server is "down"
                    }
                    let upstream = upstream.clone();
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
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
            up,
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
        self.up.store(false, Ordering::SeqCst);
        if let Ok(mut open) = self.connections.lock() {
            for connection in open.drain(..) {
                connection.abort();
            }
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
