//! A driver's fence, declared once beside its storage descriptor: each
//! driver crate with a fence exports `pub const FENCE: FenceDriver` next to
//! its `DRIVER`, built by [`FenceDriver::new`] from the same configuration
//! type. The fence is opened from the [`ParsedUrl`] that `DRIVER.parse`
//! returned, so a URL is parsed once on its way to a fence too.
//!
//! (The descriptor lives here rather than as a field of
//! [`ttl_storage::Driver`]: `ttl-storage` is below this crate and cannot
//! name a [`DynFence`].)
//!
//! ```
//! use fence::{DynFence, FenceConfig, FenceDriver, MemFence, OpenOptions};
//! use std::sync::Arc;
//! use ttl_storage::{BoxError, Driver, DriverConfig, DynTtlStorage};
//!
//! #[derive(Debug, Clone, PartialEq)]
//! struct DemoConfig;
//!
//! impl DriverConfig for DemoConfig {
//!     fn parse_url(url: &str) -> Result<Self, BoxError> {
//!         url.strip_prefix("demo://").map(|_| DemoConfig).ok_or("not demo://".into())
//!     }
//!     async fn open(self) -> Result<DynTtlStorage, BoxError> {
//!         Err("this demo has only a fence".into())
//!     }
//! }
//!
//! impl FenceConfig for DemoConfig {
//!     async fn open_fence(self, _options: OpenOptions) -> fence::Result<DynFence> {
//!         Ok(Arc::new(MemFence::default()) as DynFence)
//!     }
//! }
//!
//! const DRIVER: Driver = Driver::new::<DemoConfig>("demo", &["demo"], "demo://", None);
//! const FENCE: FenceDriver = FenceDriver::new::<DemoConfig>();
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let parsed = (DRIVER.parse)("demo://")?;
//! assert!(FENCE.accepts(&parsed));
//! let _fence = (FENCE.open)(&parsed, &OpenOptions::new("fences", true)).await?;
//! # Ok(()) }
//! ```

use std::{fmt, future::Future, pin::Pin};

use ttl_storage::{DriverConfig, ErrorKind, ParsedUrl, StorageError, WrongDriver};

use crate::{DynFence, OpenOptions, Result};

/// The future [`FenceDriver::open`] returns.
pub type OpenFenceFuture = Pin<Box<dyn Future<Output = Result<DynFence>> + Send>>;

/// What a driver's configuration type provides to its [`FenceDriver`]:
/// open the fence of the database it names, on a connection of its own.
pub trait FenceConfig: DriverConfig {
    /// Connects and opens the fence, keeping its registers and logs where
    /// `options` says.
    fn open_fence(self, options: OpenOptions) -> impl Future<Output = Result<DynFence>> + Send;
}

/// A driver's fence, declared once by its crate as `pub const FENCE:
/// FenceDriver`. Construct it with [`FenceDriver::new`].
#[derive(Clone, Copy)]
pub struct FenceDriver {
    /// Whether a [`ParsedUrl`] is this driver's (parsed by its `DRIVER`).
    pub accepts: fn(&ParsedUrl) -> bool,
    /// Opens the fence of a [`ParsedUrl`] this driver parsed (a permanent
    /// error naming the [`WrongDriver`] for another's).
    pub open: fn(&ParsedUrl, &OpenOptions) -> OpenFenceFuture,
}

impl FenceDriver {
    /// The fence of the driver whose configuration type is `C`.
    pub const fn new<C: FenceConfig>() -> FenceDriver {
        FenceDriver {
            accepts: accepts::<C>,
            open: open::<C>,
        }
    }

    /// Whether `parsed` is this driver's.
    pub fn accepts(&self, parsed: &ParsedUrl) -> bool {
        (self.accepts)(parsed)
    }
}

impl fmt::Debug for FenceDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceDriver").finish_non_exhaustive()
    }
}

fn accepts<C: FenceConfig>(parsed: &ParsedUrl) -> bool {
    parsed.get::<C>().is_some()
}

fn open<C: FenceConfig>(parsed: &ParsedUrl, options: &OpenOptions) -> OpenFenceFuture {
    match parsed.get::<C>() {
        Some(config) => Box::pin(config.clone().open_fence(options.clone())),
        None => {
            let err = WrongDriver {
                driver: std::any::type_name::<C>(),
                given: parsed.driver(),
            };
            let err = StorageError::with_source(ErrorKind::Permanent, "opening a fence", err);
            Box::pin(std::future::ready(Err(err)))
        }
    }
}
