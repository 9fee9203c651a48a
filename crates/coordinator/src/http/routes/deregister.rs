//! *Lookup and deregister*: `DELETE /destinations/{d}`.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::http::call::{Answer, answer, counted_with, store_error};
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::http::extract::{Destination, Id};
use crate::ids::{DestinationId, RequestId};
use crate::registry::{Reroute, Resolution, ResolveOptions};

impl Coordinator {
    /// *Lookup and deregister*: forwards to a live member of `dest` and, if
    /// the pod answers 2xx, deletes the destination's pod set. 404 when
    /// unbound; when every member of the set is dead there is nothing to
    /// tear down on a pod: the set is deleted and the answer is 204 (as the
    /// Node coordinator does).
    pub async fn lookup_and_deregister(&self, dest: &DestinationId, req: Request) -> Response {
        answer(self.deregister(dest, req).await)
    }

    async fn deregister(&self, dest: &DestinationId, req: Request) -> Answer {
        let call = self.accept(req, RequestId::generate())?;
        let opts = ResolveOptions {
            claim_on_miss: false,
            reassign_orphans: false,
        };
        let route = match self.registry.route(dest, opts).await.map_err(store_error)? {
            Resolution::Routed(r) => r,
            Resolution::Unbound => return Err(ApiError::UnknownDestination.into()),
            Resolution::NoLiveMember => {
                self.unbind(dest).await?;
                tracing::info!(destination = %dest, "deregistered a destination whose members are all dead");
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
        };
        let by = Reroute::Destination(dest, opts);
        let epoch = Some(route.epoch);
        let (resp, _) = self
            .forward_with_retry(&call, route.member, epoch, by)
            .await?;
        if resp.status().is_success() {
            self.unbind(dest).await?;
            tracing::info!(destination = %dest, "deregistered destination");
        }
        Ok(resp)
    }

    /// Deletes the pod set of `dest`; 503 when Valkey fails.
    async fn unbind(&self, dest: &DestinationId) -> Result<(), Response> {
        self.registry
            .deregister_destination(dest)
            .await
            .map_err(store_error)
    }
}

pub(super) async fn handler(State(c): Shared, id: Id<Destination>, req: Request) -> Response {
    let run = |Destination(id)| async move { c.lookup_and_deregister(&id, req).await };
    counted_with("deregister", id, run).await
}
