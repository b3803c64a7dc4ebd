//! A Redis Cluster connection that starts over from the seed nodes when redis-rs's own recovery
//! is left without a single node connection.
//!
//! redis-rs's cluster connection reconnects to nodes and follows slot moves by itself. After
//! every node of a cluster was killed at once, though, it can stay on an empty connection map:
//! each call then fails at once with `ClusterConnectionNotFound` while the cluster itself has
//! long re-formed. It was seen holding that state for about 30 s on one of three service
//! instances, after 2 of 40 whole-cluster restarts in the million-request storm (the others
//! recovered within a second). This wrapper ends such a state: on that error it builds a fresh
//! connection from the seed nodes in the background, by one caller at a time and at most once
//! a [`REBUILD_INTERVAL`], and swaps it in for every later call. The call that met the error
//! still fails ([`StoreError::Unavailable`](crate::error::StoreError::Unavailable)): it was
//! never sent, and its caller decides whether to retry.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::{Cmd, ErrorKind, Pipeline, RedisFuture, RedisResult, Value};

/// Fresh connections are built at most this often, however many calls fail meanwhile.
const REBUILD_INTERVAL: Duration = Duration::from_secs(1);

/// How long building a fresh connection (discovering the slots from a seed node) may take
/// before the attempt is dropped and the current connection kept.
const REBUILD_TIMEOUT: Duration = Duration::from_secs(10);

/// A Redis Cluster connection for [`RedisStore`](super::RedisStore): redis-rs's
/// [`ClusterConnection`](redis::cluster_async::ClusterConnection), replaced by a fresh one
/// from the seed nodes when it reports that it has no connection to any node. Clones share the
/// connection and its replacement.
#[derive(Clone)]
pub struct ClusterConnection {
    shared: Arc<Shared>,
}

struct Shared {
    client: ClusterClient,
    current: RwLock<Current>,
    rebuild: Mutex<Rebuild>,
}

#[derive(Clone)]
struct Current {
    /// How many connections were swapped in before this one: a caller whose call failed on
    /// an older one does not replace the one already rebuilt.
    generation: u64,
    connection: redis::cluster_async::ClusterConnection,
}

#[derive(Default)]
struct Rebuild {
    running: bool,
    last_started: Option<Instant>,
}

impl ClusterConnection {
    /// Connects through `client`'s seed nodes; the client is kept to connect again.
    pub async fn connect(client: ClusterClient) -> RedisResult<Self> {
        let connection = client.get_async_connection().await?;
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                current: RwLock::new(Current {
                    generation: 0,
                    connection,
                }),
                rebuild: Mutex::new(Rebuild::default()),
            }),
        })
    }

    /// How many times a fresh connection replaced the first one.
    pub fn rebuilds(&self) -> u64 {
        self.shared.current().generation
    }
}

impl Shared {
    fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts a rebuild in the background if the call on connection `generation` failed for
    /// want of any node connection, no rebuild is running, that connection is still the
    /// current one and the last rebuild started a [`REBUILD_INTERVAL`] ago or more.
    fn after<T>(self: &Arc<Self>, generation: u64, answer: &RedisResult<T>) {
        if !matches!(answer, Err(error) if error.kind() == ErrorKind::ClusterConnectionNotFound) {
            return;
        }
        {
            let mut rebuild = self.rebuild.lock().unwrap_or_else(PoisonError::into_inner);
            let recent = rebuild
                .last_started
                .is_some_and(|started| started.elapsed() < REBUILD_INTERVAL);
            if rebuild.running || recent || self.current().generation != generation {
                return;
            }
            rebuild.running = true;
            rebuild.last_started = Some(Instant::now());
        }
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            shared.rebuild(generation).await;
            shared
                .rebuild
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .running = false;
        });
    }

    async fn rebuild(&self, generation: u64) {
        let started = Instant::now();
        let outcome =
            tokio::time::timeout(REBUILD_TIMEOUT, self.client.get_async_connection()).await;
        let result = match outcome {
            Ok(Ok(connection)) => {
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                *current = Current {
                    generation: generation + 1,
                    connection,
                };
                tracing::warn!(
                    took = ?started.elapsed(),
                    "Redis Cluster: no connection to any node; a fresh connection from the seed \
                     nodes replaced it"
                );
                "rebuilt"
            }
            Ok(Err(error)) => {
                tracing::warn!(
                    %error,
                    "Redis Cluster: no connection to any node, and a fresh one failed"
                );
                "failed"
            }
            Err(_) => {
                tracing::warn!(
                    timeout = ?REBUILD_TIMEOUT,
                    "Redis Cluster: no connection to any node, and a fresh one timed out"
                );
                "failed"
            }
        };
        metrics::counter!(crate::metrics::REDIS_CLUSTER_REBUILDS, "outcome" => result).increment(1);
    }
}

impl ConnectionLike for ClusterConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let Current {
                generation,
                mut connection,
            } = self.shared.current();
            let answer = connection.req_packed_command(cmd).await;
            self.shared.after(generation, &answer);
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let Current {
                generation,
                mut connection,
            } = self.shared.current();
            let answer = connection
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.shared.after(generation, &answer);
            answer
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
