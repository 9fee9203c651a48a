//! The `LISTEN` connection behind [`TtlStorage::watch`](ttl_storage::TtlStorage::watch)
//! and [`TtlStorage::changes`](ttl_storage::TtlStorage::changes):
//! compare-and-delete `NOTIFY`s the deleted key and the writes of a new
//! value `key LF count LF hex(value)` (each in its own statement, so at its
//! commit, in commit order), and this connection wakes the waiters of that
//! key and tells its followers.

use std::{sync::Arc, time::Duration};

use tokio_postgres::{
    AsyncMessage, Socket,
    tls::{MakeTlsConnect, TlsConnect},
};

use ttl_storage::{Change, changes::Feeds, waiters::Waiters};

/// The first pause before reconnecting a lost listener; it doubles up to
/// [`RECONNECT_MAX_PAUSE`].
const RECONNECT_FIRST_PAUSE: Duration = Duration::from_millis(100);
const RECONNECT_MAX_PAUSE: Duration = Duration::from_secs(5);
/// How often the listener checks, with `SELECT 1`, that its connection
/// still answers (a silently dead connection sends no error), and how long
/// the answer may take before the connection counts as lost.
const HEALTH_INTERVAL: Duration = Duration::from_secs(15);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// The notification channel of the records in `qualified_table`: a name
/// that fits PostgreSQL's 63-byte identifiers whatever the table's name,
/// the same in every process (FNV-1a of the name).
pub(crate) fn channel(qualified_table: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in qualified_table.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("ttl_storage_{hash:016x}")
}

/// Keeps one connection listening on `channel` and wakes the waiters of
/// each key notified on it. The waiters are ready only while a `LISTEN` is
/// in force on a live connection; a lost connection marks them down
/// (waking every waiter, which then polls) until it is re-established and
/// listening again.
pub(crate) async fn run<T>(
    pg: tokio_postgres::Config,
    tls: T,
    channel: String,
    waiters: Arc<Waiters>,
    feeds: Arc<Feeds>,
) where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + Sync,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let mut pause = RECONNECT_FIRST_PAUSE;
    loop {
        match pg.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let listen_sql = format!("LISTEN {channel}");
                let listen = client.batch_execute(&listen_sql);
                tokio::pin!(listen);
                let mut listening = false;
                let health = tokio::time::sleep(HEALTH_INTERVAL);
                tokio::pin!(health);
                loop {
                    tokio::select! {
                        result = &mut listen, if !listening => match result {
                            Ok(()) => {
                                tracing::debug!(%channel, "postgres watch: listening");
                                listening = true;
                                pause = RECONNECT_FIRST_PAUSE;
                                waiters.set_ready(true);
                                feeds.set_ready(true);
                            }
                            Err(err) => {
                                tracing::warn!(%channel, %err, "postgres watch: LISTEN failed");
                                break;
                            }
                        },
                        message = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                            match message {
                                Some(Ok(AsyncMessage::Notification(n))) if n.channel() == channel => {
                                    notified(&waiters, &feeds, n.payload());
                                }
                                Some(Ok(_)) => {}
                                Some(Err(err)) => {
                                    tracing::debug!(%err, "postgres watch: listener connection failed");
                                    break;
                                }
                                None => {
                                    tracing::debug!("postgres watch: listener connection closed");
                                    break;
                                }
                            }
                        }
                        () = &mut health, if listening => {
                            // The check's answer needs the connection
                            // polled: poll it meanwhile, keeping the
                            // notifications it brings.
                            let check = tokio::time::timeout(HEALTH_TIMEOUT, client.simple_query("SELECT 1"));
                            tokio::pin!(check);
                            let alive = loop {
                                tokio::select! {
                                    answer = &mut check => break matches!(answer, Ok(Ok(_))),
                                    message = std::future::poll_fn(|cx| connection.poll_message(cx)) => match message {
                                        Some(Ok(AsyncMessage::Notification(n))) if n.channel() == channel => {
                                            notified(&waiters, &feeds, n.payload());
                                        }
                                        Some(Ok(_)) => {}
                                        Some(Err(_)) | None => break false,
                                    },
                                }
                            };
                            if !alive {
                                tracing::debug!("postgres watch: listener connection does not answer");
                                break;
                            }
                            health.as_mut().reset(tokio::time::Instant::now() + HEALTH_INTERVAL);
                        }
                    }
                }
                waiters.set_ready(false);
                feeds.set_ready(false);
            }
            Err(err) => {
                tracing::debug!(%err, "postgres watch: cannot connect the listener");
                waiters.set_ready(false);
                feeds.set_ready(false);
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX_PAUSE);
    }
}

/// One notification: a deleted key, or `key LF count LF hex(value)` (`!`
/// for a value too long to notify: its followers are sent to read it).
fn notified(waiters: &Waiters, feeds: &Feeds, payload: &str) {
    let mut parts = payload.splitn(3, '\n');
    let key = parts.next().unwrap_or_default();
    match (parts.next(), parts.next()) {
        (Some(count), Some(value)) => match hex::decode(value) {
            Ok(value) => feeds.publish(
                key,
                Change::Written {
                    value,
                    count: count.parse().ok(),
                },
            ),
            Err(_) => {
                feeds.publish(key, Change::Interrupted);
                feeds.publish(key, Change::Armed);
            }
        },
        _ => {
            waiters.wake(key);
            feeds.publish(key, Change::Deleted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_is_a_short_stable_identifier() {
        let c = channel("public.ttl_records");
        assert_eq!(c, channel("public.ttl_records"));
        assert_ne!(c, channel("other.ttl_records"));
        assert!(c.len() <= 63);
        assert!(
            c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        );
        assert_eq!(channel(&"x".repeat(500)).len(), c.len());
    }
}
