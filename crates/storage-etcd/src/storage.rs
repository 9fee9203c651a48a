//! [`EtcdStorage`]: the [`TtlStorage`] implementation.

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, KeyValue,
    PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use ttl_storage::{
    Counted, CountedWrite, Entry, ErrorKind, Key, Result, StorageError, TimeLeft, Ttl, TtlStorage,
    Watch, WatchUnsupported, check_value, counted::next_count,
};

use crate::{
    config::EtcdConfig,
    error::{ConfigError, EtcdError, Op, classify, classify_connect, storage_error},
    unsent,
};

/// A [`TtlStorage`] on an etcd v3 cluster. See the [crate docs](crate).
///
/// Cloning is cheap and shares the connection.
#[derive(Clone)]
pub struct EtcdStorage {
    client: Client,
    config: EtcdConfig,
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
        Ok(EtcdStorage { client, config })
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

    /// A fresh lease of `ttl` for one write (no lease, for [`Ttl::NEVER`]).
    /// Granting changes nothing a reader sees, so its errors are never
    /// "unknown".
    async fn grant(&self, what: &str, ttl: Ttl) -> Result<Option<Grant>> {
        if ttl.is_never() {
            return Ok(None);
        }
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let lease = unsent::retry(|| {
            let mut client = self.client.clone();
            async move { client.lease_grant(secs, None).await }
        })
        .await
        .map_err(|err| {
            storage_error(
                classify(&err, Op::Read),
                &format!("{what}: lease grant"),
                err,
            )
        })?;
        let Some(header) = lease.header() else {
            self.revoke_later(lease.id());
            return Err(StorageError::permanent(format!(
                "{what}: the lease grant was answered without a response header"
            )));
        };
        Ok(Some(Grant {
            lease: lease.id(),
            revision: header.revision(),
        }))
    }

    /// After a put that succeeded under `lease`: the lease the key held
    /// before, if another, is revoked in the background.
    fn retire_replaced_lease(&self, response: &TxnResponse, lease: i64) {
        let previous = previous_lease(response);
        if previous != lease {
            self.revoke_later(previous);
        }
    }

    /// Revokes a lease no key uses any more, in the background. Failing is
    /// harmless: the lease expires by itself.
    fn revoke_later(&self, lease: i64) {
        if lease == 0 {
            return;
        }
        let mut client = self.client.clone();
        tokio::spawn(async move {
            if let Err(err) = client.lease_revoke(lease).await {
                tracing::debug!(lease, %err, "revoking an unused lease failed; it will expire");
            }
        });
    }

    /// Runs a conditional transaction. When it certainly was not applied,
    /// `fresh` (the lease granted for it) is revoked.
    async fn txn(&self, what: &str, txn: Txn, fresh: i64) -> Result<TxnResponse> {
        let sent = unsent::retry(|| {
            let mut client = self.client.clone();
            let txn = txn.clone();
            async move { client.txn(txn).await }
        });
        match sent.await {
            Ok(response) => {
                if !response.succeeded() {
                    self.revoke_later(fresh);
                }
                Ok(response)
            }
            Err(err) => {
                let kind = classify(&err, Op::Write);
                tracing::debug!(%err, ?kind, "{what} failed");
                if kind != ErrorKind::OutcomeUnknown {
                    self.revoke_later(fresh);
                }
                Err(storage_error(kind, what, err))
            }
        }
    }
}

/// The lease of the record a successful transaction replaced or deleted.
fn previous_lease(response: &TxnResponse) -> i64 {
    match response.op_responses().first() {
        Some(TxnOpResponse::Put(put)) => put.prev_key().map_or(0, |kv| kv.lease()),
        Some(TxnOpResponse::Delete(delete)) => delete.prev_kvs().first().map_or(0, |kv| kv.lease()),
        _ => 0,
    }
}

