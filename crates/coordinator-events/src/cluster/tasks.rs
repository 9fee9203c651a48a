//! The pod's background tasks in cluster mode besides the monitor
//! (`monitor.rs`): the dispatcher (channel messages to destinations) and
//! the renewal of the subscription map's entries after each heartbeat.

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
