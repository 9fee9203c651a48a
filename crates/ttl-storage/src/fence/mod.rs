//! The fencing contract: [`Fence`] and what it answers.
//!
//! It lives here, beside [`TtlStorage`](crate::TtlStorage), so that a
//! driver's [`Driver`](crate::Driver) descriptor can carry its fence opener
//! ([`Driver::open_fence`](crate::Driver::open_fence)). The `fence` crate
//! re-exports all of it and adds the behaviour suite, `MemFence` and the
//! checks the implementations share; read its documentation for the
//! contract's guarantees.

mod options;
mod outcome;

use std::{fmt, sync::Arc};

use async_trait::async_trait;

pub use options::OpenOptions;
pub use outcome::{AppendOutcome, FenceOutcome, Fenced, LogEntry, Numbering};

use crate::Result;

/// Fenced registers and logs of one database: the one contract every
/// driver's fence implements.
///
/// Object safe (through `async_trait`, as [`crate::TtlStorage`]):
/// programs hold a [`DynFence`] and never name a driver.
#[async_trait]
pub trait Fence: Send + Sync + fmt::Debug {
    /// Guarded write: writes `value` as `resource`'s register value if
    /// `token` is at least the highest token the resource has seen (equal
    /// tokens are accepted), and records `token`; or changes nothing and
    /// returns the higher token. One atomic step of the database.
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome>;

    /// The register of `resource` (the highest token seen and the value the
    /// last accepted write carried), or `None` if nothing was ever written
    /// or appended. The value is empty when only appends raised the token.
    async fn read(&self, resource: &str) -> Result<Option<Fenced>>;

    /// Fenced append: appends `value` to `resource`'s log if `token` is at
    /// least the highest token the resource has seen (the same token as
    /// [`write`](Self::write)'s), records `token` and returns the entry's
    /// sequence number (see [`numbering`](Self::numbering)); or appends
    /// nothing and returns the higher token.
    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome>;

    /// `resource`'s log, in accept order (empty if never appended to).
    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>>;

    /// How this fence numbers the entries of a log.
    fn numbering(&self) -> Numbering;
}

/// A shared fence of any driver, as `storage_url::open_fence` returns it.
pub type DynFence = Arc<dyn Fence>;
