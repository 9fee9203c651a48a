//! *Pick and register*: `PUT /destinations/{d}`.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use crate::http::call::{Call, counted, store_error};
use crate::http::coordinator::Coordinator;
use crate::http::errors::ApiError;
use crate::http::extract::Destination;
use crate::ids::{DestinationId, RequestId};
use crate::registry::Reroute;

impl Coordinator {
    /// *Pick and register*: forwards to the destination's live member if it
    /// has one; otherwise picks a live member with the strategy, forwards,
    /// and binds it (`SADD`) only if the pod answers 2xx. 503 when no member
    /// is live.
    pub async fn pick_and_register(&self, dest: &DestinationId, req: Request) -> Response {
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body()) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let target = match self.registry.bind_target(dest).await {
            Ok(Some(target)) => target,
            Ok(None) => return ApiError::NoLiveMember.into_response(),
            Err(e) => return store_error(&e),
        };
        let (resp, member) = match self
            .forward_with_retry(&call, target.member, Reroute::Allocation(Some(dest)))
            .await
        {
            Ok(x) => x,
            Err(resp) => return resp,
        };
        if !target.bound && resp.status().is_success() {
            if let Err(e) = self.registry.add_pod_to_destination(dest, &member.id).await {
                return store_error(&e);
            }
            tracing::info!(destination = %dest, member = %member.id, "bound destination");
        }
        resp
    }
}

pub(super) async fn handler(
    State(c): State<Coordinator>,
    dest: Result<Destination, ApiError>,
    req: Request,
) -> Response {
    let response = match dest {
        Ok(Destination(dest)) => c.pick_and_register(&dest, req).await,
        Err(e) => e.into_response(),
    };
    counted("bind", response)
}
