//! Fencing for a resource kept in Valkey / Redis: a write carries the
//! writer's fencing token and is applied only if no higher token was seen.
//!
//! A leader's `Leadership::fencing_token()` (from `elections`) grows with
//! every new leadership. [`ValkeyFence::set`] runs one Lua script that
//! compares the token with the highest one recorded for the resource,
//! records it and writes the value — or changes nothing and reports the
//! higher token. A deposed leader that wakes up late (paused process,
//! slow network) is refused, whatever the timing.
//!
//! [`ValkeyFence::append`] is the same guard on an append-only log: the
//! script compares the token, records it and appends the entry to the
//! resource's log (a list at `<prefix>fence-log:<resource>`) in one step,
//! and returns the entry's sequence number (its position in accept
//! order, from 1). [`ValkeyFence::log`] reads the log back: a journal of
//! what the successive leaders did, in which no stale leader's entry can
//! follow a newer leader's.
//!
//! [`ValkeyFence`] implements the workspace's one fencing contract,
//! [`fence::Fence`] (guarded write of a register, fenced append, reads),
//! checked by the shared `fence::suite!` on the real engine; [`open`]
//! opens it from a URL (as `storage_url::open_fence` does). The outcome
//! types are the shared ones, re-exported here.
//!
//! ```no_run
//! use storage_valkey::{ValkeyStorage, fence::{FenceOutcome, ValkeyFence}};
//!
//! # async fn demo(token: u64) -> Result<(), ttl_storage::StorageError> {
//! let storage = ValkeyStorage::from_url("redis://127.0.0.1:6379").await?;
//! let fence = ValkeyFence::new(&storage);
//! match fence.set("billing", token, "billing:last-run", b"2026-11-23").await? {
//!     FenceOutcome::Accepted => {}
//!     FenceOutcome::Rejected { highest } => {
//!         // a newer leader (token `highest`) exists: stop working
//!     }
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
pub use fence::{AppendOutcome, FenceOutcome, LogEntry};
use fence::{DynFence, Fence, FenceKeys, Fenced, Numbering, OpenOptions};
use fred::{
    bytes::Bytes,
    prelude::{Client, ClientLike},
    types::Value,
};
use ttl_storage::{ErrorKind, Result, StorageError, check_value};

use crate::{
    ValkeyConfig, ValkeyStorage,
    error::{Op, classify, storage_error},
    scripts::Script,
};

/// The guard both guarded scripts start with: KEYS[1] is the fence
/// (highest token, decimal), ARGV[1] the token (decimal, no leading
/// zeros). Tokens are compared as decimal strings (length, then bytes) so
/// u64 values beyond Lua's 2^53 stay exact. A lower token returns
/// {0, highest}; else the token is recorded and the script goes on.
macro_rules! guard {
    () => {
        r#"
local highest = redis.call('GET', KEYS[1]) or '0'
local token = ARGV[1]
local lower = #token < #highest or (#token == #highest and token < highest)
if lower then
  return {0, highest}
end
redis.call('SET', KEYS[1], token)
"#
    };
}

/// `guard!`, then KEYS[2] (the data key) := ARGV[2] (the value). Reply:
/// {1, token} applied, {0, highest} refused.
const GUARDED_SET: &str = concat!(
    guard!(),
    r#"redis.call('SET', KEYS[2], ARGV[2])
return {1, token}
"#
);

/// `guard!`, then ARGV[2] appended to KEYS[2] (the log, a list). Each
/// list element is `<token> <value>`. Reply: {1, seq} appended (seq = the
/// new list length), {0, highest} refused.
const GUARDED_APPEND: &str = concat!(
    guard!(),
    r#"local seq = redis.call('RPUSH', KEYS[2], token .. ' ' .. ARGV[2])
return {1, seq}
"#
);

/// KEYS[1]: the fence; KEYS[2]: the register's value. Reply: {token,
/// value}, each `false` (nil) if missing.
const READ_REGISTER: &str = r#"
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}
"#;

/// KEYS[1]: the log. Reply: every element, oldest first.
const READ_LOG: &str = r#"
return redis.call('LRANGE', KEYS[1], 0, -1)
"#;

/// Fenced writes to keys of one Valkey / Redis server, sharing a
/// [`ValkeyStorage`]'s connection. Fences live at `<prefix>fence:<resource>`,
/// the register's value (of [`Fence::write`]) at
/// `<prefix>fence-value:<resource>`, the log at `<prefix>fence-log:<resource>`.
///
/// Its [`Fence`] implementation numbers log entries
/// [`Numbering::Contiguous`] (the list's length).
#[derive(Debug, Clone)]
pub struct ValkeyFence {
    client: Client,
    /// The storage whose connection this fence uses, when the fence owns it
    /// (see [`open`]).
    _owner: Option<Arc<ValkeyStorage>>,
    keys: FenceKeys,
    /// The storage's opt-in replica acknowledgement, applied to accepted writes.
    wait: Option<crate::WaitReplicas>,
    script: Script,
    append: Script,
    read_log: Script,
    read_register: Script,
}

