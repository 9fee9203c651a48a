//! The driver kit (cargo feature `kit`; `kit-tls` adds [`tls`]): what
//! every network driver needs and would otherwise copy.
//!
//! - [`Op`]: the operation kind of a failed request, with the lost-answer
//!   rule (an answer lost after a write was sent: outcome unknown).
//! - [`query`]: the values of URL query parameters (booleans, durations).
//! - [`url`]: URL rewriting shared by the drivers' descriptors.
//! - [`tls`]: trust roots and the rustls client configuration.

mod op;
pub mod query;
#[cfg(feature = "kit-tls")]
pub mod tls;
pub mod url;

pub use op::Op;
