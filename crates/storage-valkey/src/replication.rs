//! Replicated Valkey: discovery of the primary through Sentinel, and the
//! opt-in `WAIT` after each write that makes a write count only once a
//! replica has it.

use std::time::Duration;

use fred::{
    interfaces::ClientLike,
    prelude::{Client, Value},
    types::CustomCommand,
};
use ttl_storage::{ErrorKind, StorageError};

use crate::error::{Op, classify, storage_error};

/// The default Sentinel port.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// Where the primary is found: a set of Sentinels and the name of the
/// service they watch (`sentinel monitor <service> ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelSettings {
    /// The Sentinels, `(host, port)`; any one that answers is enough.
    pub sentinels: Vec<(String, u16)>,
    /// The monitored service's name.
    pub service: String,
}

/// The opt-in durability of a write: after each applied write the driver
/// sends `WAIT replicas timeout`; a write that fewer than `replicas`
/// replicas acknowledged within `timeout` is reported
/// [`ErrorKind::OutcomeUnknown`], never success (it is on the primary, and
/// would be lost if the primary failed over now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    /// Replicas that must acknowledge each write (at least 1).
    pub replicas: u32,
    /// How long the server waits for them (`WAIT`'s timeout; below the
    /// request timeout).
    pub timeout: Duration,
}

/// The default [`WaitReplicas::timeout`].
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(1);

/// Sends `WAIT` on `client`'s connection (the one the write went on) and
/// checks that `wait.replicas` replicas acknowledged everything written
/// so far. Called only after a write was applied: any failure is
/// [`ErrorKind::OutcomeUnknown`].
pub(crate) async fn confirm(
    client: &Client,
    wait: WaitReplicas,
    what: &str,
) -> Result<(), StorageError> {
    let timeout_ms = i64::try_from(wait.timeout.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let reply: Value = client
        .custom(
            CustomCommand::new_static("WAIT", None, false),
            vec![
                Value::Integer(i64::from(wait.replicas)),
                Value::Integer(timeout_ms),
            ],
        )
        .await
        .map_err(|err| {
            let kind = match classify(&err, Op::Write) {
                ErrorKind::Permanent => ErrorKind::Permanent,
                _ => ErrorKind::OutcomeUnknown,
            };
            storage_error(kind, &format!("{what}: WAIT for replicas"), err)
        })?;
    match reply {
        Value::Integer(acked) if acked >= i64::from(wait.replicas) => Ok(()),
        Value::Integer(acked) => {
            tracing::debug!(
                acked,
                wanted = wait.replicas,
                "{what}: not replicated in time"
            );
            Err(StorageError::outcome_unknown(format!(
                "{what}: applied on the primary but {acked} of {} replicas acknowledged it \
                 within {:?}; it may be lost at a failover",
                wait.replicas, wait.timeout
            )))
        }
        other => Err(StorageError::outcome_unknown(format!(
            "{what}: unexpected WAIT reply {other:?}"
        ))),
    }
}