impl ValkeyFence {
    /// Fenced writes over `storage`'s connection and key prefix. The
    /// connection is shared: it closes when `storage` is dropped, so keep
    /// the storage alive as long as the fence.
    pub fn new(storage: &ValkeyStorage) -> Self {
        ValkeyFence {
            client: storage.client().clone(),
            _owner: None,
            keys: FenceKeys::new(storage.config().prefix(), ':'),
            wait: storage.config().wait_replicas(),
            script: Script::new(GUARDED_SET),
            append: Script::new(GUARDED_APPEND),
            read_log: Script::new(READ_LOG),
            read_register: Script::new(READ_REGISTER),
        }
    }

    /// Fenced writes over `storage`'s connection, keeping `storage` (and so
    /// the connection) alive as long as the fence.
    pub fn owning(storage: ValkeyStorage) -> Self {
        let storage = Arc::new(storage);
        ValkeyFence {
            _owner: Some(storage.clone()),
            ..ValkeyFence::new(&storage)
        }
    }

    /// The key that holds the value of `resource`'s register.
    pub fn value_key(&self, resource: &str) -> String {
        self.keys.value(resource)
    }

    /// The key that holds `resource`'s highest token.
    pub fn fence_key(&self, resource: &str) -> String {
        self.keys.fence(resource)
    }

    /// Writes `value` at `key` (a plain key, not prefixed) if `token` is at
    /// least the highest token seen for `resource`, and records `token`;
    /// both in one atomic script.
    ///
    /// Errors are classified like the storage's writes: a lost answer is
    /// [`ErrorKind::OutcomeUnknown`] (the write may have been applied).
    pub async fn set(
        &self,
        resource: &str,
        token: u64,
        key: &str,
        value: &[u8],
    ) -> Result<FenceOutcome> {
        const WHAT: &str = "fenced set";
        let keys = vec![self.fence_key(resource), key.to_string()];
        let reply = self
            .run_guarded(WHAT, &self.script, keys, token, value)
            .await?;
        let outcome = parse_reply(reply)?;
        if let (FenceOutcome::Accepted, Some(wait)) = (outcome, self.wait) {
            crate::replication::confirm(&self.client, wait, WHAT).await?;
        }
        Ok(outcome)
    }
}

impl ValkeyFence {
    /// Runs a guarded `script` (`what`, in errors) on `keys` with the token
    /// and the value as arguments, after checking the value and the
    /// connection (a write never sent is transient); its errors are a
    /// write's.
    async fn run_guarded(
        &self,
        what: &str,
        script: &Script,
        keys: Vec<String>,
        token: u64,
        value: &[u8],
    ) -> Result<Value> {
        check_value(value)?;
        if !self.client.is_connected() {
            return Err(StorageError::transient(format!("{what}: not connected")));
        }
        let args = vec![
            Value::String(token.to_string().into()),
            Value::Bytes(Bytes::copy_from_slice(value)),
        ];
        script
            .run::<Value, _, _>(&self.client, keys, args)
            .await
            .map_err(|err| storage_error(classify(&err, Op::Write), what, err))
    }

    /// The list that holds `resource`'s log.
    pub fn log_key(&self, resource: &str) -> String {
        self.keys.log(resource)
    }

