//! Axum extractors for the ids in a route's path, usable on any route:
//! `Destination` reads `{destination}`, `Lock` reads `{lock}`; a malformed
//! id is rejected with 400 `invalid_id` before the handler runs. The
//! coordinator's own routes use them too (as `Result<Destination, ApiError>`,
//! so that a rejected id is still counted under its route). The captures
//! are read percent-decoded without building a map per call.
//!
//! ```
//! use axum::{Router, routing::get};
//! use coordinator::http::extract::{Destination, Lock};
//!
//! let app: Router = Router::new()
//!     .route("/tenants/{destination}/report", get(|Destination(d): Destination| async move {
//!         format!("report of {d}")
//!     }))
//!     .route("/sessions/{lock}", get(|Lock(l): Lock| async move { l.to_string() }));
//! ```

use axum::extract::{FromRequestParts, RawPathParams};
use http::request::Parts;

use super::errors::ApiError;
use crate::ids::{DestinationId, LockId, RequestId};

/// The `{destination}` path parameter as a validated [`DestinationId`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination(pub DestinationId);

/// The `{lock}` path parameter as a validated [`LockId`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock(pub LockId);

/// An id extracted from the path, or the 400 `invalid_id` rejecting it: the
/// coordinator's handlers take this form, so that the rejection is counted
/// under their route.
pub(crate) type Id<T> = Result<T, ApiError>;

/// The `{request_id}` path parameter of the cancel route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CancelledRequest(pub(crate) RequestId);

/// The capture `name`, percent-decoded and parsed; 400 `invalid_id` when
/// it is missing, not UTF-8 or malformed.
async fn param<T: std::str::FromStr>(parts: &mut Parts, name: &str) -> Result<T, ApiError> {
    let params = RawPathParams::from_request_parts(parts, &())
        .await
        .map_err(|_| ApiError::InvalidId)?;
    params
        .iter()
        .find(|(key, _)| *key == name)
        .and_then(|(_, v)| v.parse().ok())
        .ok_or(ApiError::InvalidId)
}

impl<S: Send + Sync> FromRequestParts<S> for Destination {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        param(parts, "destination").await.map(Destination)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Lock {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        param(parts, "lock").await.map(Lock)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for CancelledRequest {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        param(parts, "request_id").await.map(CancelledRequest)
    }
}
