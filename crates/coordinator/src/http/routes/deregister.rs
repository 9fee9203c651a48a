//! *Lookup and deregister*: `DELETE /destinations/{d}`.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::http::call::{Call, counted, store_error};
use crate::http::coordinator::Coordinator;
use crate::http::errors::ApiError;
use crate::http::extract::Destination;
use crate::ids::{DestinationId, RequestId};
use crate::registry::{Reroute, Resolution, ResolveOptions};

impl Coordinator {
    /// *Lookup and deregister*: forwards to a live member of `dest` and, if
    /// the pod answers 2xx, deletes the destination's pod set. 404 when
    /// unbound; when every member of the set is dead there is nothing to
    /// tear down on a pod: the set is deleted and the answer is 204 (as the
    /// Node coordinator does).
    pub async fn lookup_and_deregister(&self, dest: &DestinationId, req: Request) -> Response {
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body()) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let opts = ResolveOptions {
            claim_on_miss: false,
            reassign_orphans: false,
        };
        let member = match self.registry.route(dest, opts).await {
            Ok(Resolution::Routed(r)) => r.member,
            Ok(Resolution::Unbound) => return ApiError::UnknownDestination.into_response(),
            Ok(Resolution::NoLiveMember) => {
                if let Err(e) = self.registry.deregister_destination(dest).await {
                    return store_error(&e);
                }
                tracing::info!(destination = %dest, "deregistered a destination whose members are all dead");
                return StatusCode::NO_CONTENT.into_response();
            }
            Err(e) => return store_error(&e),
        };
        let resp = match self
            .forward_with_retry(&call, member, Reroute::Destination(dest, opts))
            .await
        {
            Ok((resp, _)) => resp,
            Err(resp) => return resp,
        };
        if resp.status().is_success() {
            if let Err(e) = self.registry.deregister_destination(dest).await {
                return store_error(&e);
            }
            tracing::info!(destination = %dest, "deregistered destination");
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
        Ok(Destination(dest)) => c.lookup_and_deregister(&dest, req).await,
        Err(e) => e.into_response(),
    };
    counted("deregister", response)
}
