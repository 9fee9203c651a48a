//! The driver descriptor: how a driver crate declares itself once, the way
//! sqlx's `AnyDriver` does.
//!
//! Each driver crate exports one `pub const DRIVER: Driver`, built by
//! [`Driver::new`] from its configuration type (a [`DriverConfig`]): its
//! name, URL schemes, `--help` line, default port and the function
//! pointers a registry calls: [`Driver::parse`] (a URL to an opaque
//! [`ParsedUrl`]), [`Driver::open`] (that parsed configuration to a
//! [`DynTtlStorage`]), [`Driver::open_existing`] (the same, creating
//! nothing: a missing store is [`NoStore`]), [`Driver::endpoint`] (the one
//! `host:port` it connects to, for display and proxies) and, for a driver
//! that fences ([`Driver::with_fence`]), [`Driver::open_fence`]. A
//! registry (the `storage-url` crate) is then a list of these constants.
//!
//! A URL is parsed once: [`Driver::open`] takes the [`ParsedUrl`], not the
//! text, so nothing on the way to `connect` can parse it again.
//!
//! ```
//! use std::sync::Arc;
//! use ttl_storage::{
//!     BoxError, Driver, DriverConfig, DynTtlStorage, FenceConfig,
//!     fence::{DynFence, OpenOptions},
//! };
//!
//! /// The configuration a URL `demo://N` selects.
//! #[derive(Debug, Clone, PartialEq)]
//! struct DemoConfig(u32);
//!
//! impl DriverConfig for DemoConfig {
//!     fn parse_url(url: &str) -> Result<Self, BoxError> {
//!         let n = url.strip_prefix("demo://").ok_or("not demo://")?;
//!         Ok(DemoConfig(n.parse()?))
//!     }
//!
//!     async fn open(self) -> Result<DynTtlStorage, BoxError> {
//!         Ok(Arc::new(storage_mem::MemStorage::new()) as DynTtlStorage)
//!     }
//!
//!     async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
//!         // Nothing to create: opening is reading.
//!         self.open().await
//!     }
//! }
//!
//! impl FenceConfig for DemoConfig {
//!     async fn open_fence(self, _options: OpenOptions) -> ttl_storage::Result<DynFence> {
//!         Err(ttl_storage::StorageError::permanent("this demo has no fence"))
//!     }
//! }
//!
//! const DRIVER: Driver =
//!     Driver::new::<DemoConfig>("demo", &["demo"], "demo://N", None).with_fence::<DemoConfig>();
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let parsed = (DRIVER.parse)("demo://7")?;
//! assert_eq!(parsed.get::<DemoConfig>(), Some(&DemoConfig(7)));
//! let _storage = (DRIVER.open)(&parsed).await?;
//! assert_eq!((DRIVER.endpoint)(&parsed), None);
//! assert!(DRIVER.open_fence.is_some());
//! assert!((DRIVER.parse)("demo://x").is_err());
//! # Ok(()) }
//! ```

use std::{any::Any, fmt, future::Future, pin::Pin, sync::Arc};

use crate::{
    BoxError, DynTtlStorage, ErrorKind, StorageError,
    fence::{DynFence, OpenOptions},
};

/// The future [`Driver::open`] returns.
pub type OpenFuture = Pin<Box<dyn Future<Output = Result<DynTtlStorage, BoxError>> + Send>>;

/// The future [`Driver::open_fence`] returns.
pub type OpenFenceFuture = Pin<Box<dyn Future<Output = crate::Result<DynFence>> + Send>>;

/// What a read-only open ([`Driver::open_existing`]) found instead of a
/// store: the table, keyspace or file the URL names does not exist.
/// Nothing was created. Drivers return it (boxed) from
/// [`DriverConfig::open_existing`]; registries find it in the error's
/// source chain with [`NoStore::find`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} does not exist")]
pub struct NoStore {
    /// What is missing (`table ttl_records`, `file /var/lib/x.redb`, ...).
    pub what: String,
}

impl NoStore {
    /// `what` does not exist.
    pub fn new(what: impl Into<String>) -> NoStore {
        NoStore { what: what.into() }
    }

    /// The [`NoStore`] in `err` or its chain of sources, if any.
    pub fn find<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a NoStore> {
        let mut next = Some(err);
        while let Some(err) = next {
            if let Some(found) = err.downcast_ref::<NoStore>() {
                return Some(found);
            }
            next = err.source();
        }
        None
    }
}

