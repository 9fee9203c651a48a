//! *Register from response*: `POST /destinations`.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use crate::http::DESTINATION_ID_HEADER;
use crate::http::call::{Call, counted, store_error};
use crate::http::coordinator::Coordinator;
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
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body()) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let member = match self.registry.pick_member(None).await {
            Ok(Some(m)) => m,
            Ok(None) => return ApiError::NoLiveMember.into_response(),
            Err(e) => return store_error(&e),
        };
        let (resp, member) = match self
            .forward_with_retry(&call, member, Reroute::Allocation(None))
            .await
        {
            Ok(x) => x,
            Err(resp) => return resp,
        };
        if !resp.status().is_success() {
            return resp;
        }
        let named = resp
            .headers()
            .get(DESTINATION_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| DestinationId::new(v).ok());
        let Some(dest) = named else {
            tracing::warn!(member = %member.id, "pod answered 2xx without a valid destination id");
            return ApiError::MissingDestinationId.into_response();
        };
        if let Err(e) = self
            .registry
            .add_pod_to_destination(&dest, &member.id)
            .await
        {
            return store_error(&e);
        }
        self.registry.evict(&dest);
        tracing::info!(destination = %dest, member = %member.id, "registered destination from response");
        resp
    }
}

pub(super) async fn handler(State(c): State<Coordinator>, req: Request) -> Response {
    counted("register", c.register_from_response(req).await)
}