/// How many lease grants a swap tries when the record keeps being
/// rewritten with the value it expects between its grant and its
/// transaction (a concurrent swap of the same value, or a late one).
const SAME_VALUE_ROUNDS: usize = 3;

/// A lease granted for one write, and the store's revision when it was
/// granted.
///
/// The lease's TTL starts on the etcd leader when the grant is applied
/// (through Raft, in order with every write), so a write's expiry is
/// anchored at its grant, *before* the transaction that attaches it is
/// sent. A transaction delayed on its way (a retried renewal whose first
/// attempt lands after the second, transactions of one client reordered
/// by follower forwarding) would otherwise land on a record written after
/// its grant and move its expiry back to `grant + TTL`, earlier than a
/// renewal already acknowledged. [`Grant::unchanged_since`] makes it fail
/// instead: every write it replaces was applied before its lease started.
#[derive(Debug, Clone, Copy)]
struct Grant {
    lease: i64,
    /// The header revision of the grant's answer: every write applied
    /// before the grant has a revision at most this one, every write
    /// after it a higher one.
    revision: i64,
}

impl Grant {
    /// `mod_revision(key) <= revision`: the key was not written since the
    /// lease was granted (an absent key compares as 0).
    fn unchanged_since(&self, key: &str) -> Compare {
        Compare::mod_revision(key, CompareOp::Less, self.revision.saturating_add(1))
    }
}

/// The value the `ELSE` branch of a failed swap read, if the key exists.
fn current_value(response: &TxnResponse) -> Option<Vec<u8>> {
    match response.op_responses().first() {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    }
}

#[async_trait]
impl TtlStorage for EtcdStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        const WHAT: &str = "insert_if_not_exists";
        check_value(value)?;
        // No record to replace, so nothing a late insert could shorten: it
        // lands only on an absent key.
        let lease = self.grant(WHAT, ttl).await?.map_or(0, |g| g.lease);
        let key = self.server_key(key);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        Ok(self.txn(WHAT, txn, lease).await?.succeeded())
    }

    /// `IF value = old AND mod_revision <= (the grant's revision) THEN
    /// put(new, fresh lease) ELSE get`: the second comparison keeps a
    /// transaction delayed on its way from landing on a record written
    /// after its lease was granted (see the crate docs). When only that
    /// one failed (the record still holds `old`, rewritten after the
    /// grant), the swap is tried again with a fresh lease, up to three
    /// times.
    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        const WHAT: &str = "compare_and_swap";
        check_value(old)?;
        check_value(new)?;
        let key = self.server_key(key);
        for _ in 0..SAME_VALUE_ROUNDS {
            let grant = self.grant(WHAT, ttl).await?;
            let lease = grant.map_or(0, |g| g.lease);
            let mut when = vec![Compare::value(key.clone(), CompareOp::Equal, old)];
            if let Some(grant) = grant {
                when.push(grant.unchanged_since(&key));
            }
            let txn = Txn::new()
                .when(when)
                .and_then([TxnOp::put(
                    key.clone(),
                    new,
                    Some(PutOptions::new().with_lease(lease).with_prev_key()),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = self.txn(WHAT, txn, lease).await?;
            if response.succeeded() {
                self.retire_replaced_lease(&response, lease);
                return Ok(true);
            }
            if current_value(&response).as_deref() != Some(old) {
                return Ok(false);
            }
            tracing::debug!(
                key,
                "compare_and_swap: the record was rewritten after the lease grant; granting again"
            );
        }
        Err(StorageError::transient(format!(
            "{WHAT}: the record was rewritten with the same value after each of \
             {SAME_VALUE_ROUNDS} lease grants"
        )))
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        const WHAT: &str = "compare_and_delete";
        check_value(value)?;
        let key = self.server_key(key);
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Equal, value)])
            .and_then([TxnOp::delete(
                key,
                Some(DeleteOptions::new().with_prev_key()),
            )]);
        let response = self.txn(WHAT, txn, 0).await?;
        if response.succeeded() {
            self.revoke_later(previous_lease(&response));
        }
        Ok(response.succeeded())
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        Ok(self.read(key).await?.map(|kv| kv.value().to_vec()))
    }

    /// The value, and the time left on its lease (`LeaseTimeToLive`, whole
    /// seconds; a second call, so the lease may have run out in between:
    /// then zero). A key without a lease never expires.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        let Some(kv) = self.read(key).await? else {
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
        for _ in 0..SAME_VALUE_ROUNDS {
            let current = self.read(write.counter).await?;
            let next = next_count(
                write.counter,
                current.as_ref().map(KeyValue::value),
                write.floor,
                write.max,
            )?;
            let grant = self.grant(WHAT, write.ttl).await?;
            let lease = grant.map_or(0, |g| g.lease);
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
                    if let Some(grant) = grant {
                        when.push(grant.unchanged_since(&key));
                    }
                }
            }
            let txn = Txn::new()
                .when(when)
                .and_then([
                    TxnOp::put(
                        key.clone(),
                        write.value,
                        Some(PutOptions::new().with_lease(lease).with_prev_key()),
                    ),
                    TxnOp::put(counter.clone(), next.to_string(), None),
                ])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = self.txn(WHAT, txn, lease).await?;
            if response.succeeded() {
                self.retire_replaced_lease(&response, lease);
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
            if !watch_until_deleted(client, server_key).await {
                tokio::time::sleep(WATCH_ERROR_PAUSE).await;
            }
        }))
    }
}