/// What a driver's configuration type provides to its [`Driver`]: parse a
/// URL, connect, and say which one network address it names.
///
/// Implemented by `MemConfig`, `RedbConfig`, `CassandraConfig`,
/// `DynamoDbConfig`, `ValkeyConfig`, `PostgresConfig` and `EtcdConfig`:
/// [`parse_url`](DriverConfig::parse_url) forwards to the type's own
/// `XConfig::from_url`, [`open`](DriverConfig::open) to the storage's
/// `XStorage::connect(config)`.
pub trait DriverConfig: Clone + PartialEq + fmt::Debug + Send + Sync + 'static {
    /// Parses and validates `url`; nothing connects.
    ///
    /// # Errors
    ///
    /// The driver's reason the URL is unusable.
    fn parse_url(url: &str) -> Result<Self, BoxError>;

    /// Connects to (or opens) the storage this configuration names,
    /// creating what it needs (a table, a file) where the configuration
    /// says so.
    fn open(self) -> impl Future<Output = Result<DynTtlStorage, BoxError>> + Send;

    /// Connects to the storage this configuration names **without writing
    /// anything at open**: no table, keyspace, schema, file or directory is
    /// created, whatever the configuration says; a store that does not
    /// exist is a [`NoStore`] error (in the returned error's source chain).
    /// Read-only commands (`vvm-host status`) open stores this way.
    fn open_existing(self) -> impl Future<Output = Result<DynTtlStorage, BoxError>> + Send;

    /// The one network address (`host:port`) this configuration connects
    /// to, if it names exactly one: a proxy or a firewall rule can then sit
    /// in front. `None` (the default) for embedded drivers and for several
    /// servers.
    fn single_endpoint(&self) -> Option<String> {
        None
    }

    /// `url` (which this driver accepted) with its one network address
    /// replaced by `addr` (`host:port`); `None` (the default) when the URL
    /// names no single address.
    fn with_endpoint(url: &str, addr: &str) -> Option<String> {
        let _ = (url, addr);
        None
    }
}

/// A URL a [`Driver`] accepted: its configuration, parsed once, behind a
/// type the registry does not need to know. Cheap to clone.
#[derive(Clone)]
pub struct ParsedUrl {
    /// The configuration type of the driver that parsed it.
    driver: &'static str,
    config: Arc<dyn AnyConfig>,
}

/// The object-safe side of a [`DriverConfig`].
trait AnyConfig: Any + Send + Sync + fmt::Debug {
    fn as_any(&self) -> &dyn Any;
    fn same(&self, other: &dyn Any) -> bool;
}

impl<C: DriverConfig> AnyConfig for C {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<C>() == Some(self)
    }
}

impl ParsedUrl {
    /// A configuration built without a URL (a registry's shortcut such as
    /// `StorageUrl::mem()`), opened as if its driver had parsed it.
    pub fn from_config<C: DriverConfig>(config: C) -> ParsedUrl {
        ParsedUrl {
            driver: type_name::<C>(),
            config: Arc::new(config),
        }
    }

    /// The configuration type of the driver that parsed the URL.
    pub fn driver(&self) -> &'static str {
        self.driver
    }

    /// The configuration, if it is a `C`.
    pub fn get<C: DriverConfig>(&self) -> Option<&C> {
        self.config.as_any().downcast_ref::<C>()
    }
}

impl PartialEq for ParsedUrl {
    /// Same driver, equal configurations.
    fn eq(&self, other: &Self) -> bool {
        self.driver == other.driver && self.config.same(other.config.as_any())
    }
}

impl fmt::Debug for ParsedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParsedUrl")
            .field("driver", &self.driver)
            .field("config", &self.config)
            .finish()
    }
}

/// A [`ParsedUrl`] handed to a driver that did not parse it.
#[derive(Debug, thiserror::Error)]
#[error("a {given} configuration cannot be opened by the {driver} driver")]
pub struct WrongDriver {
    /// The configuration type of the driver asked to open it.
    pub driver: &'static str,
    /// The configuration type of the driver that parsed it.
    pub given: &'static str,
}

/// What a driver's configuration type provides to open its fence
/// ([`Driver::with_fence`]): the fence of the database it names, on a
/// connection of its own.
pub trait FenceConfig: DriverConfig {
    /// Connects and opens the fence, keeping its registers and logs where
    /// `options` says.
    fn open_fence(
        self,
        options: OpenOptions,
    ) -> impl Future<Output = crate::Result<DynFence>> + Send;
}

