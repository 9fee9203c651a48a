//! The driver descriptor: how a driver crate declares itself once, the way
//! sqlx's `AnyDriver` does.
//!
//! Each driver crate exports one `pub const DRIVER: Driver`, built by
//! [`Driver::new`] from its configuration type (a [`DriverConfig`]): its
//! name, URL schemes, `--help` line, default port and three function
//! pointers: [`Driver::parse`] (a URL to an opaque [`ParsedUrl`]),
//! [`Driver::open`] (that parsed configuration to a [`DynTtlStorage`]) and
//! [`Driver::endpoint`] (the one `host:port` it connects to, for display and
//! proxies). A registry (the `storage-url` crate) is then a list of these
//! constants.
//!
//! A URL is parsed once: [`Driver::open`] takes the [`ParsedUrl`], not the
//! text, so nothing on the way to `connect` can parse it again.
//!
//! ```
//! use std::sync::Arc;
//! use ttl_storage::{BoxError, Driver, DriverConfig, DynTtlStorage};
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
//! }
//!
//! const DRIVER: Driver = Driver::new::<DemoConfig>("demo", &["demo"], "demo://N", None);
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let parsed = (DRIVER.parse)("demo://7")?;
//! assert_eq!(parsed.get::<DemoConfig>(), Some(&DemoConfig(7)));
//! let _storage = (DRIVER.open)(&parsed).await?;
//! assert_eq!((DRIVER.endpoint)(&parsed), None);
//! assert!((DRIVER.parse)("demo://x").is_err());
//! # Ok(()) }
//! ```

use std::{any::Any, fmt, future::Future, pin::Pin, sync::Arc};

use crate::{BoxError, DynTtlStorage};

/// The future [`Driver::open`] returns.
pub type OpenFuture = Pin<Box<dyn Future<Output = Result<DynTtlStorage, BoxError>> + Send>>;

/// What a driver's configuration type provides to its [`Driver`]: parse a
/// URL, connect, and say which one network address it names.
///
/// Implemented by `MemConfig`, `RedbConfig`, `ScyllaConfig`,
/// `DynamoConfig`, `ValkeyConfig`, `PostgresConfig` and `EtcdConfig`:
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

    /// Connects to (or opens) the storage this configuration names.
    fn open(self) -> impl Future<Output = Result<DynTtlStorage, BoxError>> + Send;

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

/// A driver, declared once by its crate as `pub const DRIVER: Driver`.
///
/// Construct it with [`Driver::new`]; a registry calls the function
/// pointers.
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
            endpoint: endpoint::<C>,
            with_endpoint: C::with_endpoint,
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

fn open<C: DriverConfig>(parsed: &ParsedUrl) -> OpenFuture {
    match parsed.get::<C>() {
        Some(config) => Box::pin(config.clone().open()),
        None => {
            let err = WrongDriver {
                driver: type_name::<C>(),
                given: parsed.driver,
            };
            Box::pin(std::future::ready(Err(err.into())))
        }
    }
}

fn endpoint<C: DriverConfig>(parsed: &ParsedUrl) -> Option<String> {
    parsed.get::<C>().and_then(C::single_endpoint)
}
