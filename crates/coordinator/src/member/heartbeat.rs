//! The background heartbeat task.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Member;

/// A running heartbeat loop; [`HeartbeatTask::stop`] ends it cleanly.
#[derive(Debug)]
pub struct HeartbeatTask {
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

impl HeartbeatTask {
    /// Stops the loop and waits until it has exited (no heartbeat is in
    /// flight afterwards).
    pub async fn stop(self) {
        self.stop.cancel();
        if let Err(err) = self.handle.await {
            tracing::warn!(%err, "heartbeat task ended abnormally");
        }
    }

    /// Whether the loop has exited.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

impl Member {
    /// Spawns a task that heartbeats every `heartbeat_interval` (first beat
    /// immediately). A failed beat is logged and retried after a tenth of the
    /// interval, so a pod recovers quickly from a Valkey outage.
    pub fn start_heartbeat(&self) -> HeartbeatTask {
        let stop = CancellationToken::new();
        let member = self.clone();
        let token = stop.clone();
        let handle = tokio::spawn(async move {
            let interval = member.config().heartbeat_interval;
            let retry = (interval / 10).max(Duration::from_millis(10));
            loop {
                let next = tokio::select! {
                    _ = token.cancelled() => return,
                    r = member.heartbeat() => match r {
                        Ok(()) => interval,
                        Err(err) => {
                            tracing::warn!(member = %member.id(), %err, "heartbeat failed");
                            crate::telemetry::store_error("member", &err);
                            retry
                        }
                    },
                };
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(next) => {}
                }
            }
        });
        HeartbeatTask { stop, handle }
    }
}
