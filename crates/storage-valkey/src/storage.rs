//! [`ValkeyStorage`]: the [`TtlStorage`] implementation.

use async_trait::async_trait;
use fred::{
    bytes::Bytes,
    prelude::{
        Builder, Client, ClientLike, Config, Expiration, KeysInterface, ReconnectPolicy,
        ServerConfig, SetOptions, TcpConfig,
    },
    types::{ConnectHandle, Value},
};
use ttl_storage::{ErrorKind, Key, Result, StorageError, Ttl, TtlStorage, check_value};

use crate::{
    config::ValkeyConfig,
    error::{ConfigError, Op, classify, classify_connect, storage_error},
    scripts::{CAD, CAS, Script},
};

/// Reconnection backoff after a lost connection: first retry at once,
/// then exponential from 100 ms up to 2 s, forever. While disconnected,
/// operations fail fast with a transient error (nothing is sent).
const RECONNECT_MIN_MS: u32 = 100;
const RECONNECT_MAX_MS: u32 = 2_000;

/// A [`TtlStorage`] on one Valkey or Redis (>= 6) server. See the
/// [crate docs](crate) for the commands and guarantees.
///
/// One multiplexed connection serves every operation; it is re-established
/// in the background when lost. Dropping the storage closes it.
pub struct ValkeyStorage {
    client: Client,
    config: ValkeyConfig,
    cas: Script,
    cad: Script,
    task: ConnectHandle,
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
    }
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
            server: ServerConfig::new_centralized(config.host.clone(), config.port),
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
            fred_config.tls = Some(crate::tls::client_config(tls).await?.into());
        }
        let client = Builder::from_config(fred_config)
            .with_connection_config(|c| {
                c.connection_timeout = config.connect_timeout;
                c.internal_command_timeout = config.connect_timeout;
                // Never re-send a command after a lost connection: a
                // conditional write may already have been applied.
                c.max_command_attempts = 1;
                c.tcp = TcpConfig {
                    nodelay: Some(true),
                    ..TcpConfig::default()
                };
            })
            .with_performance_config(|p| p.default_command_timeout = config.request_timeout)
            .set_policy(ReconnectPolicy::new_exponential(
                0,
                RECONNECT_MIN_MS,
                RECONNECT_MAX_MS,
                2,
            ))
            .build()
            .map_err(|err| {
                storage_error(ErrorKind::Permanent, &format!("configuring {url}"), err)
            })?;
        let task = client.init().await.map_err(|err| {
            let kind = classify_connect(&err);
            tracing::debug!(%url, %err, ?kind, "connecting to valkey failed");
            storage_error(kind, &format!("connecting to {url}"), err)
        })?;
        tracing::debug!(%url, prefix = %config.prefix, "valkey storage connected");
        Ok(ValkeyStorage {
            client,
            config,
            cas: Script::new(CAS),
            cad: Script::new(CAD),
            task,
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

    /// The server-side key of `key`: the configured prefix, then the key.
    pub fn server_key(&self, key: &Key) -> String {
        format!("{}{}", self.config.prefix, key)
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
            .run(&self.client, &self.server_key(key), args)
            .await
            .map_err(|err| write_error(what, err))?;
        match reply {
            Value::Integer(1) => Ok(true),
            Value::Integer(0) => Ok(false),
            other => Err(StorageError::outcome_unknown(format!(
                "{what}: unexpected script reply {other:?}"
            ))),
        }
    }
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
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        const WHAT: &str = "insert_if_not_exists";
        check_value(value)?;
        self.ensure_connected(WHAT)?;
        let expire = match ttl_millis(ttl) {
            0 => None,
            ms => Some(Expiration::PX(i64::try_from(ms).unwrap_or(i64::MAX))),
        };
        let reply: Value = self
            .client
            .set(
                self.server_key(key),
                bytes(value),
                expire,
                Some(SetOptions::NX),
                false,
            )
            .await
            .map_err(|err| write_error(WHAT, err))?;
        match reply {
            Value::Null => Ok(false),
            Value::String(ref ok) if &**ok == "OK" => Ok(true),
            other => Err(StorageError::outcome_unknown(format!(
                "{WHAT}: unexpected reply {other:?}"
            ))),
        }
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        let args = vec![
            bytes(old),
            bytes(new),
            Value::String(ttl_millis(ttl).to_string().into()),
        ];
        self.run_script("compare_and_swap", &self.cas, key, args)
            .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        self.run_script("compare_and_delete", &self.cad, key, vec![bytes(value)])
            .await
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
}
