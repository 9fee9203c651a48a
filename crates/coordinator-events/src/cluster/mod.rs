//! The cluster side: the subscription map in Valkey and the broadcast
//! channel between pods (Valkey sharded pub/sub, `SSUBSCRIBE` /
//! `SPUBLISH`, one channel per destination).
//!
//! A pod subscribes to a destination's channel when its first local
//! subscriber arrives: `SSUBSCRIBE`, then one script that adds its entry
//! to the map and publishes a mark (where the numbering stands), and it
//! waits for that mark to come back. A publish is one script: number the
//! event, publish it. Valkey runs scripts one at a time and pushes a
//! channel's messages to each connection in the order they were published,
//! so every pod sees a destination's events in number order and can tell
//! missing numbers from silence.

mod monitor;
mod scripts;
mod tasks;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use coordinator::{DestinationId, Member, MemberId};
use fred::prelude::*;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::EventsConfig;
use crate::error::{Error, Result};
use crate::event::{Published, now_micros};
use crate::hub::{Dest, Hub};
use crate::keys::EventKeys;
use crate::telemetry;
use crate::wire;
use scripts::{Entries, Scripts};

/// Messages the Valkey client queues for the dispatcher before it
/// overflows (then every destination is re-marked: gaps, not silence).
const MESSAGE_QUEUE: usize = 8192;

pub(crate) struct Cluster {
    client: Client,
    sub: Client,
    member: Member,
    keys: EventKeys,
    scripts: Scripts,
    config: EventsConfig,
    /// Held (shared) while linking or unlinking one destination, and
    /// (exclusively) while re-subscribing all after a reconnect.
    gate: tokio::sync::RwLock<()>,
    /// This pod's own channel, for round trips through Valkey.
    probe_channel: String,
    /// The last probe number that came back on the broadcast connection.
    probe_seen: watch::Sender<u64>,
    probe_next: AtomicU64,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("member", self.member.id())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Opens the pod's broadcast connection (a second client with the
    /// settings of `client`) and starts the dispatcher, the monitor and
    /// the renewal of the map's entries.
    pub(crate) async fn start(
        member: Member,
        client: Client,
        config: EventsConfig,
        hub: Arc<Hub>,
        stop: CancellationToken,
        tasks: &TaskTracker,
    ) -> Result<Arc<Self>> {
        let mut builder = Builder::from_config(client.client_config());
        builder
            .set_connection_config(client.connection_config().clone())
            .set_performance_config(PerformanceConfig {
                broadcast_channel_capacity: MESSAGE_QUEUE,
                ..client.perf_config()
            });
        builder.set_policy(
            client
                .client_reconnect_policy()
                .unwrap_or_else(|| ReconnectPolicy::new_exponential(0, 100, 5_000, 2)),
        );
        let sub = builder.build()?;
        // receivers first: nothing the connection reports is missed
        let messages = sub.message_rx();
        let errors = sub.error_rx();
        let reconnects = sub.reconnect_rx();
        sub.init().await?;
        let keys = EventKeys::new(member.keys());
        let probe_channel = keys.probe_channel(member.id());
        sub.ssubscribe(probe_channel.clone()).await?;
        let cluster = Arc::new(Self {
            probe_channel,
            probe_seen: watch::Sender::new(0),
            probe_next: AtomicU64::new(0),
            keys,
            client,
            sub,
            member,
            scripts: Scripts::new(),
            config,
            gate: tokio::sync::RwLock::new(()),
        });
        let (resync, resync_rx) = tokio::sync::mpsc::channel(1);
        tasks.spawn(tasks::dispatch(
            cluster.clone(),
            hub.clone(),
            messages,
            resync,
            stop.clone(),
        ));
        tasks.spawn(monitor::monitor(
            cluster.clone(),
            hub.clone(),
            monitor::Feeds {
                errors,
                reconnects,
                resync: resync_rx,
            },
            stop.clone(),
        ));
        tasks.spawn(tasks::renew(cluster.clone(), hub, stop));
        Ok(cluster)
    }

    pub(crate) fn member_id(&self) -> &MemberId {
        self.member.id()
    }

    pub(crate) fn keys(&self) -> &EventKeys {
        &self.keys
    }

