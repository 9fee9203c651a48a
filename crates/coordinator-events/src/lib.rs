//! # coordinator-events
//!
//! Cluster events for the coordinator's resource pods, as the Yorkie
//! cluster-mode design has them (design source `002_19446eb3b1b78dda.txt`):
//! a **subscription map** in the shared store and a **broadcast channel**
//! between pods, so the subscribers of one destination see its events
//! whichever pod holds them, and a **standalone** mode inside one process
//! when no store is configured.
//!
//! - [`Events::subscribe`] → a [`Subscription`]: the [`Notice`]s of one
//!   destination for one local subscriber (what a pod's SSE or WebSocket
//!   handler holds).
//! - [`Events::publish`] → the event goes to this pod's subscribers of the
//!   destination and to every other pod that has subscribers for it.
//!
//! ## Cluster mode ([`Events::clustered`])
//!
//! - **Subscription map**: `P:subscribers:<dest>` in Valkey, one entry per
//!   pod with local subscribers of the destination, with the member's TTL,
//!   renewed after each of the member's heartbeats
//!   ([`coordinator::Member::heartbeats`]) and removed when the pod's last
//!   local subscriber goes; a dead pod's entry is never read past its TTL
//!   and is gone from Valkey at the next renewal or publish of that
//!   destination (the key itself expires with its latest entry). See
//!   [`keys`].
//! - **Broadcast**: Valkey sharded pub/sub, one channel per destination;
//!   a publish is one script that numbers the event in the destination's
//!   sequence and publishes it. Chosen over an HTTP route between pods by
//!   measurement (the crate README): one hop less, and one order for all.
//!
//! ## Delivery promise
//!
//! **At most once, in the destination's order, gaps visible.** Every
//! subscriber receives a destination's events in number order (one order
//! for all publishers and all pods); every number from its subscription's
//! start on is either delivered once or reported in a [`Gap`]. A pod cut
//! from Valkey tells its subscribers at once ([`Notice::Interrupted`]);
//! when it is back, what it missed follows as a gap: silence never hides
//! lost events. An event whose `publish` failed was numbered and delivered
//! nowhere, or — when the answer was lost — possibly everywhere. Events
//! are not stored: a subscriber that connects later does not get earlier
//! ones.
//!
//! ## Standalone ([`Events::standalone`])
//!
//! The same API inside one process: events are numbered per destination
//! in the process and delivered to its subscribers.
//!
//! ## Untrusted input
//!
//! Channel messages are parsed strictly (ids validated, numbers bounded,
//! payloads capped at [`EventsConfig::max_payload`]); a malformed message
//! is dropped and counted. Subscribers, destinations and buffers have caps
//! ([`EventsConfig`]); a subscriber too slow for its buffer loses the
//! oldest notices and gets a gap.
//!
//! ## Metrics
//!
//! Published, delivered, dropped and missed events, subscribers per pod,
//! broadcast latency: [`telemetry`].
//!
//! ## Example
//!
//! ```no_run
//! use coordinator::{DestinationId, Member};
//! use coordinator_events::{Events, EventsConfig, Notice};
//!
//! # async fn demo(member: Member, valkey: coordinator::ValkeyClient) -> coordinator_events::Result<()> {
//! let events = Events::clustered(&member, valkey, EventsConfig::default()).await?;
//! let tenant = DestinationId::new("acme")?;
//! let mut sub = events.subscribe(&tenant).await?;
//! events.publish(&tenant, r#"{"key":"k","value":"v"}"#).await?;
//! while let Some(notice) = sub.next().await {
//!     match notice {
//!         Notice::Event(e) => println!("#{} {:?}", e.position.seq, e.payload),
//!         Notice::Gap(gap) => println!("missed {:?}", gap.missed()),
//!         Notice::Interrupted | Notice::Resumed => {}
//!     }
//! }
//! # Ok(()) }
//! ```

mod cluster;
mod config;
mod error;
mod event;
mod hub;
pub mod keys;
mod subscription;
pub mod telemetry;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use coordinator::{DestinationId, Member, MemberId, ValkeyClient};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{EventsConfig, MAX_PAYLOAD_LIMIT};
pub use error::{Error, Result};
pub use event::{Event, Gap, Notice, Position, Published};
pub use subscription::Subscription;

use cluster::Cluster;
use hub::{Dest, Hub};

/// A pod's cluster events: subscribe and publish. Cheap to clone; clones
/// share everything. See the crate docs.
#[derive(Clone, Debug)]
pub struct Events {
    core: Arc<Core>,
}

