//! `TtlStorage::watch` and `TtlStorage::changes` on Valkey: a second
//! connection subscribed to the channel the write scripts publish on
//! (deleted keys, new values: [`crate::scripts`]), proven by probes, that
//! wakes the waiters of each key and tells its followers; and the watch
//! future itself (the key's `PTTL`, or a wake-up).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use fred::{
    prelude::{Client, ClientLike, EventInterface, KeysInterface, PubsubInterface},
    types::{ConnectHandle, Message, Value},
};
use tokio::{sync::broadcast::error::RecvError, task::JoinHandle};
use ttl_storage::{Change, Watch, WatchUnsupported, changes::Feeds, waiters::Waiters};

/// The name of the channel on which the compare-and-delete script of the
/// storages with key prefix `prefix` publishes the keys it deletes.
pub(crate) fn watch_channel(prefix: &str) -> String {
    format!("{prefix}__deleted")
}

/// The second connection, subscribed to the storage's delete channel, and
/// the task that wakes waiters from what it receives.
pub(crate) struct Subscriber {
    pub(crate) waiters: Arc<Waiters>,
    /// The followers of [`TtlStorage::changes`](ttl_storage::TtlStorage::changes),
    /// live while the waiters are.
    pub(crate) feeds: Arc<Feeds>,
    /// fred's connection task (reconnects forever).
    pub(crate) task: ConnectHandle,
    /// [`run_hub`].
    pub(crate) hub: JoinHandle<()>,
}

impl Subscriber {
    /// Connects `subscriber`, subscribes it to `channel` and proves the
    /// subscription with a probe published by `publisher`, waiting at most
    /// `limit` for it. Never fails: without a proven subscription (no right
    /// to publish or subscribe on the channel, a server that refuses a
    /// second connection) watches answer [`WatchUnsupported`] until one is
    /// made.
    pub(crate) async fn start(
        subscriber: Client,
        publisher: Client,
        channel: String,
        limit: Duration,
    ) -> Subscriber {
        let waiters = Arc::new(Waiters::default());
        let feeds = Arc::new(Feeds::default());
        // Receivers made before connecting: the first connection's
        // reconnect event is not missed.
        let events = Events {
            errors: subscriber.error_rx(),
            reconnects: subscriber.reconnect_rx(),
            messages: subscriber.message_rx(),
        };
        let task = subscriber.connect();
        let refused = Arc::new(AtomicBool::new(false));
        let hub = tokio::spawn(run_hub(
            Hub {
                subscriber,
                publisher,
                channel: channel.clone(),
                waiters: Arc::clone(&waiters),
                feeds: Arc::clone(&feeds),
                refused: Arc::clone(&refused),
            },
            events,
        ));
        // Until proven, refused (no need to wait: the ACL will not change
        // by itself), or the limit.
        let deadline = tokio::time::Instant::now() + limit;
        while !waiters.is_ready()
            && !refused.load(Ordering::Relaxed)
            && tokio::time::Instant::now() < deadline
            && !hub.is_finished()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !waiters.is_ready() {
            tracing::warn!(
                %channel,
                "valkey watch: no proven subscription within {limit:?}; waiters poll until one is made"
            );
        }
        Subscriber {
            waiters,
            feeds,
            task,
            hub,
        }
    }
}

/// The event streams of the subscriber client.
struct Events {
    errors:
        tokio::sync::broadcast::Receiver<(fred::error::Error, Option<fred::types::config::Server>)>,
    reconnects: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
    messages: tokio::sync::broadcast::Receiver<Message>,
}

/// What [`run_hub`] works with.
struct Hub {
    subscriber: Client,
    publisher: Client,
    channel: String,
    waiters: Arc<Waiters>,
    feeds: Arc<Feeds>,
    /// Set when the server refused a probe (`NOPERM`: the ACL gives the
    /// user no right to publish on the channel).
    refused: Arc<AtomicBool>,
}

/// The first pause between probes of a subscription; it doubles up to
/// [`PROBE_MAX_PAUSE`].
const PROBE_FIRST_PAUSE: Duration = Duration::from_millis(250);
const PROBE_MAX_PAUSE: Duration = Duration::from_secs(30);
/// How often a live subscription is probed, and how long its probe may
/// take before the subscription is marked down (waking every waiter).
const HEALTH_INTERVAL: Duration = Duration::from_secs(15);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// A fresh probe message, unique in this process (the storages of one
/// process share the channel): never a server key, which holds no NUL.
fn probe_token() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("\0probe:{}:{n}", std::process::id())
}

impl Hub {
    /// Whether the subscription is live, for the waiters and the followers.
    fn set_ready(&self, ready: bool) {
        self.waiters.set_ready(ready);
        self.feeds.set_ready(ready);
    }

    /// One message of the channel other than a probe: a new value
    /// (`key NUL count NUL value`) or a deleted key.
    fn received(&self, message: &[u8]) {
        if message.first() == Some(&0) {
            // Another process's probe.
            return;
        }
        let mut parts = message.splitn(3, |b| *b == 0);
        let key = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        match (parts.next(), parts.next()) {
            (Some(count), Some(value)) => {
                let count = std::str::from_utf8(count).ok().and_then(|c| c.parse().ok());
                self.feeds.publish(
                    &key,
                    Change::Written {
                        value: value.to_vec(),
                        count,
                    },
                );
            }
            _ => {
                self.waiters.wake(&key);
                self.feeds.publish(&key, Change::Deleted);
            }
        }
    }

    /// Subscribes again after a (re)connection. fred answers `Ok` even when
    /// the server refuses the channel (`NOPERM`), so the subscription is
    /// proven by a probe instead.
    async fn subscribe(&self) {
        self.set_ready(false);
        if let Err(err) = self.subscriber.subscribe(self.channel.as_str()).await {
            tracing::warn!(channel = %self.channel, %err, "valkey watch: cannot subscribe");
        }
    }

