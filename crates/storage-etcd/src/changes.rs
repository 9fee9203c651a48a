//! The feed behind [`ttl_storage::TtlStorage::changes`]: an etcd watch of
//! the key (puts and deletes), resumed from the revision after the last
//! event seen when its stream is lost, so nothing is missed unless etcd
//! compacted that revision away (then [`Change::Interrupted`] and a fresh
//! watch). A put's count is the counter read at the put's revision when the
//! same transaction wrote it (a counted write).

use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use tokio::sync::mpsc;
use ttl_storage::{Change, Changes, changes::FEED_CAPACITY};

use crate::unsent;

/// The pause before a lost watch is made again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The feed of `key` (a server key), with its counter's server key.
pub(crate) fn follow(client: Client, key: String, counter: Option<String>) -> Changes {
    let (tx, rx) = mpsc::channel(FEED_CAPACITY);
    tokio::spawn(run(client, key, counter, tx));
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|change| (change, rx))
    }))
}

/// Why a watch stream ended.
enum Ended {
    /// The follower is gone or fell behind: stop.
    Follower,
    /// The stream was lost: watch again from the next revision.
    Lost,
    /// The revision to resume from was compacted: start afresh.
    Compacted,
}

async fn run(client: Client, key: String, counter: Option<String>, tx: mpsc::Sender<Change>) {
    let mut feed = Feed {
        client,
        key,
        counter,
        tx,
        from: 0,
        last: None,
        armed: false,
    };
    // Completes when the follower drops its stream.
    let follower = feed.tx.clone();
    loop {
        let ended = tokio::select! {
            () = follower.closed() => return,
            ended = feed.watch() => ended,
        };
        match ended {
            Ended::Follower => return,
            Ended::Lost => {}
            Ended::Compacted => {
                feed.from = 0;
                feed.last = None;
                feed.armed = false;
                if feed.tx.try_send(Change::Interrupted).is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

struct Feed {
    client: Client,
    key: String,
    counter: Option<String>,
    tx: mpsc::Sender<Change>,
    /// The revision to watch from; 0: after a read of the key.
    from: i64,
    /// The value last reported (a put of the same value is a renewal).
    last: Option<Vec<u8>>,
    armed: bool,
}

impl Feed {
    fn send(&self, change: Change) -> Result<(), Ended> {
        self.tx.try_send(change).map_err(|_| Ended::Follower)
    }

    async fn watch(&mut self) -> Ended {
        if self.from == 0 {
            // From the revision after a read of the key: the watch then
            // reports everything after a known point, also after a loss.
            match self.revision_now().await {
                Some(revision) => self.from = revision + 1,
                None => return Ended::Lost,
            }
        }
        let options = WatchOptions::new().with_start_revision(self.from);
        let started = unsent::retry(|| {
            let mut client = self.client.clone();
            let key = self.key.clone();
            let options = options.clone();
            async move { client.watch(key, Some(options)).await }
        })
        .await;
        let (_watcher, mut stream) = match started {
            Ok(watch) => watch,
            Err(err) => {
                tracing::debug!(%err, "etcd changes: starting the watch failed");
                return Ended::Lost;
            }
        };
        // etcd-client answers once etcd created the watch.
        if !self.armed {
            self.armed = true;
            if let Err(ended) = self.send(Change::Armed) {
                return ended;
            }
        }
        loop {
            let response = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Ended::Lost,
                Err(err) => {
                    tracing::debug!(%err, "etcd changes: the stream failed");
                    return Ended::Lost;
                }
            };
            if response.compact_revision() > 0 {
                tracing::debug!(
                    compacted = response.compact_revision(),
                    "etcd changes: the revision to resume from was compacted"
                );
                return Ended::Compacted;
            }
            if response.canceled() {
                tracing::debug!(
                    reason = response.cancel_reason(),
                    "etcd changes: watch cancelled"
                );
                return Ended::Lost;
            }
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                self.from = self.from.max(kv.mod_revision() + 1);
                let change = match event.event_type() {
                    EventType::Put => {
                        if self.last.as_deref() == Some(kv.value()) {
                            continue;
                        }
                        self.last = Some(kv.value().to_vec());
                        Change::Written {
                            value: kv.value().to_vec(),
                            count: self.count_at(kv.mod_revision()).await,
                        }
                    }
                    EventType::Delete => {
                        self.last = None;
                        Change::Deleted
                    }
                };
                if let Err(ended) = self.send(change) {
                    return ended;
                }
            }
        }
    }

    /// The store's revision, from a read of the key.
    async fn revision_now(&self) -> Option<i64> {
        let read = unsent::retry(|| {
            let mut client = self.client.clone();
            let key = self.key.clone();
            async move { client.get(key, None).await }
        })
        .await;
        match read {
            Ok(response) => response.header().map(|h| h.revision()),
            Err(err) => {
                tracing::debug!(%err, "etcd changes: reading the key failed");
                None
            }
        }
    }

    /// The counter as the write at `revision` left it, if that write
    /// advanced it (a counted write's transaction).
    async fn count_at(&self, revision: i64) -> Option<u64> {
        let counter = self.counter.clone()?;
        let read = unsent::retry(|| {
            let mut client = self.client.clone();
            let counter = counter.clone();
            let options = GetOptions::new().with_revision(revision);
            async move { client.get(counter, Some(options)).await }
        });
        let response = match read.await {
            Ok(response) => response,
            Err(err) => {
                tracing::debug!(%err, "etcd changes: reading the counter at the write failed");
                return None;
            }
        };
        let kv = response.kvs().first()?;
        if kv.mod_revision() != revision {
            return None;
        }
        std::str::from_utf8(kv.value()).ok()?.parse().ok()
    }
}
