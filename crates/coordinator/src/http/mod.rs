//! HTTP: forwarding to pods, the coordinator's axum handlers, and the pod's
//! cancel endpoint and middleware.

mod body;
mod coordinator;
mod errors;
pub mod extract;
mod forward;
mod headers;
mod hook;
mod in_flight;
pub mod pod;
mod pool;

pub use coordinator::{Coordinator, CoordinatorConfig, CoordinatorConfigBuilder};
pub use errors::ApiError;
pub use forward::{ForwardConfig, ForwardError, Forwarder};
pub use hook::{CallResult, ResultHook};
pub use http_edge::{ServeConfig, ServeError, serve};
pub use pool::PodBody;

/// The header carrying the request id on forwarded calls (and echoed on
/// the coordinator's responses).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The response header by which a pod names the destination it created,
/// for [`Coordinator::register_from_response`] (`POST /destinations`). Its
/// value is validated as a [`DestinationId`](crate::DestinationId) before
/// anything is registered.
pub const DESTINATION_ID_HEADER: &str = "x-destination-id";
