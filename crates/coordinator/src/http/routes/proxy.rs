//! *Lookup and proxy*: any method on `/destinations/{d}[/...]` but `PUT` and
//! `DELETE` of the destination itself.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use crate::http::call::{Call, counted, store_error};
use crate::http::coordinator::Coordinator;
use crate::http::errors::ApiError;
use crate::http::extract::Destination;
use crate::ids::{DestinationId, RequestId};
use crate::registry::{Reroute, Resolution};

impl Coordinator {
    /// *Lookup and proxy*: routes `req` by `dest` (cache first) and forwards
    /// it. 404 when unbound (unless `claim_on_miss`), 503 when no member is
    /// live.
    pub async fn lookup_and_proxy(&self, dest: &DestinationId, req: Request) -> Response {
        self.lookup_and_proxy_with_id(dest, req, RequestId::generate())
            .await
    }

    /// [`Coordinator::lookup_and_proxy`] with a request id chosen by a
    /// trusted in-process caller, who can later [`Coordinator::cancel`] it.
    pub async fn lookup_and_proxy_with_id(
        &self,
        dest: &DestinationId,
        req: Request,
        request_id: RequestId,
    ) -> Response {
        let call = match Call::new(req, request_id, self.config.max_request_body()) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let opts = self.config.lookup();
        let member = match self.registry.route(dest, opts).await {
            Ok(Resolution::Routed(r)) => r.member,
            Ok(Resolution::Unbound) => return ApiError::UnknownDestination.into_response(),
            Ok(Resolution::NoLiveMember) => return ApiError::NoLiveMember.into_response(),
            Err(e) => return store_error(&e),
        };
        match self
            .forward_with_retry(&call, member, Reroute::Destination(dest, opts))
            .await
        {
            Ok((resp, _)) => resp,
            Err(resp) => resp,
        }
    }
}

pub(super) async fn handler(
    State(c): State<Coordinator>,
    dest: Result<Destination, ApiError>,
    req: Request,
) -> Response {
    let response = match dest {
        Ok(Destination(dest)) => c.lookup_and_proxy(&dest, req).await,
        Err(e) => e.into_response(),
    };
    counted("proxy", response)
}
