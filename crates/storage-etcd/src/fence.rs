//! Fencing for a resource kept in etcd: a write carries the writer's
//! fencing token and is applied only if no higher token was seen.
//!
//! A leader's `Leadership::fencing_token()` (from `elections`) grows with
//! every new leadership. [`EtcdFence::set`] is one etcd transaction that
//! compares the token with the highest one recorded for the resource (the
//! key `<prefix>fence/<resource>`, holding the token as 20 zero-padded
//! decimal digits, so etcd's byte comparison is the numeric one):
//!
//! ```text
//! IF value(fence) > token THEN get(fence)                        -- refused
//!                         ELSE put(fence, token), put(key, value) -- applied
//! ```
//!
//! (etcd fails a value comparison on a missing key, so a resource never
//! written takes the `ELSE` branch.) The transaction goes through Raft:
//! the check and the writes are one atomic, linearizable step. A deposed
//! leader that wakes up late (paused process, slow network) is refused,
//! whatever the timing.
//!
//! [`EtcdFence::append`] is the same guard on an append-only log: the
//! `ELSE` branch records the token and puts a fresh key under
//! `<prefix>fence-log/<resource>/`; the entry's sequence number is the
//! etcd revision of that transaction, so entries are numbered in accept
//! order (increasing, not contiguous). [`EtcdFence::log`] reads the log
//! back in that order.
//!
//! [`EtcdFence`] implements the workspace's one fencing contract,
//! [`fence::Fence`] (guarded write of a register, fenced append, reads),
//! checked by the shared `fence::suite!` on the real engine; [`open`]
//! opens it from a URL (as `storage_url::open_fence` does). The outcome
//! types are the shared ones, re-exported here.
//!
//! ```no_run
//! use storage_etcd::{EtcdStorage, fence::{EtcdFence, FenceOutcome}};
//!
//! # async fn demo(token: u64) -> Result<(), ttl_storage::StorageError> {
//! let storage = EtcdStorage::from_url("etcd://127.0.0.1:2379").await?;
//! let fence = EtcdFence::new(&storage);
//! match fence.set("billing", token, "billing/last-run", b"2026-11-23").await? {
//!     FenceOutcome::Accepted => {}
//!     FenceOutcome::Rejected { highest } => {
//!         // a newer leader (token `highest`) exists: stop working
//!     }
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
pub use fence::{AppendOutcome, FenceOutcome, LogEntry};
use fence::{DynFence, Fence, FenceKeys, Fenced, Numbering, OpenOptions};
use ttl_storage::{Result, StorageError, check_value};

use crate::{
    EtcdConfig, EtcdStorage,
    error::{Op, classify, storage_error},
};

/// Fenced writes to keys of one etcd cluster, sharing an
/// [`EtcdStorage`]'s connection. Fences live at `<prefix>fence/<resource>`,
/// the register's value (of [`Fence::write`]) at
/// `<prefix>fence-value/<resource>`, the log under
/// `<prefix>fence-log/<resource>/`.
///
/// Its [`Fence`] implementation numbers log entries
/// [`Numbering::Increasing`]: an entry's number is the etcd revision of its
/// append.
#[derive(Clone)]
pub struct EtcdFence {
    client: Client,
    keys: FenceKeys,
}

impl std::fmt::Debug for EtcdFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdFence")
            .field("prefix", &self.keys.prefix())
            .finish_non_exhaustive()
    }
}

/// A token as etcd compares it: 20 zero-padded decimal digits.
fn padded(token: u64) -> String {
    format!("{token:020}")
}

impl EtcdFence {
    /// Fenced writes over `storage`'s connection and key prefix.
    pub fn new(storage: &EtcdStorage) -> Self {
        EtcdFence {
            client: storage.client().clone(),
            keys: FenceKeys::new(storage.config().prefix(), '/'),
        }
    }

    /// The key that holds `resource`'s highest token.
    pub fn fence_key(&self, resource: &str) -> String {
        self.keys.fence(resource)
    }

    /// The key that holds the value of `resource`'s register.
    pub fn value_key(&self, resource: &str) -> String {
        self.keys.value(resource)
    }

    /// The key prefix under which `resource`'s log entries live.
    pub fn log_prefix(&self, resource: &str) -> String {
        format!("{}/", self.keys.log(resource))
    }

    /// Writes `value` at `key` (a plain key, not prefixed) if `token` is at
    /// least the highest token seen for `resource`, and records `token`;
    /// both in one transaction.
    ///
    /// Errors are classified like the storage's writes: a lost answer is
    /// [`ttl_storage::ErrorKind::OutcomeUnknown`] (the write may have been
    /// applied).
    pub async fn set(
        &self,
        resource: &str,
        token: u64,
        key: &str,
        value: &[u8],
    ) -> Result<FenceOutcome> {
        check_value(value)?;
        let response = self
            .guarded("fenced set", resource, token, TxnOp::put(key, value, None))
            .await?;
        match rejected(&response)? {
            Some(highest) => Ok(FenceOutcome::Rejected { highest }),
            None => Ok(FenceOutcome::Accepted),
        }
    }