    /// Appends `value` to `resource`'s log if `token` is at least the
    /// highest token seen for `resource` (the same fence as
    /// [`set`](Self::set)), and records `token`; both in one atomic script.
    /// An appended entry gets the next sequence number.
    ///
    /// Errors are classified like [`set`](Self::set)'s.
    pub async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        const WHAT: &str = "fenced append";
        let keys = vec![self.fence_key(resource), self.log_key(resource)];
        let reply = self
            .run_guarded(WHAT, &self.append, keys, token, value)
            .await?;
        let unexpected = |reply: &Value| {
            StorageError::outcome_unknown(format!("{WHAT}: unexpected reply {reply:?}"))
        };
        let Value::Array(items) = &reply else {
            return Err(unexpected(&reply));
        };
        match (items.first(), items.get(1)) {
            (Some(Value::Integer(1)), Some(Value::Integer(seq))) => {
                let seq = u64::try_from(*seq).map_err(|_| unexpected(&reply))?;
                if let Some(wait) = self.wait {
                    crate::replication::confirm(&self.client, wait, WHAT).await?;
                }
                Ok(AppendOutcome::Appended { seq })
            }
            (Some(Value::Integer(0)), Some(highest)) => {
                let highest = highest
                    .as_string()
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(|| not_decimal(highest))?;
                Ok(AppendOutcome::Rejected { highest })
            }
            _ => Err(unexpected(&reply)),
        }
    }

    /// Reads `resource`'s log, oldest entry first.
    ///
    /// Errors are classified like the storage's reads.
    pub async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        const WHAT: &str = "reading a fenced log";
        let reply = self
            .read_log
            .run::<Value, _, _>(
                &self.client,
                vec![self.log_key(resource)],
                Vec::<Value>::new(),
            )
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), WHAT, err))?;
        let items = match reply {
            Value::Array(items) => items,
            Value::Null => Vec::new(),
            other => {
                return Err(StorageError::permanent(format!(
                    "{WHAT}: unexpected reply {other:?}"
                )));
            }
        };
        let mut entries = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let bytes = item
                .as_bytes()
                .map(<[u8]>::to_vec)
                .or_else(|| item.as_string().map(String::into_bytes))
                .ok_or_else(|| not_decimal(&item))?;
            let split = bytes.iter().position(|b| *b == b' ');
            let token = split
                .and_then(|at| std::str::from_utf8(&bytes[..at]).ok())
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| not_decimal(&item))?;
            let value = split.map_or_else(Vec::new, |at| bytes[at + 1..].to_vec());
            entries.push(LogEntry {
                seq: u64::try_from(index).unwrap_or(u64::MAX).saturating_add(1),
                token,
                value,
            });
        }
        Ok(entries)
    }
}

/// A fence or log element that does not start with a decimal token.
fn not_decimal(value: &Value) -> StorageError {
    StorageError::with_source(
        ErrorKind::Permanent,
        "fence: the key does not hold a decimal token",
        std::io::Error::other(format!("{value:?}")),
    )
}

/// Parses `{applied, token}`.
fn parse_reply(reply: Value) -> Result<FenceOutcome> {
    let unexpected = |reply: &Value| {
        StorageError::outcome_unknown(format!("fenced set: unexpected reply {reply:?}"))
    };
    let Value::Array(items) = &reply else {
        return Err(unexpected(&reply));
    };
    let (Some(applied), Some(token)) = (items.first(), items.get(1)) else {
        return Err(unexpected(&reply));
    };
    let token = token
        .as_string()
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| {
            StorageError::with_source(
                ErrorKind::Permanent,
                "fenced set: the fence does not hold a decimal token",
                std::io::Error::other(format!("{token:?}")),
            )
        })?;
    match applied {
        Value::Integer(1) => Ok(FenceOutcome::Accepted),
        Value::Integer(0) => Ok(FenceOutcome::Rejected { highest: token }),
        _ => Err(unexpected(&reply)),
    }
}

/// Reads a reply element that may be nil.
fn optional_bytes(value: &Value) -> Option<Vec<u8>> {
    value
        .as_bytes()
        .map(<[u8]>::to_vec)
        .or_else(|| value.as_string().map(String::into_bytes))
}

#[async_trait]
impl Fence for ValkeyFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome> {
        self.set(resource, token, &self.value_key(resource), value)
            .await
    }

    async fn read(&self, resource: &str) -> Result<Option<Fenced>> {
        const WHAT: &str = "reading a fenced register";
        let keys = vec![self.fence_key(resource), self.value_key(resource)];
        let reply = self
            .read_register
            .run::<Value, _, _>(&self.client, keys, Vec::<Value>::new())
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), WHAT, err))?;
        let Value::Array(items) = &reply else {
            return Err(StorageError::permanent(format!(
                "{WHAT}: unexpected reply {reply:?}"
            )));
        };
        let Some(token) = items.first().filter(|t| !t.is_null()) else {
            return Ok(None);
        };
        let token = token
            .as_string()
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| not_decimal(token))?;
        let value = items.get(1).and_then(optional_bytes).unwrap_or_default();
        Ok(Some(Fenced { token, value }))
    }

    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        ValkeyFence::append(self, resource, token, value).await
    }

    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        ValkeyFence::log(self, resource).await
    }

    fn numbering(&self) -> Numbering {
        Numbering::Contiguous
    }
}

/// Opens the fence of a Valkey / Redis configuration (a parsed URL, as
/// [`crate::DRIVER`]'s fence opener passes it) on a connection of its own. Fences live
/// under the configuration's key prefix; `options` (tables) do not apply.
///
/// # Errors
///
/// The connection's error.
pub async fn open(config: ValkeyConfig, options: &OpenOptions) -> Result<DynFence> {
    let _ = options;
    let storage = ValkeyStorage::connect(config).await?;
    Ok(Arc::new(ValkeyFence::owning(storage)))
}
