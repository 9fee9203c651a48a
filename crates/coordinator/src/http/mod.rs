//! HTTP: forwarding to pods, the coordinator's axum handlers, and the pod's
//! cancel endpoint and middleware.

mod body;
mod coordinator;
mod forward;
mod headers;
pub mod pod;

pub use coordinator::{Coordinator, CoordinatorConfig};
pub use forward::{ForwardConfig, ForwardError, Forwarder};

/// The header carrying the request id on forwarded calls (and echoed on
/// the coordinator's responses).
pub const REQUEST_ID_HEADER: &str = "x-request-id";
