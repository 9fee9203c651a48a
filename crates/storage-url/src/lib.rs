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
//! | `scylla://[user:pw@]host[:port][,host...]/keyspace[?...]`, `cassandra://` | `storage-scylla` | `scylla` |
//! | `dynamodb://TABLE?region=R[&endpoint=URL...]` | `storage-dynamo` | `dynamodb` |
//! | `redis://`, `rediss://` (TLS), `valkey://`, `valkeys://` | `storage-valkey` | `valkey` |
//! | `redis-sentinel://s1:26379,s2:26379/service` (also `rediss-`, `valkey-`, `valkeys-sentinel`): the primary found through Sentinels | `storage-valkey` | `valkey` |
//! | `postgres://`, `postgresql://`; several servers `postgres://u:pw@pg-a:5432,pg-b:5432/db` (the one that accepts writes) | `storage-postgres` | `postgres` |
//! | `etcd://`, `etcds://` (TLS); every member `etcd://m1:2379?endpoint=m2:2379&endpoint=m3:2379` | `storage-etcd` | `etcd` |
//!
//! A URL is checked when parsed ([`StorageUrl::from_str`](std::str::FromStr)),
//! so a bad one is a usage error before anything connects; a scheme whose
//! driver is not compiled in says which feature to enable. Shown URLs
//! ([`Display`](std::fmt::Display), errors) never include a password.
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
mod schemes;

use std::{fmt, sync::Arc};

use ttl_storage::{DynTtlStorage, Instrumented};

pub use error::{OpenError, UrlError};
pub use fence::open_fence;

/// A parsed, validated storage URL. Two URLs are equal when they select
/// the same storage (`redb:///a%20b` and `redb:///a b` are).
#[derive(Clone, Eq)]
pub struct StorageUrl {
    kind: Kind,
    /// The URL as given (may hold a password: never shown).
    raw: String,
}

/// The driver a URL selects.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Mem(storage_mem::MemConfig),
    #[cfg(feature = "redb")]
    Redb {
        path: std::path::PathBuf,
        /// Several processes (`SharedRedbStorage`) or one (`RedbStorage`).
        shared: bool,
    },
    #[cfg(feature = "scylla")]
    Scylla,
    #[cfg(feature = "dynamodb")]
    Dynamo,
    #[cfg(feature = "valkey")]
    Valkey,
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "etcd")]
    Etcd,
}

/// The engine a URL names, for programs that talk to the same engine
/// beside the storage (the chaos harness's guarded table, say) without
/// matching on schemes themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Engine {
    /// `mem`.
    Mem,
    /// `redb://`.
    Redb,
    /// `scylla://`, `cassandra://`.
    Cassandra,
    /// `dynamodb://`.
    DynamoDb,
    /// `redis://`, `rediss://`, `valkey://`, `valkeys://`, `redis-sentinel://`, ...
    Valkey,
    /// `postgres://`, `postgresql://`.
    Postgres,
    /// `etcd://`, `etcds://`.
    Etcd,
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
    schemes::DRIVERS
        .iter()
        .filter(|driver| driver.built_in)
        .map(|driver| driver.help)
        .collect::<Vec<_>>()
        .join("\n")
}

impl StorageUrl {
    /// The `mem` URL.
    pub fn mem() -> StorageUrl {
        StorageUrl {
            kind: Kind::Mem(storage_mem::MemConfig::new()),
            raw: "mem".to_owned(),
        }
    }

