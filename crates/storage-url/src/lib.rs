//! # storage-url
//!
//! Open any [`ttl_storage::TtlStorage`] driver from a URL, like
//! `object_store::parse_url` or sqlx's `Any` driver: programs (`vvm-host`,
//! the chaos harness, examples) take one `--storage URL` and never match on
//! schemes themselves.
//!
//! | scheme | driver | cargo feature |
//! |---|---|---|
//! | `mem` | `storage-mem`: this process only | always |
//! | `redb:///path/file.redb` | `storage-redb`'s `SharedRedbStorage`: an embedded file that the processes of one host share | `redb` (default) |
//! | `redb:///path/file.redb?mode=exclusive` | `storage-redb`'s `RedbStorage`: one process at a time, group commit | `redb` (default) |
//! | `scylla://[user:pw@]host[:port][,host...]/keyspace[?...]`, `cassandra://` | `storage-cassandra` | `cassandra` (alias: `scylla`) |
//! | `dynamodb://TABLE?region=R[&endpoint=URL...]` | `storage-dynamodb` | `dynamodb` |
//! | `redis://`, `rediss://` (TLS), `valkey://`, `valkeys://` | `storage-valkey` | `valkey` |
//! | `redis-sentinel://s1:26379,s2:26379/service` (also `rediss-`, `valkey-`, `valkeys-sentinel`): the primary found through Sentinels | `storage-valkey` | `valkey` |
//! | `postgres://`, `postgresql://`; several servers `postgres://u:pw@pg-a:5432,pg-b:5432/db` (the one that accepts writes) | `storage-postgres` | `postgres` |
//! | `etcd://`, `etcds://` (TLS); every member `etcd://m1:2379?endpoint=m2:2379&endpoint=m3:2379` | `storage-etcd` | `etcd` |
//! | `kube://NAMESPACE` (the pod's service account or the kubeconfig); `kube://ns?kubeconfig=PATH&context=C`; `kube://ns?server=https://HOST:PORT&ca_file=PATH&token_file=PATH` | `storage-kube` | `kube` |
//!
//! A URL is checked when parsed ([`StorageUrl::from_str`](std::str::FromStr)),
//! so a bad one is a usage error before anything connects; a scheme whose
//! driver is not compiled in says which feature to enable. Shown URLs
//! ([`Display`](std::fmt::Display), errors) never include a password.
//!
//! [`StorageUrl::open`] may create what the store needs (a table, a file:
//! each driver's URL says when); [`StorageUrl::open_existing`] creates
//! nothing and answers [`OpenError::NoStore`] for a store that is not
//! there, for commands that only read.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ttl_storage::{Key, Ttl};
//!
//! let storage = storage_url::open("mem").await?;
//! let key = Key::new("leader")?;
//! assert!(storage.insert_if_not_exists(&key, b"node-1", Ttl::from_secs(20)?).await?);
//!
//! let err = "nope://x".parse::<storage_url::StorageUrl>().unwrap_err();
//! assert!(err.to_string().contains("unknown storage scheme"));
//! println!("{}", storage_url::schemes_help());
//! # Ok(()) }
//! ```

mod error;
mod fence;
mod parse;
mod redact;
mod registry;

use std::{fmt, sync::Arc};

use ttl_storage::{Driver, DriverConfig, DynTtlStorage, Instrumented, NoStore, ParsedUrl};

pub use error::{OpenError, UrlError};
pub use fence::open_fence;

/// A parsed, validated storage URL: the driver it selects and that
/// driver's configuration, parsed once ([`StorageUrl::open`] opens that
/// configuration; nothing parses the text again). Two URLs are equal when
/// they select the same storage (`redb:///a%20b` and `redb:///a b` are).
#[derive(Clone)]
pub struct StorageUrl {
    driver: &'static Driver,
    parsed: ParsedUrl,
    /// The URL as given (may hold a password: never shown).
    raw: String,
}

/// Opens the storage `url` names: parses, validates, connects. The store
/// is instrumented (see [`StorageUrl::open`]).
///
/// # Errors
///
/// [`OpenError`], naming the URL (password redacted) and why.
pub async fn open(url: &str) -> Result<DynTtlStorage, OpenError> {
    let parsed: StorageUrl = url.parse().map_err(|source| OpenError::Url {
        url: redact::redact(url),
        source,
    })?;
    parsed.open().await
}

/// One line per driver compiled into this build, for `--help` texts (the
/// same table as the "unknown scheme" error, which also names the drivers
/// left out and their cargo features).
pub fn schemes_help() -> String {
    registry::built_in()
        .map(|driver| driver.help)
        .collect::<Vec<_>>()
        .join("\n")
}

impl StorageUrl {
    /// The `mem` URL.
    pub fn mem() -> StorageUrl {
        StorageUrl::from_config(&storage_mem::DRIVER, storage_mem::MemConfig::new(), "mem")
    }

    /// A `redb://` URL for a file path, in the shared mode (several
    /// processes of one host may use the file at once).
    #[cfg(feature = "redb")]
    pub fn redb(path: impl Into<std::path::PathBuf>) -> StorageUrl {
        let path = path.into();
        let raw = format!("redb://{}", path.display());
        let config = storage_redb::RedbConfig::new(path, storage_redb::RedbMode::Shared);
        StorageUrl::from_config(&storage_redb::DRIVER, config, &raw)
    }

