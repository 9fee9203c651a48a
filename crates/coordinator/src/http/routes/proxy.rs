//! *Lookup and proxy*: any method on `/destinations/{d}[/...]` but `PUT` and
//! `DELETE` of the destination itself.

use axum::extract::{Request, State};
use axum::response::Response;

use crate::http::call::{Answer, answer, counted_with, store_error};
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::http::extract::{Destination, Id};
use crate::ids::{DestinationId, RequestId};
use crate::registry::{Reroute, Resolution};

impl Coordinator {
    /// *Lookup and proxy*: routes `req` by `dest` (cache first) and forwards
    /// it. 404 when unbound (unless `claim_on_miss`), 503 when no member is
    /// live. The call runs under the caller's `x-request-id` when it sent
    /// one (32 lowercase hex digits; 400 `invalid_id` otherwise, 409
    /// `request_id_in_use` while that id is in flight here), so the caller
    /// can `POST /cancel/{id}` from another connection; else under a fresh
    /// id.
    pub async fn lookup_and_proxy(&self, dest: &DestinationId, req: Request) -> Response {
        match self.caller_request_id(req.headers()) {
            Ok(id) => self.lookup_and_proxy_with_id(dest, req, id).await,
            Err(e) => answer(Err(e.into())),
        }
    }

    /// [`Coordinator::lookup_and_proxy`] with a request id chosen by a
    /// trusted in-process caller, who can later [`Coordinator::cancel`] it.
    pub async fn lookup_and_proxy_with_id(
        &self,
        dest: &DestinationId,
        req: Request,
        request_id: RequestId,
    ) -> Response {
        answer(self.proxy(dest, req, request_id).await)
    }

    async fn proxy(&self, dest: &DestinationId, req: Request, request_id: RequestId) -> Answer {
        let call = self.accept(req, request_id)?;
        let opts = self.config.lookup();
        let route = match self.registry.route(dest, opts).await.map_err(store_error)? {
            Resolution::Routed(r) => r,
            Resolution::Unbound => return Err(ApiError::UnknownDestination.into()),
            Resolution::NoLiveMember => return Err(ApiError::NoLiveMember.into()),
        };
        let by = Reroute::Destination(dest, opts);
        let epoch = Some(route.epoch);
        Ok(self
            .forward_with_retry(&call, route.member, epoch, by)
            .await?
            .0)
    }
}

pub(super) async fn handler(State(c): Shared, id: Id<Destination>, req: Request) -> Response {
    let run = |Destination(id)| async move { c.lookup_and_proxy(&id, req).await };
    counted_with("proxy", id, run).await
}