    /// Appends `value` to `resource`'s log if `token` is at least the
    /// highest token seen for `resource` (the same fence as
    /// [`set`](Self::set)), and records `token`; both in one transaction.
    ///
    /// Errors are classified like [`set`](Self::set)'s.
    ///
    /// ```no_run
    /// # async fn demo(fence: storage_etcd::fence::EtcdFence, token: u64) -> Result<(), ttl_storage::StorageError> {
    /// use storage_etcd::fence::AppendOutcome;
    /// if let AppendOutcome::Rejected { highest } = fence.append("billing", token, b"invoice 42 sent").await? {
    ///     // a newer leader (token `highest`) exists: stop working
    /// }
    /// for entry in fence.log("billing").await? {
    ///     println!("{} (token {}): {:?}", entry.seq, entry.token, entry.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        check_value(value)?;
        // A fresh key per entry: the token, then a random nonce.
        let entry = format!(
            "{}{}-{:016x}",
            self.log_prefix(resource),
            padded(token),
            rand::random::<u64>()
        );
        let response = self
            .guarded(
                "fenced append",
                resource,
                token,
                TxnOp::put(entry, value, None),
            )
            .await?;
        if let Some(highest) = rejected(&response)? {
            return Ok(AppendOutcome::Rejected { highest });
        }
        let seq = response
            .header()
            .map(|h| h.revision())
            .and_then(|r| u64::try_from(r).ok())
            .ok_or_else(|| StorageError::outcome_unknown("fenced append: no revision"))?;
        Ok(AppendOutcome::Appended { seq })
    }

    /// Reads `resource`'s log, in accept order (one linearizable range
    /// read).
    ///
    /// Errors are classified like the storage's reads.
    pub async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        let prefix = self.log_prefix(resource);
        let response = crate::unsent::retry(|| {
            let mut client = self.client.clone();
            let prefix = prefix.clone();
            async move {
                let options = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend);
                client.get(prefix, Some(options)).await
            }
        })
        .await
        .map_err(|err| storage_error(classify(&err, Op::Read), "reading a fenced log", err))?;
        let mut entries = Vec::new();
        for kv in response.kvs() {
            // `<20 digits>-<16 hex>`; longer suffixes belong to resources
            // whose name extends this one's (`a/b` under `a/`).
            let Some(suffix) = kv.key().strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            let token = match suffix {
                [
                    digits @ ..,
                    b'-',
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                ] if digits.len() == 20 => std::str::from_utf8(digits)
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok()),
                _ => None,
            };
            let (Some(token), Ok(seq)) = (token, u64::try_from(kv.create_revision())) else {
                continue;
            };
            entries.push(LogEntry {
                seq,
                token,
                value: kv.value().to_vec(),
            });
        }
        Ok(entries)
    }

    /// `IF value(fence) > token THEN get(fence) ELSE put(fence, token), write`.
    async fn guarded(
        &self,
        what: &str,
        resource: &str,
        token: u64,
        write: TxnOp,
    ) -> Result<TxnResponse> {
        let fence = self.fence_key(resource);
        let token = padded(token);
        let txn = Txn::new()
            .when([Compare::value(
                fence.as_str(),
                CompareOp::Greater,
                token.as_str(),
            )])
            .and_then([TxnOp::get(fence.as_str(), None)])
            .or_else([TxnOp::put(fence.as_str(), token.as_str(), None), write]);
        crate::unsent::retry(|| {
            let mut client = self.client.clone();
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
        .map_err(|err| storage_error(classify(&err, Op::Write), what, err))
    }
}

/// The higher token a refused transaction read, or `None` if it applied.
fn rejected(response: &TxnResponse) -> Result<Option<u64>> {
    if !response.succeeded() {
        return Ok(None);
    }
    let highest = match response.op_responses().first() {
        Some(TxnOpResponse::Get(get)) => get
            .kvs()
            .first()
            .and_then(|kv| std::str::from_utf8(kv.value()).ok())
            .and_then(|t| t.parse::<u64>().ok()),
        _ => None,
    };
    highest.map(Some).ok_or_else(|| {
        StorageError::permanent("fence: the fence key does not hold a decimal token")
    })
}

/// The value of the first key a `get` of a transaction found.
fn got(response: Option<&TxnOpResponse>) -> Option<Vec<u8>> {
    match response {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    }
}

#[async_trait]
impl Fence for EtcdFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome> {
        self.set(resource, token, &self.value_key(resource), value)
            .await
    }

    /// One linearizable transaction reading the fence and the value.
    async fn read(&self, resource: &str) -> Result<Option<Fenced>> {
        let (fence, value) = (self.fence_key(resource), self.value_key(resource));
        let txn = Txn::new().and_then([TxnOp::get(fence, None), TxnOp::get(value, None)]);
        let response = crate::unsent::retry(|| {
            let mut client = self.client.clone();
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
        .map_err(|err| storage_error(classify(&err, Op::Read), "reading a fenced register", err))?;
        let answers = response.op_responses();
        let Some(token) = got(answers.first()) else {
            return Ok(None);
        };
        let token = std::str::from_utf8(&token)
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| {
                StorageError::permanent("fence: the fence key does not hold a decimal token")
            })?;
        Ok(Some(Fenced {
            token,
            value: got(answers.get(1)).unwrap_or_default(),
        }))
    }

    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        EtcdFence::append(self, resource, token, value).await
    }

    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        EtcdFence::log(self, resource).await
    }

    fn numbering(&self) -> Numbering {
        Numbering::Increasing
    }
}

/// Opens the fence of an etcd configuration (a parsed URL, as
/// [`crate::DRIVER`]'s fence opener passes it) on a connection of its own. Fences live
/// under the configuration's key prefix; `options` (tables) do not apply.
///
/// # Errors
///
/// The connection's error.
pub async fn open(config: EtcdConfig, options: &OpenOptions) -> Result<DynFence> {
    let _ = options;
    let storage = EtcdStorage::connect(config).await?;
    Ok(Arc::new(EtcdFence::new(&storage)))
}
