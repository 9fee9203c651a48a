//! [`EtcdStorage`]: the [`TtlStorage`] implementation.

use async_trait::async_trait;
use std::sync::Arc;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, KeyValue, PutOptions, TlsOptions, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::Instant;
use ttl_storage::{
    Changes, ChangesUnsupported, Counted, CountedWrite, Entry, ErrorKind, Key, Result,
    StorageError, TimeLeft, Ttl, TtlStorage, Watch, WatchUnsupported, check_value,
    counted::next_count,
};

use crate::{
    config::EtcdConfig,
    error::{ConfigError, EtcdError, Op, classify, classify_connect, storage_error},
    lease::Leases,
    reads::Reads,
    unsent,
};

/// A [`TtlStorage`] on an etcd v3 cluster. See the [crate docs](crate).
///
/// Cloning is cheap and shares the connection.
#[derive(Clone)]
pub struct EtcdStorage {
    client: Client,
    config: EtcdConfig,
    /// The shared leases, one per TTL.
    leases: Arc<Leases>,
    /// Reads batched into transactions (the renewals' reads).
    reads: Reads,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdStorage {
    /// Parses `url` (see [`EtcdConfig::from_url`]) and [connects](Self::connect).
    pub async fn from_url(url: &str) -> Result<Self> {
        let config = EtcdConfig::from_url(url).map_err(|err: ConfigError| {
            StorageError::with_source(ErrorKind::Permanent, "bad etcd URL", err)
        })?;
        Self::connect(config).await
    }

    /// Connects (TLS and authentication included) and reads once, so an
    /// unreachable cluster is reported here.
    ///
    /// Errors: [`ErrorKind::Transient`] when no endpoint answers;
    /// [`ErrorKind::Permanent`] for bad credentials, a TLS failure or a bad
    /// CA file.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let url = config.redacted_url();
        let mut options = ConnectOptions::new()
            .with_timeout(config.options.request_timeout)
            .with_connect_timeout(config.options.connect_timeout);
        if let Some(credentials) = &config.credentials {
            options = options.with_user(&credentials.user, &credentials.password);
        }
        if config.tls {
            let tls = match &config.options.tls_ca_file {
                Some(path) => {
                    let pem = tokio::fs::read(path).await.map_err(|err| {
                        StorageError::with_source(
                            ErrorKind::Permanent,
                            format!("TLS CA file {}: cannot read", path.display()),
                            err,
                        )
                    })?;
                    TlsOptions::new().ca_certificate(Certificate::from_pem(pem))
                }
                None => TlsOptions::new().with_native_roots(),
            };
            options = options.with_tls(tls);
        }
        let client = match Client::connect(config.endpoint_urls(), Some(options)).await {
            Ok(client) => client,
            Err(err) => return Err(connect_failed(&config, &url, err).await),
        };
        // The channel connects lazily: one read proves the cluster answers.
        let probe = format!("{}__probe__", config.options.prefix);
        let answered = unsent::retry(|| {
            let mut client = client.clone();
            let probe = probe.clone();
            async move { client.get(probe, None).await }
        })
        .await;
        if let Err(err) = answered {
            return Err(connect_failed(&config, &url, err).await);
        }
        tracing::debug!(%url, prefix = %config.options.prefix, "etcd storage connected");
        let leases = Arc::new(Leases::new(client.clone(), config.options.request_timeout));
        let reads = Reads::start(client.clone());
        Ok(EtcdStorage {
            client,
            config,
            leases,
            reads,
        })
    }

    /// The configuration this storage was connected with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// The etcd client, for callers that want to share the connection.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The server-side key of `key`: the configured prefix, then the key.
    pub fn server_key(&self, key: &Key) -> String {
        format!("{}{}", self.config.options.prefix, key)
    }