    /// Publishes probe `token` on the channel, with the storage's own
    /// connection: it proves that compare-and-delete may publish there too.
    async fn publish_probe(&self, token: &str) {
        let published: std::result::Result<i64, _> = self
            .publisher
            .publish(self.channel.as_str(), token.to_string())
            .await;
        if let Err(err) = published {
            if err.details().starts_with("NOPERM") {
                self.refused.store(true, Ordering::Relaxed);
            }
            tracing::warn!(channel = %self.channel, %err, "valkey watch: cannot publish a probe");
        }
    }
}

/// Keeps the subscriber subscribed to the channel and wakes the waiters of
/// each key published on it. The subscription counts as live ("ready")
/// only once a probe published after subscribing came back. A connection
/// error marks it down (waking every waiter: deletes may be missed from
/// now on) until the client has reconnected, subscribed and been probed.
async fn run_hub(hub: Hub, mut events: Events) {
    // The probe in flight, and when to send the next one.
    let mut probe: Option<String> = None;
    let mut pause = PROBE_FIRST_PAUSE;
    let next_probe = tokio::time::sleep_until(far_future());
    tokio::pin!(next_probe);
    loop {
        // Biased: an error that precedes a reconnection is handled first,
        // so the subscription made after it is not marked down by it.
        tokio::select! {
            biased;
            error = events.errors.recv() => match error {
                Ok((err, _)) => {
                    tracing::debug!(%err, "valkey watch: subscriber connection error");
                    hub.set_ready(false);
                    probe = None;
                }
                Err(RecvError::Lagged(_)) => {
                    hub.set_ready(false);
                    probe = None;
                }
                Err(RecvError::Closed) => break,
            },
            reconnect = events.reconnects.recv() => match reconnect {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    hub.subscribe().await;
                    let token = probe_token();
                    hub.publish_probe(&token).await;
                    probe = Some(token);
                    pause = PROBE_FIRST_PAUSE;
                    next_probe.as_mut().reset(tokio::time::Instant::now() + pause);
                }
                Err(RecvError::Closed) => break,
            },
            message = events.messages.recv() => match message {
                Ok(message) if *message.channel == *hub.channel => {
                    let body: &[u8] = match &message.value {
                        Value::String(body) => body.as_bytes(),
                        Value::Bytes(body) => body,
                        other => {
                            tracing::debug!(?other, "valkey watch: unexpected message");
                            continue;
                        }
                    };
                    if probe.as_deref().map(str::as_bytes) == Some(body) {
                        tracing::debug!(channel = %hub.channel, "valkey watch: subscription proven");
                        probe = None;
                        hub.set_ready(true);
                        next_probe
                            .as_mut()
                            .reset(tokio::time::Instant::now() + HEALTH_INTERVAL);
                    } else {
                        hub.received(body);
                    }
                }
                Ok(_) => {}
                // Messages were dropped: any waiter may have missed its
                // own, and every follower a change.
                Err(RecvError::Lagged(_)) => {
                    hub.waiters.wake_all();
                    if hub.feeds.is_ready() {
                        hub.feeds.set_ready(false);
                        hub.feeds.set_ready(true);
                    }
                }
                Err(RecvError::Closed) => break,
            },
            () = &mut next_probe => {
                if probe.is_some() {
                    // No probe came back: mark the subscription down,
                    // subscribe again (harmless when subscribed) and probe
                    // again, less and less often.
                    tracing::debug!(channel = %hub.channel, "valkey watch: probe unanswered");
                    hub.subscribe().await;
                    pause = (pause * 2).min(PROBE_MAX_PAUSE);
                } else {
                    // Live: check that it still is (a silently dead
                    // connection sends no error).
                    pause = PROBE_FIRST_PAUSE;
                }
                let token = probe_token();
                hub.publish_probe(&token).await;
                let wait = if hub.waiters.is_ready() { HEALTH_TIMEOUT } else { pause };
                probe = Some(token);
                next_probe.as_mut().reset(tokio::time::Instant::now() + wait);
            },
        }
    }
    hub.set_ready(false);
}

/// A deadline that never comes (a year away).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

/// How long a watch whose `PTTL` read failed waits before it completes, so
/// that a caller that re-watches at once does not spin while the server is
/// unreachable.
const WATCH_ERROR_PAUSE: Duration = Duration::from_millis(200);

/// [`TtlStorage::watch`](ttl_storage::TtlStorage::watch) of `server_key`
/// (see `ValkeyStorage`'s): registers a waiter with the subscriber, then
/// (in the future) reads the key's `PTTL`.
pub(crate) fn watch_key(
    client: &Client,
    waiters: &Arc<Waiters>,
    server_key: String,
) -> std::result::Result<Watch, WatchUnsupported> {
    let woken = waiters
        .register(server_key.clone())
        .ok_or(WatchUnsupported)?;
    let client = client.clone();
    Ok(Box::pin(async move {
        let expiry = match client.pttl::<i64, _>(server_key.as_str()).await {
            // -2: no such key (or already expired); 0: expiring now.
            Ok(ms) if ms == -2 || ms == 0 => return,
            Ok(ms) => u64::try_from(ms)
                .ok()
                .map(|ms| Duration::from_millis(ms.saturating_add(1))),
            Err(err) => {
                tracing::debug!(%err, "valkey watch: reading the key's PTTL failed");
                tokio::time::sleep(WATCH_ERROR_PAUSE).await;
                return;
            }
        };
        let expired = async {
            match expiry {
                Some(left) => tokio::time::sleep(left).await,
                // -1: the key has no expiry.
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = woken.woken() => {}
            () = expired => {}
        }
    }))
}