/// A driver, declared once by its crate as `pub const DRIVER: Driver`.
///
/// Construct it with [`Driver::new`] (and [`Driver::with_fence`] for a
/// driver that fences); a registry calls the function pointers.
#[derive(Clone, Copy)]
pub struct Driver {
    /// A short lowercase name (`valkey`, `postgres`, ...): the `store`
    /// label of the metrics.
    pub name: &'static str,
    /// The URL schemes it answers (`mem` stands alone, the others are
    /// followed by `://`).
    pub schemes: &'static [&'static str],
    /// One line for `--help` texts: the URL form and what it selects.
    pub help: &'static str,
    /// The port used when a URL names none (`None`: not a network driver).
    pub default_port: Option<u16>,
    /// Parses and validates a URL of one of [`Driver::schemes`].
    pub parse: fn(&str) -> Result<ParsedUrl, BoxError>,
    /// Opens a [`ParsedUrl`] this driver parsed (a [`WrongDriver`] error
    /// for another's).
    pub open: fn(&ParsedUrl) -> OpenFuture,
    /// Opens a [`ParsedUrl`] this driver parsed without creating anything
    /// (see [`DriverConfig::open_existing`]).
    pub open_existing: fn(&ParsedUrl) -> OpenFuture,
    /// Opens the fence of a [`ParsedUrl`] this driver parsed (a permanent
    /// error naming the [`WrongDriver`] for another's); `None` for a driver
    /// without a fence.
    pub open_fence: Option<fn(&ParsedUrl, &OpenOptions) -> OpenFenceFuture>,
    /// The one `host:port` a [`ParsedUrl`] of this driver connects to, if
    /// exactly one.
    pub endpoint: fn(&ParsedUrl) -> Option<String>,
    /// A URL of this driver with its one network address replaced by
    /// `host:port` (see [`DriverConfig::with_endpoint`]).
    pub with_endpoint: fn(&str, &str) -> Option<String>,
}

impl Driver {
    /// The descriptor of the driver whose configuration type is `C`.
    pub const fn new<C: DriverConfig>(
        name: &'static str,
        schemes: &'static [&'static str],
        help: &'static str,
        default_port: Option<u16>,
    ) -> Driver {
        Driver {
            name,
            schemes,
            help,
            default_port,
            parse: parse::<C>,
            open: open::<C>,
            open_existing: open_existing::<C>,
            open_fence: None,
            endpoint: endpoint::<C>,
            with_endpoint: C::with_endpoint,
        }
    }

    /// This descriptor with the fence of `C` (the driver's configuration
    /// type, which also implements [`FenceConfig`]).
    pub const fn with_fence<C: FenceConfig>(self) -> Driver {
        Driver {
            open_fence: Some(open_fence::<C>),
            ..self
        }
    }

    /// Whether this driver answers `scheme`.
    pub fn answers(&self, scheme: &str) -> bool {
        self.schemes.contains(&scheme)
    }
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .field("default_port", &self.default_port)
            .field("fences", &self.open_fence.is_some())
            .finish_non_exhaustive()
    }
}

/// The name a parsed `C` carries: its type name, so that [`open`] can name
/// a configuration of another driver.
fn type_name<C>() -> &'static str {
    std::any::type_name::<C>()
}

fn parse<C: DriverConfig>(url: &str) -> Result<ParsedUrl, BoxError> {
    Ok(ParsedUrl::from_config(C::parse_url(url)?))
}

/// `parsed`'s configuration if it is a `C`, else the [`WrongDriver`] error.
fn config<C: DriverConfig>(parsed: &ParsedUrl) -> Result<C, WrongDriver> {
    parsed.get::<C>().cloned().ok_or(WrongDriver {
        driver: type_name::<C>(),
        given: parsed.driver,
    })
}

fn open<C: DriverConfig>(parsed: &ParsedUrl) -> OpenFuture {
    match config::<C>(parsed) {
        Ok(config) => Box::pin(config.open()),
        Err(err) => Box::pin(std::future::ready(Err(err.into()))),
    }
}

fn open_existing<C: DriverConfig>(parsed: &ParsedUrl) -> OpenFuture {
    match config::<C>(parsed) {
        Ok(config) => Box::pin(config.open_existing()),
        Err(err) => Box::pin(std::future::ready(Err(err.into()))),
    }
}

fn open_fence<C: FenceConfig>(parsed: &ParsedUrl, options: &OpenOptions) -> OpenFenceFuture {
    match config::<C>(parsed) {
        Ok(config) => Box::pin(config.open_fence(options.clone())),
        Err(err) => {
            let err = StorageError::with_source(ErrorKind::Permanent, "opening a fence", err);
            Box::pin(std::future::ready(Err(err)))
        }
    }
}

fn endpoint<C: DriverConfig>(parsed: &ParsedUrl) -> Option<String> {
    parsed.get::<C>().and_then(C::single_endpoint)
}
