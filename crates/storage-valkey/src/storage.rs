//! [`ValkeyStorage`]: the [`TtlStorage`] implementation.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use fred::{
    bytes::Bytes,
    prelude::{
        Builder, Client, ClientLike, Config, KeysInterface, ReconnectPolicy, ServerConfig,
        TcpConfig,
    },
    types::{ConnectHandle, Value},
};
use ttl_storage::waiters::Waiters;
use ttl_storage::{
    Changes, ChangesUnsupported, Counted, CountedWrite, Entry, ErrorKind, Key, Result,
    StorageError, TimeLeft, Ttl, TtlStorage, Watch, WatchUnsupported, check_value,
};

use crate::{
    config::ValkeyConfig,
    error::{ConfigError, Op, classify, classify_connect, storage_error},
    scripts::{CAD, CAS, COUNTED, ENTRY, INSERT, Script},
    watch::{Subscriber, watch_channel, watch_key},
};

/// Reconnection backoff after a lost connection: exponential from 100 ms
/// up to 500 ms (plus fred's jitter, up to 100 ms), forever. While
/// disconnected, operations fail fast with a transient error (nothing is
/// sent). The ceiling bounds how long a client stays away from a server
/// that is back, or, behind Sentinel, from a promoted replica once a
/// Sentinel names it (with a 2 s ceiling, clients of a 60 s chaos run came
/// back 2.5-3.5 s after a promotion); a reconnection attempt is
/// one connection (and, behind Sentinel, one `SENTINEL
/// get-master-addr-by-name`), cheap at two a second.
const RECONNECT_MIN_MS: u32 = 100;
const RECONNECT_MAX_MS: u32 = 500;

/// A [`TtlStorage`] on one Valkey or Redis (>= 6) server. See the
/// [crate docs](crate) for the commands and guarantees.
///
/// One multiplexed connection serves every operation; it is re-established
/// in the background when lost. Dropping the storage closes it.
pub struct ValkeyStorage {
    client: Client,
    config: ValkeyConfig,
    insert: Script,
    cas: Script,
    cad: Script,
    counted: Script,
    entry: Script,
    task: ConnectHandle,
    /// The channel the compare-and-delete script publishes deleted keys on.
    channel: String,
    /// The waiters of [`TtlStorage::watch`]; never ready without a subscriber.
    waiters: Arc<Waiters>,
    /// The connection subscribed to `channel`, when it could be built.
    subscriber: Option<Subscriber>,
}

impl std::fmt::Debug for ValkeyStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValkeyStorage")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Drop for ValkeyStorage {
    fn drop(&mut self) {
        // The connection task would otherwise reconnect forever.
        self.task.abort();
        if let Some(subscriber) = &self.subscriber {
            subscriber.task.abort();
            subscriber.hub.abort();
        }
        // Pending watches complete (their waiters re-check and fail), and
        // followers are told the feed is down.
        self.waiters.set_ready(false);
        if let Some(subscriber) = &self.subscriber {
            subscriber.feeds.set_ready(false);
        }
    }
}

/// A fred client with this driver's connection settings: no command ever
/// re-sent, Nagle off, the request timeout, exponential reconnection.
fn build_client(config: &ValkeyConfig, fred_config: Config) -> Result<Client> {
    Builder::from_config(fred_config)
        .with_connection_config(|c| {
            c.connection_timeout = config.options.connect_timeout;
            c.internal_command_timeout = config.options.connect_timeout;
            // Never re-send a command after a lost connection: a
            // conditional write may already have been applied.
            c.max_command_attempts = 1;
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            };
        })
        .with_performance_config(|p| p.default_command_timeout = config.options.request_timeout)
        .set_policy(ReconnectPolicy::new_exponential(
            0,
            RECONNECT_MIN_MS,
            RECONNECT_MAX_MS,
            2,
        ))
        .build()
        .map_err(|err| {
            storage_error(
                ErrorKind::Permanent,
                &format!("configuring {}", config.redacted_url()),
                err,
            )
        })
}

impl ValkeyStorage {
    /// Parses `url` (see [`ValkeyConfig::from_url`]) and [connects](Self::connect).
    pub async fn from_url(url: &str) -> Result<Self> {
        let config = ValkeyConfig::from_url(url).map_err(|err: ConfigError| {
            StorageError::with_source(ErrorKind::Permanent, "bad Valkey URL", err)
        })?;
        Self::connect(config).await
    }

