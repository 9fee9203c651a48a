//! The driver kit (cargo feature `kit`; `kit-tls` adds [`tls`]): what
//! every network driver needs and would otherwise copy.
//!
//! - [`Op`]: the operation kind of a failed request, with the lost-answer
//!   rule (an answer lost after a write was sent: outcome unknown).
//! - [`options`]: the connection options every driver has (timeouts, TLS
//!   CA file, key prefix), parsed once from the query, and the
//!   [`connect_setters!`](crate::connect_setters) that builders expose
//!   (and [`server_setters!`](crate::server_setters) for a driver's one
//!   server's host and port).
//! - [`query`]: the values of URL query parameters (booleans, durations).
//! - [`url`]: reading a storage URL (its parameters, each once unless
//!   repeatable; percent-decoded user info) and rewriting it for the
//!   drivers' descriptors.
//! - [`UrlError`]: the configuration errors every driver shares, wrapped
//!   by each driver's own `ConfigError`.
//! - [`tls`]: trust roots and the rustls client configuration.
//! - [`Credentials`]: a user name and a password that `Debug` never shows.

mod credentials;
mod op;
pub mod options;
pub mod query;
#[cfg(feature = "kit-tls")]
pub mod tls;
pub mod url;
mod url_error;
#[cfg(feature = "kit-valkey")]
pub mod valkey;

pub use credentials::Credentials;
pub use op::Op;
pub use url_error::UrlError;
