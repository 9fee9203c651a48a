//! The pod's background tasks in cluster mode: the dispatcher (channel
//! messages to destinations), the monitor (a lost connection is told to
//! subscribers at once; on its return the pod subscribes again and marks
//! every destination, so what was missed shows as a gap) and the renewal
//! of the subscription map's entries after each heartbeat.

use std::sync::Arc;

use coordinator::DestinationId;
use fred::prelude::*;
use fred::types::Message;
use fred::types::MessageKind;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Cluster;
use crate::event::{Event, age};
use crate::hub::Hub;
use crate::telemetry;
use crate::wire::{self, Wire};

/// Passes each channel message to its destination, in arrival order.
pub(super) async fn dispatch(
    cluster: Arc<Cluster>,
    hub: Arc<Hub>,
    mut messages: Receiver<Message>,
    resync: mpsc::Sender<()>,
    stop: CancellationToken,
) {
    let prefix = cluster.keys().channel_prefix();
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => return,
            m = messages.recv() => m,
        };
        match message {
            Ok(m) => deliver(&cluster, &hub, &prefix, m),
            Err(RecvError::Lagged(n)) => {
                // lost messages: re-mark every destination, so each
                // subscriber learns exactly what it missed
                telemetry::dropped("overflow", n);
                let _ = resync.try_send(());
            }
            Err(RecvError::Closed) => return,
        }
    }
}

fn deliver(cluster: &Cluster, hub: &Hub, prefix: &str, m: Message) {
    if !matches!(m.kind, MessageKind::SMessage) {
        return;
    }
    if m.channel == cluster.probe_channel() {
        if let Some(nonce) = m.value.as_str().and_then(|s| s.parse().ok()) {
            cluster.probe_returned(nonce);
        }
        return;
    }
    let dest = m
        .channel
        .strip_prefix(prefix)
        .and_then(|id| DestinationId::new(id).ok());
    let Some(dest) = dest.and_then(|id| hub.get(&id)) else {
        telemetry::dropped("unsubscribed", 1);
        return;
    };
    let raw = match m.value {
        Value::Bytes(b) => b,
        Value::String(s) => s.into_inner(),
        _ => {
            telemetry::dropped("malformed", 1);
            return;
        }
    };
    match wire::decode(raw, cluster.config.max_payload) {
        Ok(Wire::Event {
            position,
            sent_micros,
            publisher,
            payload,
        }) => {
            telemetry::broadcast(age(sent_micros));
            dest.accept_event(Arc::new(Event {
                destination: dest.id.clone(),
                position,
                publisher,
                sent_micros,
                payload,
            }));
        }
        Ok(Wire::Mark(p)) => {
            tracing::trace!(dest = %dest.id, seq = p.seq, "mark");
            dest.accept_mark(p)
        }
        Err(why) => {
            tracing::debug!(dest = %dest.id, %why, "dropping a malformed channel message");
            telemetry::dropped("malformed", 1);
        }
    }
}

/// What the monitor listens to.
pub(super) struct Feeds {
    pub(super) errors: Receiver<(fred::error::Error, Option<fred::types::config::Server>)>,
    pub(super) reconnects: Receiver<fred::types::config::Server>,
    pub(super) resync: mpsc::Receiver<()>,
}

/// Watches the broadcast connection: errors and failed probes interrupt
/// every destination; a reconnect (or a probe answered while interrupted)
/// subscribes again, re-marks and resumes them.
pub(super) async fn monitor(
    cluster: Arc<Cluster>,
    hub: Arc<Hub>,
    mut feeds: Feeds,
    stop: CancellationToken,
) {
    let mut probe = tokio::time::interval(cluster.config.probe_interval);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut down = false;
    let mut reconnecting: Option<tokio::task::JoinHandle<()>> = None;
    // the client reports its first connection as a reconnect too
    let mut connected_once = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            e = feeds.errors.recv() => match e {
                Err(RecvError::Closed) => return,
                Ok((err, _)) => {
                    tracing::warn!(%err, "cluster events: broadcast connection error");
                    interrupt(&hub, &mut down);
                }
                Err(RecvError::Lagged(_)) => interrupt(&hub, &mut down),
            },
            r = feeds.reconnects.recv() => match r {
                Err(RecvError::Closed) => return,
                _ if !connected_once => connected_once = true,
                _ => {
                    // a reconnect means the connection was lost:
                    // subscriptions are gone
                    interrupt(&hub, &mut down);
                    down = !recover(&cluster, &hub).await;
                }
            },
            Some(()) = feeds.resync.recv() => {
                if let Err(err) = mark_all(&cluster, &hub).await {
                    telemetry::valkey_error("resume", &err);
                }
            }
            _ = probe.tick() => {
                if cluster.round_trip(cluster.config.probe_timeout).await {
                    if down {
                        down = !recover(&cluster, &hub).await;
                    }
                } else {
                    telemetry::valkey_error("probe", &"no probe came back");
                    interrupt(&hub, &mut down);
                    // a silent connection is not noticed by the client
                    // itself: open a new one (in the background, one
                    // attempt at a time)
                    if reconnecting.as_ref().is_none_or(|h| h.is_finished()) {
                        let sub = cluster.sub.clone();
                        reconnecting = Some(tokio::spawn(async move {
                            let _ = sub.force_reconnection().await;
                        }));
                    }
                }
            }
        }
    }
}

fn interrupt(hub: &Hub, down: &mut bool) {
    if !*down {
        *down = true;
        telemetry::interrupted();
    }
    for dest in hub.all() {
        dest.interrupt();
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

/// Renews this pod's entries after each successful heartbeat of its
/// member, so they live as long as its member record.
pub(super) async fn renew(cluster: Arc<Cluster>, hub: Arc<Hub>, stop: CancellationToken) {
    let mut beats = cluster.member.heartbeats();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = beats.changed() => if changed.is_err() { return },
        }
        let ids: Vec<DestinationId> = hub
            .all()
            .iter()
            .filter(|d| d.local() > 0)
            .map(|d| d.id.clone())
            .collect();
        if ids.is_empty() {
            continue;
        }
        let renewed = cluster.scripts.renew(&cluster.entries(), &ids).await;
        if let Err(err) = renewed {
            telemetry::valkey_error("renew", &err);
        }
    }
}