/// What events and their subscriptions share.
#[derive(Debug)]
pub(crate) struct Core {
    config: EventsConfig,
    hub: Arc<Hub>,
    cluster: Option<Arc<Cluster>>,
    /// Standalone: the publisher named in events.
    id: MemberId,
    runtime: tokio::runtime::Handle,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Drop for Core {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Core {
    /// A local subscriber of `dest` is gone.
    fn release(&self, dest: &Arc<Dest>) {
        if !self.hub.leave(dest) {
            return;
        }
        if let Some(cluster) = &self.cluster {
            let (cluster, hub, dest) = (cluster.clone(), self.hub.clone(), dest.clone());
            self.runtime
                .spawn(async move { cluster.unlink(&hub, &dest).await });
        }
    }
}

impl Events {
    /// Events inside this process only (no Valkey configured): `publisher`
    /// names this process in its events.
    ///
    /// Must be called inside a Tokio runtime.
    pub fn standalone(publisher: MemberId, config: EventsConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            core: Arc::new(Core {
                hub: Arc::new(Hub::new(&config, true)),
                config,
                cluster: None,
                id: publisher,
                runtime: runtime()?,
                stop: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        })
    }

    /// Events across the pods of `member`'s fleet, through `valkey` (the
    /// member's Valkey; a second connection with the same settings carries
    /// the broadcast). The subscription map's entries get the member's TTL
    /// and are renewed after each of its heartbeats: start its
    /// [`coordinator::HeartbeatTask`].
    pub async fn clustered(
        member: &Member,
        valkey: ValkeyClient,
        config: EventsConfig,
    ) -> Result<Self> {
        config.validate()?;
        let hub = Arc::new(Hub::new(&config, false));
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let cluster = Cluster::start(
            member.clone(),
            valkey,
            config.clone(),
            hub.clone(),
            stop.clone(),
            &tasks,
        )
        .await?;
        Ok(Self {
            core: Arc::new(Core {
                config,
                hub,
                id: member.id().clone(),
                cluster: Some(cluster),
                runtime: runtime()?,
                stop,
                tasks,
            }),
        })
    }

    /// Whether events cross pods (a Valkey is configured).
    pub fn is_clustered(&self) -> bool {
        self.core.cluster.is_some()
    }

    /// A new local subscriber of `dest`. In cluster mode, the pod's first
    /// subscriber of a destination subscribes the pod to its channel and
    /// adds the pod's entry to the subscription map; the call returns once
    /// the pod receives the destination's mark (so the subscription starts
    /// at a known number), or fails after
    /// [`EventsConfig::subscribe_timeout`].
    pub async fn subscribe(&self, dest: &DestinationId) -> Result<Subscription> {
        if self.core.stop.is_cancelled() {
            return Err(Error::Closed);
        }
        let d = self.core.hub.join(dest)?;
        // from here on, dropping `guard` releases the subscriber
        let guard = Joined {
            core: &self.core,
            dest: Some(d.clone()),
        };
        if let Some(cluster) = &self.core.cluster {
            cluster.link(&d).await?;
        }
        guard.disarm();
        Ok(Subscription::new(self.core.clone(), d))
    }

    /// Publishes an event of `dest`: this pod's subscribers and every other
    /// pod's get it, numbered in the destination's sequence. Payloads
    /// above [`EventsConfig::max_payload`] are refused.
    pub async fn publish(
        &self,
        dest: &DestinationId,
        payload: impl Into<Bytes>,
    ) -> Result<Published> {
        let payload = payload.into();
        if payload.len() > self.core.config.max_payload {
            telemetry::published_outcome("refused");
            return Err(Error::TooLarge {
                size: payload.len(),
                limit: self.core.config.max_payload,
            });
        }
        if self.core.stop.is_cancelled() {
            return Err(Error::Closed);
        }
        let published = match &self.core.cluster {
            Some(cluster) => cluster.publish(dest, payload).await,
            None => {
                let position = self.core.hub.publish_local(dest, &self.core.id, payload);
                let pods = u64::from(position.is_some());
                Ok(Published {
                    position,
                    pods,
                    reached: pods,
                })
            }
        };
        telemetry::published_outcome(if published.is_ok() { "ok" } else { "error" });
        published
    }

    /// The pods with a live entry for `dest` in the subscription map
    /// (standalone: this process, if it has subscribers of `dest`).
    pub async fn subscribers(&self, dest: &DestinationId) -> Result<Vec<MemberId>> {
        match &self.core.cluster {
            Some(cluster) => cluster.subscribers(dest).await,
            None => Ok(self
                .core
                .hub
                .get(dest)
                .map(|_| vec![self.core.id.clone()])
                .unwrap_or_default()),
        }
    }

    /// The key layout in cluster mode.
    pub fn keys(&self) -> Option<&keys::EventKeys> {
        self.core.cluster.as_ref().map(|c| c.keys())
    }

    /// This pod's id (the publisher named in its events).
    pub fn id(&self) -> &MemberId {
        match &self.core.cluster {
            Some(c) => c.member_id(),
            None => &self.core.id,
        }
    }

    /// Stops the background tasks and removes this pod's entries from the
    /// subscription map (bounded by `within`); subscriptions end. Call it
    /// before deregistering the member.
    pub async fn shutdown(&self, within: Duration) {
        self.core.stop.cancel();
        self.core.tasks.close();
        self.core.tasks.wait().await;
        if let Some(cluster) = &self.core.cluster {
            cluster.leave_all(&self.core.hub, within).await;
        }
    }
}

/// Releases a subscriber that never got its [`Subscription`] (linking
/// failed or the caller gave up).
struct Joined<'a> {
    core: &'a Arc<Core>,
    dest: Option<Arc<Dest>>,
}

impl Joined<'_> {
    fn disarm(mut self) {
        self.dest = None;
    }
}

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        if let Some(dest) = self.dest.take() {
            self.core.release(&dest);
        }
    }
}

fn runtime() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .map_err(|_| Error::InvalidConfig("cluster events need a Tokio runtime".into()))
}
