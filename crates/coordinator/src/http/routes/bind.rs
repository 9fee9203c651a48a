//! *Pick and register*: `PUT /destinations/{d}`.

use axum::extract::{Request, State};
use axum::response::Response;

use crate::http::call::{Answer, answer, counted_with, store_error};
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::http::extract::{Destination, Id};
use crate::ids::{DestinationId, RequestId};
use crate::registry::Reroute;

impl Coordinator {
    /// *Pick and register*: forwards to the destination's live member if it
    /// has one; otherwise picks a live member with the strategy, forwards,
    /// and binds it (`SADD`) only if the pod answers 2xx. 503 when no member
    /// is live.
    pub async fn pick_and_register(&self, dest: &DestinationId, req: Request) -> Response {
        answer(self.bind(dest, req).await)
    }

    async fn bind(&self, dest: &DestinationId, req: Request) -> Answer {
        let call = self.accept(req, RequestId::generate())?;
        let Some(target) = self.registry.bind_target(dest).await.map_err(store_error)? else {
            return Err(ApiError::NoLiveMember.into());
        };
        let by = Reroute::Allocation(Some(dest));
        let (resp, member) = self
            .forward_with_retry(&call, target.member, target.epoch, by)
            .await?;
        if !target.bound && resp.status().is_success() {
            self.registry
                .add_pod_to_destination(dest, &member.id)
                .await
                .map_err(store_error)?;
            tracing::info!(destination = %dest, member = %member.id, "bound destination");
        }
        Ok(resp)
    }
}

pub(super) async fn handler(State(c): Shared, id: Id<Destination>, req: Request) -> Response {
    let run = |Destination(id)| async move { c.pick_and_register(&id, req).await };
    counted_with("bind", id, run).await
}
