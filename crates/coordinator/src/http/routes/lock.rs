//! *Lookup lock and proxy*: any method on `/locks/{lock}[/...]`.

use axum::extract::{Request, State};
use axum::response::Response;

use crate::http::call::{Answer, answer, counted_with, store_error};
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::http::extract::{Id, Lock};
use crate::http::forward::ForwardError;
use crate::ids::LockId;

impl Coordinator {
    /// *Lookup lock and proxy*: resolves the lock record and forwards to the
    /// pod that minted it. 404 `unknown_lock` for an unknown (or expired)
    /// lock, 404 `lock_owner_gone` when the owner is dead (the session is
    /// lost: the caller starts a new one), 503 `lock_owner_unreachable` when
    /// its record is live but it refuses connections. A session lives on
    /// its pod: there is no other member to retry on. The caller's
    /// `x-request-id` is used as for [`Coordinator::lookup_and_proxy`].
    pub async fn lookup_lock_and_proxy(&self, lock: &LockId, req: Request) -> Response {
        answer(self.lock_proxy(lock, req).await)
    }

    async fn lock_proxy(&self, lock: &LockId, req: Request) -> Answer {
        let id = self.caller_request_id(req.headers())?;
        let call = self.accept(req, id)?;
        let Some(record) = self
            .registry
            .resolve_lock(lock)
            .await
            .map_err(store_error)?
        else {
            return Err(ApiError::UnknownLock.into());
        };
        let Some(owner) = record.owner_record else {
            return Err(ApiError::LockOwnerGone.into());
        };
        match self.forward(&call, &owner, None).await {
            Ok(resp) => Ok(resp),
            Err(ForwardError::Connect { .. }) => Err(ApiError::LockOwnerUnreachable.into()),
            Err(e) => Err(call.failed(&e)),
        }
    }
}

pub(super) async fn handler(State(c): Shared, id: Id<Lock>, req: Request) -> Response {
    let run = |Lock(id)| async move { c.lookup_lock_and_proxy(&id, req).await };
    counted_with("lock", id, run).await
}