    /// The shared lease of `ttl` (see [`crate::lease`]), kept alive by a
    /// keep-alive sent at or after `after`; `None` for [`Ttl::NEVER`].
    async fn lease(&self, what: &str, ttl: Ttl, after: Instant) -> Result<Option<(i64, i64)>> {
        if ttl.is_never() {
            return Ok(None);
        }
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let lease = self.leases.kept_alive_since(secs, after, what).await?;
        Ok(Some((secs, lease)))
    }

    /// Runs a conditional transaction.
    async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse> {
        let sent = unsent::retry(|| {
            let mut client = self.client.clone();
            let txn = txn.clone();
            async move { client.txn(txn).await }
        });
        match sent.await {
            Ok(response) => Ok(response),
            Err(err) => {
                let kind = classify(&err, Op::Write);
                tracing::debug!(%err, ?kind, "{what} failed");
                Err(storage_error(kind, what, err))
            }
        }
    }

    /// Runs `txn`, which attaches `key` to the shared lease `lease` (of
    /// `secs`) when it succeeds, keeping [`Leases`]' account of the
    /// records on it.
    async fn attaching_txn(
        &self,
        what: &str,
        txn: Txn,
        key: &str,
        attach: Option<(i64, i64)>,
        since: Instant,
    ) -> Result<TxnResponse> {
        let Some((secs, lease)) = attach else {
            return self.txn(what, txn).await;
        };
        let ours = (secs, lease, since);
        let before = self.leases.pending(key, ours);
        match self.txn(what, txn).await {
            Ok(response) if response.succeeded() => {
                self.leases.confirm(key, ours, header_revision(&response));
                Ok(response)
            }
            Ok(response) => {
                self.leases.undo(key, ours, before);
                Ok(response)
            }
            Err(err) => {
                if err.kind() != ErrorKind::OutcomeUnknown {
                    self.leases.undo(key, ours, before);
                }
                Err(err)
            }
        }
    }

    /// A renewal, `compare_and_swap(v, v)`: a keep-alive of the shared
    /// lease and a (batched) read that finds the record holding `value` on
    /// it. A record on another lease (written by another storage, or on a
    /// retired lease) is moved to ours by one transaction that compares
    /// its `mod_revision` with the read's revision: it only replaces a
    /// record written before the keep-alive that follows the read, so a
    /// late move never makes the record expire earlier than a write
    /// already acknowledged.
    async fn renew(&self, key: &str, value: &[u8], ttl: Ttl) -> Result<bool> {
        const WHAT: &str = "compare_and_swap";
        let start = Instant::now();
        for _ in 0..SAME_VALUE_ROUNDS {
            let Some((secs, lease)) = self.lease(WHAT, ttl, start).await? else {
                return Err(StorageError::permanent("renew: a TTL that never expires"));
            };
            let (kv, revision) = self.reads.read(key, WHAT).await?;
            let kv = match kv {
                Some(kv) if kv.value() == value => kv,
                other => {
                    let seen = other.as_ref().map(KeyValue::mod_revision);
                    self.leases.forget(key, seen, revision);
                    return Ok(false);
                }
            };
            if kv.lease() == lease {
                self.leases
                    .confirm(key, (secs, lease, start), kv.mod_revision());
                return Ok(true);
            }
            let attach = self.lease(WHAT, ttl, Instant::now()).await?;
            let lease = attach.map_or(0, |(_, lease)| lease);
            let txn = Txn::new()
                .when([
                    Compare::value(key, CompareOp::Equal, value),
                    unchanged_since(key, revision),
                ])
                .and_then([TxnOp::put(
                    key,
                    value,
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key, None)]);
            let response = self.attaching_txn(WHAT, txn, key, attach, start).await?;
            if response.succeeded() {
                return Ok(true);
            }
            if current_value(&response).as_deref() != Some(value) {
                let seen = current(&response).as_ref().map(KeyValue::mod_revision);
                self.leases.forget(key, seen, header_revision(&response));
                return Ok(false);
            }
            tracing::debug!(
                key,
                "renewal: the record was rewritten after the read; again"
            );
        }
        Err(rewritten_each_round(WHAT))
    }
}