    /// A `redb://` URL for a file path, in the shared mode (several
    /// processes of one host may use the file at once).
    #[cfg(feature = "redb")]
    pub fn redb(path: impl Into<std::path::PathBuf>) -> StorageUrl {
        let path = path.into();
        StorageUrl {
            raw: format!("redb://{}", path.display()),
            kind: Kind::Redb { path, shared: true },
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

    /// The engine this URL names.
    pub fn engine(&self) -> Engine {
        match &self.kind {
            Kind::Mem(_) => Engine::Mem,
            #[cfg(feature = "redb")]
            Kind::Redb { .. } => Engine::Redb,
            #[cfg(feature = "scylla")]
            Kind::Scylla => Engine::Cassandra,
            #[cfg(feature = "dynamodb")]
            Kind::Dynamo => Engine::DynamoDb,
            #[cfg(feature = "valkey")]
            Kind::Valkey => Engine::Valkey,
            #[cfg(feature = "postgres")]
            Kind::Postgres => Engine::Postgres,
            #[cfg(feature = "etcd")]
            Kind::Etcd => Engine::Etcd,
        }
    }

    /// The network address (`host:port`) of the engine, for a URL that
    /// names exactly one (a proxy or a firewall rule can then sit in front).
    /// `None` for embedded drivers and for several contact points.
    pub fn endpoint(&self) -> Option<String> {
        parse::endpoint(&self.kind, &self.raw)
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
        parse::with_endpoint(&self.kind, &self.raw, addr)?.parse()
    }

    /// Connects to (or opens) the storage, wrapped in
    /// [`ttl_storage::Instrumented`]: every operation records the
    /// `ttl_storage_*` metrics (labelled `store` = [`Engine::label`]) and a
    /// tracing span.
    ///
    /// # Errors
    ///
    /// [`OpenError::Connect`] naming the URL (password redacted) and why.
    pub async fn open(&self) -> Result<DynTtlStorage, OpenError> {
        // Boxed: the drivers' connect futures are deep, and nesting them one
        // level further overflows the layout depth of callers' futures.
        let driver = Box::pin(self.open_driver()).await?;
        Ok(Arc::new(Instrumented::new(driver, self.engine().label())))
    }

    /// The driver itself, not instrumented.
    async fn open_driver(&self) -> Result<DynTtlStorage, OpenError> {
        // Unused when no driver but mem is built.
        #[cfg_attr(
            not(any(
                feature = "redb",
                feature = "scylla",
                feature = "dynamodb",
                feature = "valkey",
                feature = "postgres",
                feature = "etcd"
            )),
            allow(unused_variables)
        )]
        let connect = |source: Box<dyn std::error::Error + Send + Sync>| OpenError::Connect {
            url: self.to_string(),
            source,
        };
        match &self.kind {
            Kind::Mem(config) => Ok(Arc::new(storage_mem::MemStorage::with_config(
                config.clone(),
            ))),
            #[cfg(feature = "redb")]
            Kind::Redb { path, shared: true } => {
                match storage_redb::SharedRedbStorage::open(path).await {
                    Ok(storage) => Ok(Arc::new(storage)),
                    Err(err) => Err(connect(Box::new(err))),
                }
            }
            #[cfg(feature = "redb")]
            Kind::Redb {
                path,
                shared: false,
            } => match storage_redb::RedbStorage::open(path).await {
                Ok(storage) => Ok(Arc::new(storage)),
                Err(err) => Err(connect(Box::new(err))),
            },
            #[cfg(feature = "scylla")]
            Kind::Scylla => match storage_scylla::ScyllaStorage::from_url(&self.raw).await {
                Ok(storage) => Ok(Arc::new(storage)),
                Err(err) => Err(connect(Box::new(err))),
            },
            #[cfg(feature = "valkey")]
            Kind::Valkey => match storage_valkey::ValkeyStorage::from_url(&self.raw).await {
                Ok(storage) => Ok(Arc::new(storage)),
                Err(err) => Err(connect(Box::new(err))),
            },
            #[cfg(feature = "postgres")]
            Kind::Postgres => match storage_postgres::PostgresStorage::from_url(&self.raw).await {
                Ok(storage) => Ok(Arc::new(storage)),
                Err(err) => Err(connect(Box::new(err))),
            },
            #[cfg(feature = "etcd")]
            Kind::Etcd => match storage_etcd::EtcdStorage::from_url(&self.raw).await {
                Ok(storage) => Ok(Arc::new(storage)),
                Err(err) => Err(connect(Box::new(err))),
            },
            #[cfg(feature = "dynamodb")]
            Kind::Dynamo => {
                let config = storage_dynamo::DynamoConfig::from_url(&self.raw)
                    .map_err(|err| connect(Box::new(err)))?;
                match storage_dynamo::DynamoStorage::connect(config).await {
                    Ok(storage) => Ok(Arc::new(storage)),
                    Err(err) => Err(connect(Box::new(err))),
                }
            }
        }
    }
}

impl Engine {
    /// A short lowercase name (`mem`, `redb`, `cassandra`, `dynamodb`,
    /// `valkey`, `postgres`, `etcd`): the `store` label of the metrics.
    pub fn label(self) -> &'static str {
        match self {
            Engine::Mem => "mem",
            Engine::Redb => "redb",
            Engine::Cassandra => "cassandra",
            Engine::DynamoDb => "dynamodb",
            Engine::Valkey => "valkey",
            Engine::Postgres => "postgres",
            Engine::Etcd => "etcd",
        }
    }
}

impl PartialEq for StorageUrl {
    fn eq(&self, other: &Self) -> bool {
        match (&self.kind, &other.kind) {
            (Kind::Mem(a), Kind::Mem(b)) => a == b,
            #[cfg(feature = "redb")]
            (Kind::Redb { .. }, Kind::Redb { .. }) => self.kind == other.kind,
            // Unreachable when no driver but mem is built.
            #[allow(unreachable_patterns)]
            (a, b) => a == b && self.raw == other.raw,
        }
    }
}

impl std::str::FromStr for StorageUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let raw = s.trim();
        let kind = parse::kind(raw)?;
        Ok(StorageUrl {
            kind,
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