    /// Connects (TLS handshake, `AUTH`, `SELECT` included) and waits until
    /// the server answers.
    ///
    /// Errors: [`ErrorKind::Transient`] when the server cannot be reached;
    /// [`ErrorKind::Permanent`] for bad credentials, a TLS failure (for
    /// instance a `rediss://` URL pointing at a plaintext port) or a bad
    /// CA file.
    pub async fn connect(config: ValkeyConfig) -> Result<Self> {
        let url = config.redacted_url();
        let mut fred_config = Config {
            server: match &config.sentinel {
                Some(s) => ServerConfig::new_sentinel(s.sentinels.clone(), s.service.clone()),
                None => ServerConfig::new_centralized(config.host.clone(), config.port),
            },
            database: config.database,
            // report the first connection's error instead of retrying it
            fail_fast: true,
            ..Config::default()
        };
        if let Some(credentials) = &config.credentials {
            fred_config.username = credentials.user.clone();
            fred_config.password = Some(credentials.password.clone());
        }
        if let Some(tls) = &config.tls {
            fred_config.tls = Some(
                ttl_storage::kit::tls::client_config(tls.ca_file.as_deref(), "tls_ca_file")
                    .await?
                    .into(),
            );
        }
        let client = build_client(&config, fred_config.clone())?;
        let task = match client.init().await {
            Ok(task) => task,
            Err(err) => return Err(connect_failed(&config, &url, err).await),
        };
        tracing::debug!(%url, prefix = %config.options.prefix, "valkey storage connected");
        let channel = watch_channel(&config.options.prefix);
        let subscriber = match build_client(&config, fred_config) {
            Ok(sub) => Some(
                Subscriber::start(
                    sub,
                    client.clone(),
                    channel.clone(),
                    config.options.connect_timeout,
                )
                .await,
            ),
            Err(err) => {
                tracing::warn!(%url, %err, "valkey watch: no subscriber client; waiters will poll");
                None
            }
        };
        let waiters = subscriber
            .as_ref()
            .map_or_else(Default::default, |sub| Arc::clone(&sub.waiters));
        Ok(ValkeyStorage {
            client,
            config,
            insert: Script::new(INSERT),
            cas: Script::new(CAS),
            cad: Script::new(CAD),
            counted: Script::new(COUNTED),
            entry: Script::new(ENTRY),
            task,
            channel,
            waiters,
            subscriber,
        })
    }

    /// The configuration this storage was connected with.
    pub fn config(&self) -> &ValkeyConfig {
        &self.config
    }

    /// The fred client, for callers that want to share the connection.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The channel on which compare-and-delete publishes the server key it
    /// deleted (`<prefix>__deleted`), which [`TtlStorage::watch`] listens to.
    pub fn watch_channel(&self) -> &str {
        &self.channel
    }

    /// The server-side key of `key`: the configured prefix, then the key.
    pub fn server_key(&self, key: &Key) -> String {
        format!("{}{}", self.config.options.prefix, key)
    }

    /// With [`ValkeyConfig::wait_replicas`], waits until the replicas have
    /// the write just applied (outcome unknown if they do not confirm it).
    async fn confirm(&self, what: &str) -> Result<()> {
        match self.config.wait {
            Some(wait) => crate::replication::confirm(&self.client, wait, what).await,
            None => Ok(()),
        }
    }

    /// Fails fast, without sending anything, while the connection is down:
    /// the operation was certainly not applied.
    fn ensure_connected(&self, what: &str) -> Result<()> {
        if self.client.is_connected() {
            return Ok(());
        }
        Err(StorageError::transient(format!(
            "{what}: not connected to {} (reconnecting)",
            self.config.redacted_url()
        )))
    }

    /// Runs a conditional-write script whose reply is 1 (applied) or 0.
    async fn run_script(
        &self,
        what: &str,
        script: &Script,
        key: &Key,
        args: Vec<Value>,
    ) -> Result<bool> {
        self.ensure_connected(what)?;
        let reply = script
            .run::<Value, _, _>(&self.client, self.server_key(key), args)
            .await
            .map_err(|err| write_error(what, err))?;
        match reply {
            Value::Integer(1) => self.confirm(what).await.map(|()| true),
            Value::Integer(0) => Ok(false),
            other => Err(StorageError::outcome_unknown(format!(
                "{what}: unexpected script reply {other:?}"
            ))),
        }
    }
}