impl EtcdStorage {
    /// The key's record as etcd holds it (value and lease), if any.
    async fn read(&self, key: &Key) -> Result<Option<KeyValue>> {
        let server_key = self.server_key(key);
        let mut response = unsent::retry(|| {
            let mut client = self.client.clone();
            let server_key = server_key.clone();
            async move { client.get(server_key, None).await }
        })
        .await
        .map_err(|err| storage_error(classify(&err, Op::Read), "get", err))?;
        Ok(response.take_kvs().into_iter().next())
    }
}

/// A lease's `LeaseTimeToLive` answer in seconds as a time left: -1 means
/// it has expired (since the key was read).
fn lease_time_left(seconds: i64) -> TimeLeft {
    TimeLeft::About(std::time::Duration::from_secs(
        u64::try_from(seconds).unwrap_or(0),
    ))
}

/// How long a failed watch waits before it completes, so that a caller that
/// re-watches at once does not spin while etcd is unreachable.
const WATCH_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Waits for the delete of `key` (true), or returns false on an error.
async fn watch_until_deleted(client: Client, key: String) -> bool {
    let current = match unsent::retry(|| {
        let mut client = client.clone();
        let key = key.clone();
        async move { client.get(key, None).await }
    })
    .await
    {
        Ok(current) => current,
        Err(err) => {
            tracing::debug!(%err, "etcd watch: reading the key failed");
            return false;
        }
    };
    if current.kvs().is_empty() {
        return true;
    }
    // From the next revision: a delete after the read is never missed.
    let from = current.header().map_or(0, |h| h.revision()) + 1;
    let started = unsent::retry(|| {
        let mut client = client.clone();
        let key = key.clone();
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        async move { client.watch(key, Some(options)).await }
    });
    let (_watcher, mut stream) = match started.await {
        Ok(watch) => watch,
        Err(err) => {
            tracing::debug!(%err, "etcd watch: starting the watch failed");
            return false;
        }
    };
    loop {
        match stream.message().await {
            Ok(Some(response)) => {
                if response
                    .events()
                    .iter()
                    .any(|event| event.event_type() == EventType::Delete)
                {
                    return true;
                }
                if response.canceled() {
                    tracing::debug!(reason = response.cancel_reason(), "etcd watch cancelled");
                    return false;
                }
            }
            Ok(None) => return false,
            Err(err) => {
                tracing::debug!(%err, "etcd watch: the stream failed");
                return false;
            }
        }
    }
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
