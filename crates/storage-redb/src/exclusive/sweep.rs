//! The periodic sweep that reclaims expired records nobody touches.

use std::{sync::Weak, time::Duration};

use redb::{Database, Durability};
use tokio::{sync::oneshot, task::JoinHandle};

use super::state::Shared;
use crate::{ops::Tables, record};

/// Deletes at most `limit` expired records in one write transaction and
/// commits durably if it deleted any. Returns how many it deleted. Blocks.
pub(crate) fn sweep_once(db: &Database, limit: usize) -> Result<usize, redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let now = record::now_millis()?;
    let removed = Tables::open(&txn)?.sweep(now, limit)?;
    if removed > 0 {
        txn.commit()?;
    } else {
        txn.abort()?;
    }
    Ok(removed)
}

/// The running sweep task; dropping it asks the task to stop.
pub(crate) struct Sweeper {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Sweeper {
    /// Starts the sweep task on the current tokio runtime. It holds only a
    /// weak reference, so it never keeps the file open by itself.
    pub(crate) fn start(shared: Weak<Shared>, interval: Duration, limit: usize) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = ticks.tick() => {}
                }
                let Some(shared) = shared.upgrade() else {
                    break;
                };
                let pass = tokio::task::spawn_blocking(move || sweep_once(&shared.db, limit));
                match pass.await {
                    Ok(Ok(0)) => {}
                    Ok(Ok(removed)) => tracing::debug!(removed, "swept expired records"),
                    Ok(Err(err)) => tracing::warn!(error = %err, "sweeping expired records failed"),
                    Err(err) => tracing::warn!(error = %err, "sweep task failed"),
                }
            }
        });
        Sweeper {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the task and waits for a pass in progress to end.
    pub(crate) async fn stop(mut self) {
        self.signal();
        if let Some(task) = self.task.take() {
            // A panicked or cancelled sweep leaves nothing to clean up.
            let _ = task.await;
        }
    }

    fn signal(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.signal();
    }
}
