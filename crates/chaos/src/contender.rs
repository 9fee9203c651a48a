//! One contender process: loops acquiring leadership of one key with the
//! production [`elections::ProcessKiller`]; while leading, writes to the
//! guarded resource every [`WRITE_EVERY`] with its fencing token, stops as
//! soon as the handle fires, then releases. Every step is an
//! [`Event`](crate::event::Event) line on stdout.

use std::{sync::Arc, time::Duration};

use elections::{ArmEvent, ArmReason, Elections, Killer, ProcessKiller};
use storage_dynamo::{DynamoConfig, DynamoStorage};
use storage_scylla::{ScyllaConfig, ScyllaStorage};
use tokio::time::Instant;
use ttl_storage::{Key, TtlStorage};

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
    /// A zombie: a contender that breaks the rules on purpose, to show what
    /// fencing protects against. Its killer never ends the process, and
    /// after a loss it keeps writing with its old token for another `2 d`
    /// before it releases. Every such write must be rejected once a newer
    /// token has reached the resource.
    pub zombie: bool,
    /// Negative control: the resource accepts any token (see
    /// [`Guarded::connect`]); a run with zombies must then fail.
    pub unfenced: bool,
}

/// The production killer, reporting every deadline change as an event; a
/// zombie's killer reports but never kills.
struct ReportingKiller {
    zombie: bool,
}

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
        if self.zombie {
            tracing::warn!(%key, "zombie: ignoring the killer deadline");
            return;
        }
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

/// Reports why `leadership` ended.
fn report_end(leadership: &elections::Leadership) {
    if let Some(reason) = leadership.end_reason() {
        emit(&Event::Lost {
            reason: reason.to_string(),
        });
    }
}

/// A contender error (only setup can fail; the loop itself never ends).
#[derive(Debug, thiserror::Error)]
pub enum ContenderError {
    /// The election key is invalid.
    #[error(transparent)]
    Key(#[from] ttl_storage::ValidationError),
    /// The `scylla://` URL is invalid.
    #[error("bad scylla:// URL: {0}")]
    ScyllaUrl(#[from] storage_scylla::ConfigError),
    /// The `dynamodb://` URL is invalid.
    #[error("bad dynamodb:// URL: {0}")]
    DynamoUrl(#[from] storage_dynamo::ConfigError),
}

/// Runs the contender forever (the harness kills it).
///
/// # Errors
///
/// Only for an invalid key or URL; connection failures are retried.
pub async fn run(config: ContenderConfig) -> Result<(), ContenderError> {
    emit(&Event::Started {
        pid: std::process::id(),
        zombie: config.zombie,
    });
    let key = Key::new(config.key.clone())?;
    let retry = config.lease / 20;
    if config.url.starts_with("dynamodb://") {
        let dynamo = DynamoConfig::from_url(&config.url)?;
        let storage = loop {
            match DynamoStorage::connect(dynamo.clone()).await {
                Ok(storage) => break storage,
                Err(err) => {
                    tracing::warn!(%err, "connecting the store failed; retrying");
                    tokio::time::sleep(retry).await;
                }
            }
        };
        contend(storage, &key, &config).await
    } else {
        let scylla = ScyllaConfig::from_url(&config.url)?;
        let storage = loop {
            match ScyllaStorage::connect(scylla.clone()).await {
                Ok(storage) => break storage,
                Err(err) => {
                    tracing::warn!(%err, "connecting the store failed; retrying");
                    tokio::time::sleep(retry).await;
                }
            }
        };
        contend(storage, &key, &config).await
    }
}

/// The acquire / write / release loop over `storage`.
async fn contend(
    storage: impl TtlStorage + 'static,
    key: &Key,
    config: &ContenderConfig,
) -> Result<(), ContenderError> {
    let retry = config.lease / 20;
    let mut guarded = loop {
        match Guarded::connect(&config.url, &config.resource, !config.unfenced).await {
            Ok(guarded) => break guarded,
            Err(err) => {
                tracing::warn!(%err, "connecting the guarded resource failed; retrying");
                tokio::time::sleep(retry).await;
            }
        }
    };
    let killer: Arc<dyn Killer> = Arc::new(ReportingKiller {
        zombie: config.zombie,
    });
    let elections = Elections::with_killer(storage, killer);
    loop {
        let leadership = match elections
            .acquire_leadership(key, &config.name, config.lease)
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
        let mut reported = false;
        let mut zombie_until = None;
        loop {
            if !leadership.is_active() && !reported {
                reported = true;
                report_end(&leadership);
                if !config.zombie {
                    break;
                }
                zombie_until = Some(Instant::now() + config.lease * 2);
            }
            if zombie_until.is_some_and(|until| Instant::now() >= until) {
                break;
            }
            tokio::select! {
                biased;
                _ = leadership.ended(), if !reported => continue,
                _ = tick.tick() => {}
            }
            // The write is cancelled as soon as the handle fires (a zombie
            // lets it finish); if it was already sent, the fencing token is
            // what protects the resource.
            let start_ms = now_ms();
            let outcome = tokio::select! {
                biased;
                _ = leadership.ended(), if !reported && !config.zombie => continue,
                verdict = tokio::time::timeout(config.lease, guarded.write(token, &config.name)) => match verdict {
                    Ok(Ok(Verdict::Accepted(seq))) => WriteOutcome::Accepted { seq },
                    Ok(Ok(Verdict::Rejected(seen))) => WriteOutcome::Rejected { seen },
                    Ok(Err(err)) => {
                        tracing::warn!(%err, "guarded write failed");
                        WriteOutcome::Failed
                    }
                    Err(_) => {
                        tracing::warn!("guarded write timed out");
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
        elections.release_leadership(key).await;
        emit(&Event::Released);
        tokio::time::sleep(retry).await;
    }
}