/// How many rounds a swap tries when the record keeps being rewritten
/// with the value it expects between its read and its transaction (a
/// concurrent swap of the same value, or a late one).
const SAME_VALUE_ROUNDS: usize = 3;

/// `mod_revision(key) <= revision`: the key was not written since a read
/// answered at `revision` (an absent key compares as 0). A swap reads,
/// then keeps its lease alive, then writes with this comparison: every
/// write it may replace was applied before its lease's keep-alive, so a
/// swap delayed on its way never attaches a lease that expires earlier
/// than the record it replaces (a renewal's first attempt landing after
/// its retry, transactions reordered by follower forwarding).
fn unchanged_since(key: &str, revision: i64) -> Compare {
    Compare::mod_revision(key, CompareOp::Less, revision.saturating_add(1))
}

/// A swap that found the record rewritten with the value it expects after
/// each of its reads.
fn rewritten_each_round(what: &str) -> StorageError {
    StorageError::transient(format!(
        "{what}: the record was rewritten with the same value after each of \
         {SAME_VALUE_ROUNDS} reads"
    ))
}

/// The store's revision a transaction was answered at (0 without a
/// header: then nothing is forgotten on its account).
fn header_revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |h| h.revision())
}

/// The record the `ELSE` branch of a failed swap read, if the key exists.
fn current(response: &TxnResponse) -> Option<KeyValue> {
    match response.op_responses().into_iter().next() {
        Some(TxnOpResponse::Get(mut get)) => get.take_kvs().into_iter().next(),
        _ => None,
    }
}

/// The value the `ELSE` branch of a failed swap read, if the key exists.
fn current_value(response: &TxnResponse) -> Option<Vec<u8>> {
    current(response).map(|kv| kv.value().to_vec())
}

