//! The optional capability of being notified, instead of polling, when a
//! record may have gone: [`TtlStorage::watch`](crate::TtlStorage::watch).

use std::{future::Future, pin::Pin};

/// What [`TtlStorage::watch`](crate::TtlStorage::watch) returns when the
/// driver supports it: a future that completes when the watched record
/// *may* have been removed (deleted or expired) since the call.
///
/// It is `'static` and owns whatever it needs (a subscription, a timer), so
/// it can be raced against a pause with `tokio::select!` and dropped at any
/// time; dropping it cancels the watch.
pub type Watch = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The driver cannot notify changes of records: the caller must poll
/// (re-read the record after a pause). Not a failure: it is the default
/// answer of [`TtlStorage::watch`](crate::TtlStorage::watch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, thiserror::Error)]
#[error("this storage driver cannot notify when a record goes away; poll instead")]
pub struct WatchUnsupported;