/// The entry script's reply: nil, or `{value, pttl}`.
fn entry_from_reply(reply: Value) -> Result<Option<Entry>> {
    let unexpected =
        |reply: &Value| StorageError::permanent(format!("get: unexpected reply {reply:?}"));
    let Value::Array(items) = reply else {
        return match reply {
            Value::Null => Ok(None),
            other => Err(unexpected(&other)),
        };
    };
    let (value, pttl) = match items.as_slice() {
        [Value::Bytes(value), Value::Integer(pttl)] => (value.to_vec(), *pttl),
        [Value::String(value), Value::Integer(pttl)] => (value.as_bytes().to_vec(), *pttl),
        _ => return Err(unexpected(&Value::Array(items))),
    };
    let time_left = match u64::try_from(pttl) {
        Ok(ms) => TimeLeft::About(Duration::from_millis(ms)),
        // -1: no expiry (-2, no key, cannot follow a GET that found it).
        Err(_) if pttl == -1 => TimeLeft::Never,
        Err(_) => TimeLeft::Unknown,
    };
    Ok(Some(Entry { value, time_left }))
}

/// The error of a conditional write, classified and logged.
fn write_error(what: &str, err: fred::error::Error) -> StorageError {
    let kind = classify(&err, Op::Write);
    tracing::debug!(%err, ?kind, "{what} failed");
    storage_error(kind, what, err)
}

/// `value` as a binary-safe command argument.
fn bytes(value: &[u8]) -> Value {
    Value::Bytes(Bytes::copy_from_slice(value))
}

/// The TTL in milliseconds, `0` for [`Ttl::NEVER`].
pub(crate) fn ttl_millis(ttl: Ttl) -> u64 {
    ttl.as_secs().saturating_mul(1000)
}

#[async_trait]
impl TtlStorage for ValkeyStorage {
    /// One script (`INSERT`): `SET NX` (with `PX`), and the new value
    /// published for the followers of [`TtlStorage::changes`].
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(value)?;
        let args = vec![
            bytes(value),
            Value::String(ttl_millis(ttl).to_string().into()),
            Value::String(self.channel.as_str().into()),
        ];
        self.run_script("insert_if_not_exists", &self.insert, key, args)
            .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        let args = vec![
            bytes(old),
            bytes(new),
            Value::String(ttl_millis(ttl).to_string().into()),
            Value::String(self.channel.as_str().into()),
        ];
        self.run_script("compare_and_swap", &self.cas, key, args)
            .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        let args = vec![bytes(value), Value::String(self.channel.as_str().into())];
        self.run_script("compare_and_delete", &self.cad, key, args)
            .await
    }

    /// One script (`COUNTED`): the record's condition, the counter's
    /// advance and both writes, atomically on the server.
    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        const WHAT: &str = "write_counted";
        if let Some(old) = write.expected {
            check_value(old)?;
        }
        check_value(write.value)?;
        self.ensure_connected(WHAT)?;
        let text = |n: u64| Value::String(n.to_string().into());
        let args = vec![
            text(u64::from(write.expected.is_some())),
            bytes(write.expected.unwrap_or_default()),
            bytes(write.value),
            text(ttl_millis(write.ttl)),
            text(write.floor.min(write.max)),
            text(write.max),
            Value::String(self.channel.as_str().into()),
        ];
        let keys = vec![self.server_key(write.key), self.server_key(write.counter)];
        let reply = self
            .counted
            .run::<Value, _, _>(&self.client, keys, args)
            .await
            .map_err(|err| write_error(WHAT, err))?;
        let counter = write.counter;
        match reply {
            Value::Integer(0) => Ok(Counted::Refused),
            Value::Integer(-1) => Err(StorageError::permanent(format!(
                "{WHAT}: counter {counter} is not a decimal u64: the record was written by something else"
            ))),
            Value::Integer(-2) => Err(StorageError::permanent(format!(
                "{WHAT}: counter {counter} is exhausted (max {})",
                write.max
            ))),
            Value::Array(items) => {
                let n = match items.as_slice() {
                    [Value::Integer(1), Value::String(n)] => n.parse::<u64>().ok(),
                    [Value::Integer(1), Value::Bytes(n)] => std::str::from_utf8(n)
                        .ok()
                        .and_then(|n| n.parse::<u64>().ok()),
                    _ => None,
                };
                match n {
                    Some(n) => self.confirm(WHAT).await.map(|()| Counted::Written(n)),
                    None => Err(StorageError::outcome_unknown(format!(
                        "{WHAT}: unexpected script reply {items:?}"
                    ))),
                }
            }
            other => Err(StorageError::outcome_unknown(format!(
                "{WHAT}: unexpected script reply {other:?}"
            ))),
        }
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.ensure_connected("get")?;
        let reply: Value = self.client.get(self.server_key(key)).await.map_err(|err| {
            let kind = classify(&err, Op::Read);
            tracing::debug!(%err, ?kind, "get failed");
            storage_error(kind, "get", err)
        })?;
        match reply {
            Value::Null => Ok(None),
            Value::Bytes(b) => Ok(Some(b.to_vec())),
            Value::String(s) => Ok(Some(s.as_bytes().to_vec())),
            other => Err(StorageError::permanent(format!(
                "get: unexpected reply {other:?}"
            ))),
        }
    }

    /// The value and its `PTTL`, read by one script (so both describe the
    /// same record): [`TimeLeft::About`] to the millisecond, or
    /// [`TimeLeft::Never`] for a record without expiry.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        self.ensure_connected("get")?;
        let reply = self
            .entry
            .run::<Value, _, _>(&self.client, self.server_key(key), Vec::<Value>::new())
            .await
            .map_err(|err| {
                let kind = classify(&err, Op::Read);
                tracing::debug!(%err, ?kind, "get_entry failed");
                storage_error(kind, "get", err)
            })?;
        entry_from_reply(reply)
    }

    /// Registers a waiter of the key with the subscriber, then (in the
    /// future) reads the key's `PTTL`: completes at once when the key is
    /// absent, when compare-and-delete publishes the key (same script as
    /// the `DEL`, so atomically with it), 1 ms after the `PTTL` read (its
    /// expiry as the server reported it), or when the subscriber connection
    /// fails. Answers [`WatchUnsupported`] while the subscriber is not
    /// subscribed (connecting, or refused the channel): the caller polls.
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        watch_key(&self.client, &self.waiters, self.server_key(key))
    }

    /// The messages the writes publish on the storage's channel
    /// (see the crate docs), as the subscriber receives them: every new
    /// value (with its count for a counted write) and every delete; expiry
    /// is not reported. Armed once the subscription is proven by a probe;
    /// interrupted while it is down. Without a subscriber client it is not
    /// supported.
    fn changes(
        &self,
        key: &Key,
        _counter: Option<&Key>,
    ) -> std::result::Result<Changes, ChangesUnsupported> {
        let subscriber = self.subscriber.as_ref().ok_or(ChangesUnsupported)?;
        Ok(subscriber.feeds.subscribe(self.server_key(key)))
    }
}