#[async_trait]
impl TtlStorage for EtcdStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        const WHAT: &str = "insert_if_not_exists";
        check_value(value)?;
        // No record to replace, so nothing a late insert could shorten: it
        // lands only on an absent key.
        let start = Instant::now();
        let attach = self.lease(WHAT, ttl, start).await?;
        let lease = attach.map_or(0, |(_, lease)| lease);
        let key = self.server_key(key);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        Ok(self
            .attaching_txn(WHAT, txn, &key, attach, start)
            .await?
            .succeeded())
    }

    /// A renewal (`old == new`, expiring) is a keep-alive of the shared
    /// lease and a batched read (see the crate docs). Otherwise:
    /// read the record (refused at once if it does not hold `old`), keep
    /// the shared lease alive, then `IF value = old AND mod_revision <=
    /// (the read's revision) THEN put(new, shared lease) ELSE get`; the
    /// second comparison keeps a transaction delayed on its way from
    /// landing on a record written after its lease was kept alive (see the
    /// crate docs). When only that one failed (the record still holds
    /// `old`, rewritten since), the swap is tried again, up to three times.
    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        const WHAT: &str = "compare_and_swap";
        check_value(old)?;
        check_value(new)?;
        let key = self.server_key(key);
        if old == new && !ttl.is_never() {
            return self.renew(&key, new, ttl).await;
        }
        let start = Instant::now();
        for _ in 0..SAME_VALUE_ROUNDS {
            let mut when = vec![Compare::value(key.clone(), CompareOp::Equal, old)];
            let attach = if ttl.is_never() {
                None
            } else {
                let (kv, revision) = self.reads.read(&key, WHAT).await?;
                if kv.as_ref().map(KeyValue::value) != Some(old) {
                    return Ok(false);
                }
                when.push(unchanged_since(&key, revision));
                self.lease(WHAT, ttl, Instant::now()).await?
            };
            let lease = attach.map_or(0, |(_, lease)| lease);
            let txn = Txn::new()
                .when(when)
                .and_then([TxnOp::put(
                    key.clone(),
                    new,
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = self.attaching_txn(WHAT, txn, &key, attach, start).await?;
            if response.succeeded() {
                if attach.is_none() {
                    self.leases.forget(&key, None, header_revision(&response));
                }
                return Ok(true);
            }
            if current_value(&response).as_deref() != Some(old) {
                return Ok(false);
            }
            tracing::debug!(
                key,
                "compare_and_swap: the record was rewritten after the read; again"
            );
        }
        Err(rewritten_each_round(WHAT))
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        const WHAT: &str = "compare_and_delete";
        check_value(value)?;
        let key = self.server_key(key);
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Equal, value)])
            .and_then([TxnOp::delete(key.clone(), None)]);
        let response = self.txn(WHAT, txn).await?;
        if response.succeeded() {
            self.leases.forget(&key, None, header_revision(&response));
        }
        Ok(response.succeeded())
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        Ok(self.read(key).await?.0.map(|kv| kv.value().to_vec()))
    }

    /// The value, and the time left on its lease (`LeaseTimeToLive`, whole
    /// seconds; a second call, so the lease may have run out in between:
    /// then zero). A key without a lease never expires.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        let Some(kv) = self.read(key).await?.0 else {
            return Ok(None);
        };
        let value = kv.value().to_vec();
        let lease = kv.lease();
        if lease == 0 {
            return Ok(Some(Entry {
                value,
                time_left: TimeLeft::Never,
            }));
        }
        let left = unsent::retry(|| {
            let mut client = self.client.clone();
            async move { client.lease_time_to_live(lease, None).await }
        })
        .await
        .map_err(|err| storage_error(classify(&err, Op::Read), "get", err))?
        .ttl();
        Ok(Some(Entry {
            value,
            time_left: lease_time_left(left),
        }))
    }

    /// One transaction writes both: `IF (the record's condition, as for
    /// insert or swap) AND the counter is unchanged since it was read THEN
    /// put(record, fresh lease), put(counter) ELSE get both`. Before it,
    /// the counter is read and the lease granted (three round trips
    /// instead of the six of the separate writes). A counter changed
    /// meanwhile, or a record rewritten with the expected value after the
    /// grant, tries again, up to three times.
    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        const WHAT: &str = "write_counted";
        if let Some(old) = write.expected {
            check_value(old)?;
        }
        check_value(write.value)?;
        let key = self.server_key(write.key);
        let counter = self.server_key(write.counter);
        let start = Instant::now();
        for _ in 0..SAME_VALUE_ROUNDS {
            let (current, revision) = self.read(write.counter).await?;
            let next = next_count(
                write.counter,
                current.as_ref().map(KeyValue::value),
                write.floor,
                write.max,
            )?;
            // After the read: the record it may replace was written before.
            let attach = self.lease(WHAT, write.ttl, Instant::now()).await?;
            let lease = attach.map_or(0, |(_, lease)| lease);
            let mut when = vec![match &current {
                None => Compare::create_revision(counter.clone(), CompareOp::Equal, 0),
                Some(kv) => {
                    Compare::mod_revision(counter.clone(), CompareOp::Equal, kv.mod_revision())
                }
            }];
            match write.expected {
                None => when.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0)),
                Some(old) => {
                    when.push(Compare::value(key.clone(), CompareOp::Equal, old));
                    if attach.is_some() {
                        when.push(unchanged_since(&key, revision));
                    }
                }
            }
            let txn = Txn::new()
                .when(when)
                .and_then([
                    TxnOp::put(
                        key.clone(),
                        write.value,
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                    TxnOp::put(counter.clone(), next.to_string(), None),
                ])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = self.attaching_txn(WHAT, txn, &key, attach, start).await?;
            if response.succeeded() {
                if attach.is_none() {
                    self.leases.forget(&key, None, header_revision(&response));
                }
                return Ok(Counted::Written(next));
            }
            let holds = current_value(&response);
            let condition = match write.expected {
                None => holds.is_none(),
                Some(old) => holds.as_deref() == Some(old),
            };
            if !condition {
                return Ok(Counted::Refused);
            }
            tracing::debug!(
                key,
                "write_counted: the counter or the record changed meanwhile; again"
            );
        }
        Err(StorageError::transient(format!(
            "{WHAT}: the counter or the record changed between the read and the transaction \
             {SAME_VALUE_ROUNDS} times"
        )))
    }

    /// An etcd watch of the key from the revision it was read at: completes
    /// on its delete event (a compare-and-delete, or its lease expiring), at
    /// once when the key holds no record, and, after a short pause, when
    /// etcd cannot be reached or cancels the watch (a spurious wake-up: the
    /// caller reads the record again).
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        let client = self.client.clone();
        let server_key = self.server_key(key);
        Ok(Box::pin(async move {
            if !crate::watch::until_deleted(client, server_key).await {
                tokio::time::sleep(crate::watch::ERROR_PAUSE).await;
            }
        }))
    }

    /// An etcd watch of the key, resumed without a gap (see the crate docs).
    fn changes(&self, key: &Key, counter: Option<&Key>) -> Result<Changes, ChangesUnsupported> {
        Ok(crate::changes::follow(
            self.client.clone(),
            self.server_key(key),
            counter.map(|counter| self.server_key(counter)),
        ))
    }
}