    /// A URL of `driver` whose configuration is already known.
    fn from_config<C: DriverConfig>(driver: &'static Driver, config: C, raw: &str) -> StorageUrl {
        StorageUrl {
            driver,
            parsed: ParsedUrl::from_config(config),
            raw: raw.to_owned(),
        }
    }

    /// The URL as given, password included: pass it on, never log it (its
    /// [`Display`](fmt::Display) form hides the password).
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The scheme (`mem`, `redb`, `scylla`, `postgres`, ...), as given.
    pub fn scheme(&self) -> &str {
        self.raw
            .split_once("://")
            .map_or("mem", |(scheme, _)| scheme)
    }

    /// The descriptor of the driver this URL selects: its
    /// [`name`](Driver::name) (`mem`, `redb`, `cassandra`, `dynamodb`,
    /// `valkey`, `postgres`, `etcd`) is the engine's one name, the `store`
    /// label of the metrics.
    pub fn driver(&self) -> &'static Driver {
        self.driver
    }

    /// The driver's configuration, parsed from the URL, if it is a `C`
    /// (`storage_redb::RedbConfig` for a `redb://` URL, say): read it
    /// instead of parsing the URL again.
    pub fn config<C: DriverConfig>(&self) -> Option<&C> {
        self.parsed.get::<C>()
    }

    /// The configuration parsed with the URL, as the drivers' descriptors
    /// take it.
    pub(crate) fn parsed(&self) -> &ParsedUrl {
        &self.parsed
    }

    /// The network address (`host:port`) of the engine, for a URL that
    /// names exactly one (a proxy or a firewall rule can then sit in front).
    /// `None` for embedded drivers and for several contact points.
    pub fn endpoint(&self) -> Option<String> {
        (self.driver.endpoint)(&self.parsed)
    }

    /// The same URL with its one network address replaced by `addr`
    /// (`host:port`): the chaos harness routes each contender through its
    /// own fault proxy this way.
    ///
    /// # Errors
    ///
    /// [`UrlError::NoEndpoint`] for embedded drivers or several contact
    /// points; a driver's own error if the result does not validate.
    pub fn with_endpoint(&self, addr: &str) -> Result<StorageUrl, UrlError> {
        let no_endpoint = || UrlError::NoEndpoint {
            url: self.to_string(),
        };
        if self.endpoint().is_none() {
            return Err(no_endpoint());
        }
        (self.driver.with_endpoint)(&self.raw, addr)
            .ok_or_else(no_endpoint)?
            .parse()
    }

    /// Connects to (or opens) the storage, wrapped in
    /// [`ttl_storage::Instrumented`]: every operation records the
    /// `ttl_storage_*` metrics (labelled `store` = the driver's
    /// [`name`](Driver::name)) and a tracing span. What the store needs and
    /// lacks (a table, a file) is created where the URL says so.
    ///
    /// The driver opens the configuration parsed when this URL was: the
    /// text is not parsed again.
    ///
    /// # Errors
    ///
    /// [`OpenError::Connect`] naming the URL (password redacted) and why.
    pub async fn open(&self) -> Result<DynTtlStorage, OpenError> {
        // Boxed (by the descriptor): the drivers' connect futures are deep,
        // and nesting them one level further overflows the layout depth of
        // callers' futures.
        let driver =
            (self.driver.open)(&self.parsed)
                .await
                .map_err(|source| OpenError::Connect {
                    url: self.to_string(),
                    source,
                })?;
        Ok(Arc::new(Instrumented::new(driver, self.driver.name)))
    }

    /// Opens the storage as [`open`](Self::open) does, but **writes nothing
    /// while opening**: no table, keyspace, schema, file or directory is
    /// created, whatever the URL says (the descriptor's
    /// [`open_existing`](Driver::open_existing)). For commands that only
    /// read (`vvm-host status`); a role that may only read can open this
    /// way.
    ///
    /// # Errors
    ///
    /// [`OpenError::NoStore`] when the store the URL names does not exist
    /// (nothing was created); [`OpenError::Connect`] naming the URL
    /// (password redacted) and why for anything else.
    pub async fn open_existing(&self) -> Result<DynTtlStorage, OpenError> {
        let opened = (self.driver.open_existing)(&self.parsed).await;
        let driver = opened.map_err(|source| match NoStore::find(&*source) {
            Some(missing) => OpenError::NoStore {
                url: self.to_string(),
                what: missing.what.clone(),
            },
            None => OpenError::Connect {
                url: self.to_string(),
                source,
            },
        })?;
        Ok(Arc::new(Instrumented::new(driver, self.driver.name)))
    }
}

impl PartialEq for StorageUrl {
    /// The same driver with equal configurations.
    fn eq(&self, other: &Self) -> bool {
        self.parsed == other.parsed
    }
}

impl Eq for StorageUrl {}

impl std::str::FromStr for StorageUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let raw = s.trim();
        let (driver, parsed) = parse::parse(raw)?;
        Ok(StorageUrl {
            driver,
            parsed,
            raw: raw.to_owned(),
        })
    }
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact::redact(&self.raw))
    }
}

impl fmt::Debug for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StorageUrl")
            .field(&self.to_string())
            .finish()
    }
}
