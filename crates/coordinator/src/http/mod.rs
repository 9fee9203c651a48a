//! HTTP: forwarding to pods, the coordinator's axum handlers, and (re-exported
//! from `member/`) the pod's cancel endpoint and middleware.
//!
//! Layout: `coordinator` (the [`Coordinator`] and what it holds), `config`,
//! `routes/` (one file per route: its method and handler), `call` (the
//! forwarding step the routes share and its one retry after a refused
//! connection, the member for the retry being the registry's choice),
//! `forward` + `pool` (the HTTP client to pods), `request_body` /
//! `response_body` (the retryable request body, the response body that
//! cancels on early drop), `extract` (path id extractors), `errors`
//! (the JSON answers); `pod`, the pod side's HTTP glue, lives with the
//! rest of the pod side in `member/` and is re-exported here.

mod call;
mod config;
mod coordinator;
mod errors;
pub mod extract;
mod forward;
mod headers;
mod hook;
mod in_flight;
mod pool;
mod request_body;
mod response_body;
mod routes;

pub use crate::member::pod;
pub use config::{CoordinatorConfig, CoordinatorConfigBuilder};
pub use coordinator::Coordinator;
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

/// The request header carrying the destination's assignment epoch on every
/// call the coordinator forwards for a destination (ownership fencing; see
/// [`pod::fenced`]). A copy sent by the client is removed first.
pub const EPOCH_HEADER: &str = "x-coordinator-epoch";

/// The request header naming the destination a forwarded call was routed
/// for, sent with [`EPOCH_HEADER`]. A copy sent by the client is removed
/// first.
pub const ROUTED_DESTINATION_HEADER: &str = "x-coordinator-destination";

/// The status of a call a pod refused as a stale owner: 421 Misdirected
/// Request, JSON `{"error":"stale_owner","reason":...}`, with
/// [`STALE_OWNER_HEADER`].
pub const STALE_OWNER_STATUS: u16 = 421;

/// The response header (`stale_owner`) by which the coordinator tells a
/// fence refusal from a pod's own 421.
pub const STALE_OWNER_HEADER: &str = "x-coordinator-refused";
