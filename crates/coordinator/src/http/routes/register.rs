//! *Register from response*: `POST /destinations`.

use axum::extract::{Request, State};
use axum::response::Response;

use crate::http::DESTINATION_ID_HEADER;
use crate::http::call::{Answer, answer, counted, store_error};
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::ids::{DestinationId, RequestId};
use crate::registry::Reroute;

impl Coordinator {
    /// *Register from response*: for destinations the pod names itself (a
    /// new session, a sandbox, an upload). Picks a live member with the
    /// strategy, forwards the call, and when the pod answers 2xx with a
    /// valid [`DESTINATION_ID_HEADER`], binds that destination to the pod
    /// (`SADD`) before the answer goes back, so the caller's next call to
    /// `/destinations/{id}` reaches the same pod. A refused connection is
    /// retried once on another live member. 503 `no_live_member` when none
    /// is live; 502 `missing_destination_id` when a 2xx answer has no valid
    /// id (the pod may have created something: it is told nothing more, so
    /// make creation idempotent or expire unclaimed resources).
    pub async fn register_from_response(&self, req: Request) -> Response {
        answer(self.register(req).await)
    }

    async fn register(&self, req: Request) -> Answer {
        let call = self.accept(req, RequestId::generate())?;
        let Some(member) = self.registry.pick_member(None).await.map_err(store_error)? else {
            return Err(ApiError::NoLiveMember.into());
        };
        let by = Reroute::Allocation(None);
        let (resp, member) = self.forward_with_retry(&call, member, None, by).await?;
        if !resp.status().is_success() {
            return Ok(resp);
        }
        let named = resp
            .headers()
            .get(DESTINATION_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| DestinationId::new(v).ok());
        let Some(dest) = named else {
            tracing::warn!(member = %member.id, "pod answered 2xx without a valid destination id");
            return Err(ApiError::MissingDestinationId.into());
        };
        let bound = self
            .registry
            .bind_if_unowned(&dest, &member.id)
            .await
            .map_err(store_error)?;
        if bound.is_none() {
            // the pod named a destination another live pod holds
            tracing::warn!(destination = %dest, member = %member.id, "the destination the pod created is held by another live pod: not bound");
            return Err(ApiError::BoundElsewhere.into());
        }
        tracing::info!(destination = %dest, member = %member.id, "registered destination from response");
        Ok(resp)
    }
}

pub(super) async fn handler(State(c): Shared, req: Request) -> Response {
    counted("register", c.register_from_response(req).await)
}
