//! *Lookup lock and proxy*: any method on `/locks/{lock}[/...]`.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use crate::http::call::{Call, counted, store_error};
use crate::http::coordinator::Coordinator;
use crate::http::errors::ApiError;
use crate::http::extract::Lock;
use crate::http::forward::ForwardError;
use crate::ids::{LockId, RequestId};

impl Coordinator {
    /// *Lookup lock and proxy*: resolves the lock record and forwards to the
    /// pod that minted it. 404 `unknown_lock` for an unknown (or expired)
    /// lock, 404 `lock_owner_gone` when the owner is dead (the session is
    /// lost: the caller starts a new one), 503 `lock_owner_unreachable` when
    /// its record is live but it refuses connections. A session lives on
    /// its pod: there is no other member to retry on.
    pub async fn lookup_lock_and_proxy(&self, lock: &LockId, req: Request) -> Response {
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body()) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let record = match self.registry.resolve_lock(lock).await {
            Ok(Some(r)) => r,
            Ok(None) => return ApiError::UnknownLock.into_response(),
            Err(e) => return store_error(&e),
        };
        let Some(owner) = record.owner_record else {
            return ApiError::LockOwnerGone.into_response();
        };
        match self.forward(&call, &owner).await {
            Ok(resp) => resp,
            Err(ForwardError::Connect { .. }) => ApiError::LockOwnerUnreachable.into_response(),
            Err(e) => call.failed(&e),
        }
    }
}

pub(super) async fn handler(
    State(c): State<Coordinator>,
    lock: Result<Lock, ApiError>,
    req: Request,
) -> Response {
    let response = match lock {
        Ok(Lock(lock)) => c.lookup_lock_and_proxy(&lock, req).await,
        Err(e) => e.into_response(),
    };
    counted("lock", response)
}