/// The error of a failed first connection. A TLS connection to a server
/// that speaks plaintext fails late and vaguely (the server waits for a
/// command's end of line: fred says "Request timed out"); a plaintext
/// `PING` to the same address tells it, and then that is what is said.
async fn connect_failed(config: &ValkeyConfig, url: &str, err: fred::error::Error) -> StorageError {
    let what = format!("connecting to {url}");
    let plaintext_server = config.tls.is_some()
        && config.sentinel.is_none()
        && !matches!(err.kind(), fred::error::ErrorKind::Auth)
        && ttl_storage::kit::tls::answers_in_plaintext(
            &config.host,
            config.port,
            b"PING\r\n",
            std::time::Duration::from_secs(2),
        )
        .await;
    if plaintext_server {
        tracing::debug!(%url, %err, "the server answered a plaintext PING: it does not speak TLS");
        return StorageError::permanent(format!(
            "{what} failed: the server does not speak TLS (it answers in plaintext); \
             use redis:// or valkey:// for it, or enable TLS on the server"
        ));
    }
    let kind = classify_connect(&err);
    tracing::debug!(%url, %err, ?kind, "connecting to valkey failed");
    storage_error(kind, &what, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_in_milliseconds() {
        assert_eq!(ttl_millis(Ttl::NEVER), 0);
        assert_eq!(ttl_millis(Ttl::from_secs(20).unwrap()), 20_000);
        let max = Ttl::new(ttl_storage::MAX_TTL).unwrap();
        assert_eq!(ttl_millis(max), ttl_storage::MAX_TTL.as_millis() as u64);
    }

    #[test]
    fn entry_replies() {
        let value = || Value::Bytes(b"a\0".to_vec().into());
        assert_eq!(entry_from_reply(Value::Null).unwrap(), None);
        let entry = entry_from_reply(Value::Array(vec![value(), Value::Integer(1500)]))
            .unwrap()
            .unwrap();
        assert_eq!(entry.value, b"a\0".to_vec());
        assert_eq!(
            entry.time_left,
            TimeLeft::About(Duration::from_millis(1500))
        );
        let entry = entry_from_reply(Value::Array(vec![value(), Value::Integer(-1)]))
            .unwrap()
            .unwrap();
        assert_eq!(entry.time_left, TimeLeft::Never);
        assert!(entry_from_reply(Value::Integer(3)).is_err());
        assert!(entry_from_reply(Value::Array(vec![value()])).is_err());
    }
}