    /// Sends probes to this pod's own channel through Valkey until one
    /// comes back on the broadcast connection; false if none did within
    /// `within`. Proves both connections work and every subscription
    /// made on the broadcast connection before is in force.
    pub(crate) async fn round_trip(&self, within: Duration) -> bool {
        let mut seen = self.probe_seen.subscribe();
        let attempts = async {
            loop {
                let nonce = self.probe_next.fetch_add(1, Ordering::Relaxed) + 1;
                let sent: std::result::Result<i64, _> = self
                    .client
                    .spublish(&self.probe_channel, nonce.to_string())
                    .await;
                if sent.is_ok() {
                    let back = seen.wait_for(|n| *n >= nonce);
                    if tokio::time::timeout(Duration::from_millis(50), back)
                        .await
                        .is_ok()
                    {
                        return;
                    }
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        tokio::time::timeout(within, attempts).await.is_ok()
    }

    /// A probe came back.
    pub(crate) fn probe_returned(&self, nonce: u64) {
        self.probe_seen.send_if_modified(|n| {
            let newer = nonce > *n;
            if newer {
                *n = nonce;
            }
            newer
        });
    }

    pub(crate) fn probe_channel(&self) -> &str {
        &self.probe_channel
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.member.config().ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// This pod's entries of the subscription map, for the scripts that
    /// write them.
    fn entries(&self) -> Entries<'_> {
        Entries {
            client: &self.client,
            keys: &self.keys,
            member: self.member.id(),
            ttl_ms: self.ttl_ms(),
        }
    }

    /// Subscribes the pod to `dest`'s channel, unless it is already.
    pub(crate) async fn link(&self, dest: &Arc<Dest>) -> Result<()> {
        let _gate = self.gate.read().await;
        let mut linked = dest.link.lock().await;
        if *linked {
            return Ok(());
        }
        dest.reset();
        let mut based = dest.based();
        let entered = async {
            self.sub.ssubscribe(self.keys.channel(&dest.id)).await?;
            self.scripts
                .enter(&self.entries(), std::slice::from_ref(&dest.id))
                .await?;
            Ok::<_, Error>(())
        }
        .await;
        if let Err(err) = entered {
            telemetry::valkey_error("subscribe", &err);
            return Err(err);
        }
        let waited = tokio::time::timeout(self.config.subscribe_timeout, based.wait_for(|b| *b));
        match waited.await {
            Ok(Ok(_)) => {
                *linked = true;
                Ok(())
            }
            _ => Err(Error::Timeout(dest.id.to_string())),
        }
    }

    /// Unsubscribes the pod from `dest`'s channel and removes its entry,
    /// if `dest` still has no local subscriber.
    pub(crate) async fn unlink(&self, hub: &Hub, dest: &Arc<Dest>) {
        let _gate = self.gate.read().await;
        let mut linked = dest.link.lock().await;
        if dest.local() > 0 {
            return;
        }
        *linked = false;
        if let Err(err) = self.sub.sunsubscribe(self.keys.channel(&dest.id)).await {
            telemetry::valkey_error("unsubscribe", &err);
        }
        let left = self
            .scripts
            .leave(&self.client, &self.keys, &dest.id, self.member.id())
            .await;
        if let Err(err) = left {
            // the entry lapses with its TTL: renewals skip destinations
            // without local subscribers
            telemetry::valkey_error("unsubscribe", &err);
        }
        hub.remove_if_idle(dest);
    }

    /// Numbers `payload` and broadcasts it to every pod subscribed to
    /// `dest`, this one included.
    pub(crate) async fn publish(&self, dest: &DestinationId, payload: Bytes) -> Result<Published> {
        let tail = wire::event_tail(now_micros(), self.member.id());
        let reply = self
            .scripts
            .publish(&self.client, &self.keys, dest, tail, payload)
            .await;
        let reply = match reply {
            Ok(r) => r,
            Err(err) => {
                telemetry::valkey_error("publish", &err);
                return Err(err);
            }
        };
        if reply.pods > reply.reached {
            telemetry::unreached(reply.pods - reply.reached);
        }
        Ok(Published {
            position: Some(reply.position),
            pods: reply.pods,
            reached: reply.reached,
        })
    }

    /// The members with a live entry for `dest` in the subscription map.
    pub(crate) async fn subscribers(&self, dest: &DestinationId) -> Result<Vec<MemberId>> {
        self.scripts.live(&self.client, &self.keys, dest).await
    }

    /// Removes this pod's entries for every destination in `hub` (shut
    /// down), bounded by `within`.
    pub(crate) async fn leave_all(&self, hub: &Hub, within: Duration) {
        let leave = async {
            for dest in hub.all() {
                let _ = self.sub.sunsubscribe(self.keys.channel(&dest.id)).await;
                if let Err(err) = self
                    .scripts
                    .leave(&self.client, &self.keys, &dest.id, self.member.id())
                    .await
                {
                    telemetry::valkey_error("unsubscribe", &err);
                }
            }
        };
        if tokio::time::timeout(within, leave).await.is_err() {
            tracing::warn!("cluster events: leaving the subscription map timed out");
        }
        let _ = self.sub.quit().await;
    }
}
