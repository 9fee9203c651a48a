//! One contender process: loops acquiring leadership of one key with the
//! production [`elections::ProcessKiller`]; while leading, writes to the
//! guarded resource every [`WRITE_EVERY`] with its fencing token, stops as
//! soon as the handle fires, then releases. Every step is an
//! [`Event`](crate::event::Event) line on stdout.

use std::{sync::Arc, time::Duration};

use elections::{ArmEvent, ArmReason, Elections, Killer, ProcessKiller};
use storage_scylla::ScyllaStorage;
use tokio::time::Instant;
use ttl_storage::Key;

use crate::{
    event::{Event, WriteOutcome, emit, now_ms},
    guarded::{Guarded, Verdict},
};

/// Time between two writes of a leader.
pub const WRITE_EVERY: Duration = Duration::from_millis(100);

/// What a contender needs to know.
#[derive(Debug, Clone)]
pub struct ContenderConfig {
    /// The store URL (`scylla://...`), usually through a fault proxy.
    pub url: String,
    /// The election key.
    pub key: String,
    /// The guarded resource's id.
    pub resource: String,
    /// This contender's name (written as the leader value and the writer).
    pub name: String,
    /// The lease `d`.
    pub lease: Duration,
}

/// The production killer, reporting every deadline change as an event.
struct ReportingKiller;

/// Converts a tokio instant to wall milliseconds.
fn wall_ms(at: Instant) -> u64 {
    let now = Instant::now();
    let wall = now_ms();
    if at >= now {
        wall.saturating_add(u64::try_from((at - now).as_millis()).unwrap_or(u64::MAX))
    } else {
        wall.saturating_sub(u64::try_from((now - at).as_millis()).unwrap_or(u64::MAX))
    }
}

impl Killer for ReportingKiller {
    fn kill(&self, key: &Key, deadline: Instant) {
        emit(&Event::KillerFired);
        ProcessKiller.kill(key, deadline);
    }

    fn armed(&self, event: &ArmEvent) {
        emit(&Event::Armed {
            basis_ms: wall_ms(event.basis),
            deadline_ms: event.deadline.map(wall_ms),
            success: matches!(event.reason, ArmReason::Acquired | ArmReason::Renewed),
        });
    }
}

/// A contender error (only setup can fail; the loop itself never ends).
#[derive(Debug, thiserror::Error)]
pub enum ContenderError {
    /// The election key is invalid.
    #[error(transparent)]
    Key(#[from] ttl_storage::ValidationError),
}

/// Runs the contender forever (the harness kills it).
///
/// # Errors
///
/// Only for an invalid key; connection failures are retried.
pub async fn run(config: ContenderConfig) -> Result<(), ContenderError> {
    emit(&Event::Started {
        pid: std::process::id(),
    });
    let key = Key::new(config.key.clone())?;
    let retry = config.lease / 20;
    let storage = loop {
        match ScyllaStorage::from_url(&config.url).await {
            Ok(storage) => break storage,
            Err(err) => {
                tracing::warn!(%err, "connecting the store failed; retrying");
                tokio::time::sleep(retry).await;
            }
        }
    };
    let mut guarded = loop {
        match Guarded::connect(&config.url, &config.resource).await {
            Ok(guarded) => break guarded,
            Err(err) => {
                tracing::warn!(%err, "connecting the guarded resource failed; retrying");
                tokio::time::sleep(retry).await;
            }
        }
    };
    let killer: Arc<dyn Killer> = Arc::new(ReportingKiller);
    let elections = Elections::with_killer(storage, killer);
    loop {
        let leadership = match elections
            .acquire_leadership(&key, &config.name, config.lease)
            .await
        {
            Ok(Some(leadership)) => leadership,
            Ok(None) => {
                tokio::time::sleep(retry).await;
                continue;
            }
            Err(err) => {
                tracing::warn!(%err, "acquisition failed");
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        let token = leadership.fencing_token();
        emit(&Event::Acquired { token });
        let mut tick = tokio::time::interval(WRITE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = leadership.ended() => break,
                _ = tick.tick() => {}
            }
            // The write is cancelled as soon as the handle fires; if it was
            // already sent, the fencing token is what protects the resource.
            let start_ms = now_ms();
            let outcome = tokio::select! {
                biased;
                _ = leadership.ended() => break,
                verdict = guarded.write(token, &config.name) => match verdict {
                    Ok(Verdict::Accepted(seq)) => WriteOutcome::Accepted { seq },
                    Ok(Verdict::Rejected(seen)) => WriteOutcome::Rejected { seen },
                    Err(err) => {
                        tracing::warn!(%err, "guarded write failed");
                        WriteOutcome::Failed
                    }
                },
            };
            emit(&Event::Write {
                start_ms,
                token,
                outcome,
            });
        }
        if let Some(reason) = leadership.end_reason() {
            emit(&Event::Lost {
                reason: reason.to_string(),
            });
        }
        elections.release_leadership(&key).await;
        emit(&Event::Released);
        tokio::time::sleep(retry).await;
    }
}