impl EtcdStorage {
    /// The key's record as etcd holds it (value and lease), if any, and the
    /// store's revision when it was read.
    async fn read(&self, key: &Key) -> Result<(Option<KeyValue>, i64)> {
        let server_key = self.server_key(key);
        let mut response = unsent::retry(|| {
            let mut client = self.client.clone();
            let server_key = server_key.clone();
            async move { client.get(server_key, None).await }
        })
        .await
        .map_err(|err| storage_error(classify(&err, Op::Read), "get", err))?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok((response.take_kvs().into_iter().next(), revision))
    }
}

/// A lease's `LeaseTimeToLive` answer in seconds as a time left: -1 means
/// it has expired (since the key was read).
fn lease_time_left(seconds: i64) -> TimeLeft {
    TimeLeft::About(std::time::Duration::from_secs(
        u64::try_from(seconds).unwrap_or(0),
    ))
}

/// HTTP/2's connection preface and an empty SETTINGS frame: what a gRPC
/// client sends first in plaintext; an etcd without TLS answers with its
/// own SETTINGS frame.
const H2_GREETING: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The error of a failed first connection. A TLS connection to a
/// plaintext etcd ends in "tls handshake eof"; the HTTP/2 preface sent in
/// plaintext to the same endpoint tells it, and then that is what is said.
async fn connect_failed(config: &EtcdConfig, url: &str, err: EtcdError) -> StorageError {
    let what = format!("connecting to {url}");
    if config.tls {
        for endpoint in &config.endpoints {
            let Some((host, port)) = endpoint
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host.trim_matches(['[', ']']), port.parse().ok()?)))
            else {
                continue;
            };
            let limit = std::time::Duration::from_secs(2);
            if ttl_storage::kit::tls::answers_in_plaintext(host, port, H2_GREETING, limit).await {
                tracing::debug!(%url, %err, endpoint, "etcd answered in plaintext: no TLS");
                return StorageError::permanent(format!(
                    "{what} failed: the server at {endpoint} does not speak TLS (it answers in \
                     plaintext); use etcd:// for it, or enable TLS on the server"
                ));
            }
        }
    }
    let kind = classify_connect(&err);
    tracing::debug!(%url, %err, ?kind, "connecting to etcd failed");
    storage_error(kind, &what, err)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn lease_ttl_as_time_left() {
        assert_eq!(
            lease_time_left(17),
            TimeLeft::About(Duration::from_secs(17))
        );
        assert_eq!(lease_time_left(-1), TimeLeft::About(Duration::ZERO));
    }
}
