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
    /// and binds it only if the pod answers 2xx, and only if no live member
    /// holds the destination by then (the claim of first touch: dead members
    /// are removed, a live one never is). 409 `bound_elsewhere` when one
    /// does (a racing bind, or a live owner outside this coordinator's
    /// address policy); 503 when no member is live.
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
            let bound = self
                .registry
                .bind_if_unowned(dest, &member.id)
                .await
                .map_err(store_error)?;
            let Some(epoch) = bound else {
                tracing::warn!(destination = %dest, member = %member.id, "another live pod holds the destination: the pod picked was not bound");
                return Err(ApiError::BoundElsewhere.into());
            };
            tracing::info!(destination = %dest, member = %member.id, epoch, "bound destination");
        }
        Ok(resp)
    }
}

pub(super) async fn handler(State(c): Shared, id: Id<Destination>, req: Request) -> Response {
    let run = |Destination(id)| async move { c.pick_and_register(&id, req).await };
    counted_with("bind", id, run).await
}
