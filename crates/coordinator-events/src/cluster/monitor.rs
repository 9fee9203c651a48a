//! The monitor of the pod's broadcast connection: a lost connection is
//! told to subscribers at once; once the connection works again the pod
//! subscribes again and marks every destination, so what was missed
//! shows as a gap.
//!
//! Two signals say the connection was lost: the client's own (errors,
//! reconnections) and a probe, a message the pod sends itself through
//! Valkey, that does not come back. They must not fight. A reconnection
//! drops every subscription, so any probe sent after it fails until the
//! pod has subscribed again; opening yet another connection because of
//! that failure drops the subscriptions being made, and a loaded pod can
//! go round that loop for as long as the load lasts. So:
//!
//! - the client's signals are handled before a probe is sent, and a
//!   reconnection reported while a probe is out ends that probe;
//! - a probe that fails is followed by a recovery on the connection there
//!   is (subscribe again, probe again); only if that fails too is the
//!   connection taken for silent and a new one opened, one at a time, and
//!   never while a reported reconnection waits to be handled.

use std::ops::ControlFlow;
use std::sync::Arc;

use coordinator::DestinationId;
use fred::prelude::*;
use fred::types::config::Server;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Cluster;
use crate::hub::Hub;
use crate::telemetry;

/// What the monitor listens to.
pub(super) struct Feeds {
    pub(super) errors: Receiver<(fred::error::Error, Option<Server>)>,
    pub(super) reconnects: Receiver<Server>,
    pub(super) resync: mpsc::Receiver<()>,
}

/// How a probe ended.
enum Probe {
    /// It came back (true) or not within the probe timeout (false).
    Answered(bool),
    /// The client reported a reconnection before it came back.
    Reconnected(Result<Server, RecvError>),
}

/// Watches the broadcast connection until `stop`.
pub(super) async fn monitor(
    cluster: Arc<Cluster>,
    hub: Arc<Hub>,
    mut feeds: Feeds,
    stop: CancellationToken,
) {
    let mut probe = tokio::time::interval(cluster.config.probe_interval);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut m = Monitor {
        cluster,
        hub,
        down: false,
        connected_once: false,
        reconnecting: None,
    };
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            e = feeds.errors.recv() => match e {
                Err(RecvError::Closed) => return,
                Ok((err, _)) => {
                    tracing::warn!(%err, "cluster events: broadcast connection error");
                    m.interrupt();
                }
                Err(RecvError::Lagged(_)) => m.interrupt(),
            },
            r = feeds.reconnects.recv() => {
                if m.reconnected(r).await.is_break() {
                    return;
                }
            }
            Some(()) = feeds.resync.recv() => {
                if let Err(err) = mark_all(&m.cluster, &m.hub).await {
                    telemetry::valkey_error("resume", &err);
                }
            }
            _ = probe.tick() => {
                let cluster = m.cluster.clone();
                let outcome = tokio::select! {
                    biased;
                    r = feeds.reconnects.recv() => Probe::Reconnected(r),
                    ok = cluster.round_trip(cluster.config.probe_timeout) => Probe::Answered(ok),
                };
                match outcome {
                    Probe::Reconnected(r) => {
                        if m.reconnected(r).await.is_break() {
                            return;
                        }
                    }
                    Probe::Answered(true) if !m.down => {}
                    Probe::Answered(came_back) => {
                        if !came_back {
                            telemetry::valkey_error("probe", &"no probe came back");
                            m.interrupt();
                        }
                        // subscriptions lost with a connection fail the
                        // probe as a silent connection does: subscribe
                        // again on the connection there is first
                        if m.recover().await || !feeds.reconnects.is_empty() {
                            continue;
                        }
                        m.reconnect();
                    }
                }
            }
        }
    }
}

/// The monitor's state.
struct Monitor {
    cluster: Arc<Cluster>,
    hub: Arc<Hub>,
    /// Destinations have been told the channel is interrupted.
    down: bool,
    /// The client reports its first connection as a reconnection too.
    connected_once: bool,
    /// A new connection being opened because the last one went silent.
    reconnecting: Option<JoinHandle<()>>,
}

impl Monitor {
    /// The client reported a (re)connection: the subscriptions are gone.
    async fn reconnected(&mut self, r: Result<Server, RecvError>) -> ControlFlow<()> {
        match r {
            Err(RecvError::Closed) => return ControlFlow::Break(()),
            _ if !self.connected_once => self.connected_once = true,
            _ => {
                self.interrupt();
                self.recover().await;
            }
        }
        ControlFlow::Continue(())
    }

    /// Tells every destination the channel is interrupted.
    fn interrupt(&mut self) {
        if !self.down {
            self.down = true;
            telemetry::interrupted();
        }
        for dest in self.hub.all() {
            dest.interrupt();
        }
    }

    /// Subscribes again and resumes every destination; false if the
    /// channel is still down.
    async fn recover(&mut self) -> bool {
        self.down = !recover(&self.cluster, &self.hub).await;
        !self.down
    }

    /// Opens a new broadcast connection: a silent one is not noticed by
    /// the client itself. In the background, one attempt at a time.
    fn reconnect(&mut self) {
        if self.reconnecting.as_ref().is_none_or(|h| h.is_finished()) {
            let sub = self.cluster.sub.clone();
            self.reconnecting = Some(tokio::spawn(async move {
                let _ = sub.force_reconnection().await;
            }));
        }
    }
}

/// Subscribes again to every destination with local subscribers, marks
/// them (gaps follow through the channel) and resumes them; false if that
/// failed (retried on the next probe).
async fn recover(cluster: &Cluster, hub: &Hub) -> bool {
    let _gate = cluster.gate.write().await;
    let dests = hub.all();
    let mut channels: Vec<String> = dests.iter().map(|d| cluster.keys.channel(&d.id)).collect();
    // the probe channel last: a probe that comes back proves every
    // subscription before it is in force (one connection, in order)
    channels.push(cluster.probe_channel().to_owned());
    let resubscribed = async {
        for chunk in channels.chunks(super::scripts::CHUNK) {
            cluster.sub.ssubscribe(chunk.to_vec()).await?;
        }
        Ok::<_, crate::Error>(())
    };
    if let Err(err) = resubscribed.await {
        telemetry::valkey_error("resume", &err);
        return false;
    }
    if !cluster.round_trip(cluster.config.probe_timeout).await {
        return false;
    }
    if dests.is_empty() {
        return true;
    }
    // subscribed again: resumed, and the marks (through the channel, in
    // order) show what was missed
    for dest in &dests {
        dest.resume();
    }
    match mark_all(cluster, hub).await {
        Ok(()) => {
            tracing::info!(
                destinations = dests.len(),
                "cluster events: broadcast channel back"
            );
            true
        }
        Err(err) => {
            telemetry::valkey_error("resume", &err);
            for dest in &dests {
                dest.interrupt();
            }
            false
        }
    }
}

/// Renews this pod's entries and marks every destination with local
/// subscribers.
async fn mark_all(cluster: &Cluster, hub: &Hub) -> crate::Result<()> {
    let ids: Vec<DestinationId> = hub.all().iter().map(|d| d.id.clone()).collect();
    cluster.scripts.enter(&cluster.entries(), &ids).await
}
