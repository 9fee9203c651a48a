//! *Lookup and deregister*: `DELETE /destinations/{d}`.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::http::call::{Answer, answer, counted_with, store_error};
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::http::extract::{Destination, Id};
use crate::ids::{DestinationId, MemberId, RequestId};
use crate::registry::{Deregistration, Reroute, Resolution, ResolveOptions};

impl Coordinator {
    /// *Lookup and deregister*: forwards to a live member of `dest` and, if
    /// the pod answers 2xx, removes it from the destination's pod set (the
    /// pod, behind [`crate::http::pod::fenced`], has left it and raised its
    /// own fence first) with the dead members, and deletes the set when no
    /// live member is left. Another live pod of a fanned-out destination
    /// keeps it (each `DELETE` tears one pod's copy down). 404 when
    /// unbound; when every member of the set is dead there is nothing to
    /// tear down on a pod: the set is deleted and the answer is 204 (as the
    /// Node coordinator does); when the members are live but outside this
    /// coordinator's address policy, 503 `no_live_member` and nothing is
    /// removed.
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
                return match self.unbind(dest, None).await? {
                    Deregistration::Deleted { .. } => {
                        tracing::info!(destination = %dest, "deregistered a destination whose members are all dead");
                        Ok(StatusCode::NO_CONTENT.into_response())
                    }
                    // live, but outside this coordinator's address policy
                    // (or back since the read): not this coordinator's to take
                    _ => Err(ApiError::NoLiveMember.into()),
                };
            }
        };
        let by = Reroute::Destination(dest, opts);
        let epoch = Some(route.epoch);
        let first = route.member.id.clone();
        let (resp, member) = self
            .forward_with_retry(&call, route.member, epoch, by)
            .await?;
        if resp.status().is_success() {
            // the epoch the answering pod was routed at, when it is the
            // first route's pod (a retry's epoch is not known here: then
            // only the dead are removed; a fenced pod has left by itself)
            let leaver = epoch
                .filter(|_| member.id == first)
                .map(|e| (&member.id, e));
            match self.unbind(dest, leaver).await? {
                Deregistration::LiveMembersLeft { live, .. } => {
                    tracing::info!(destination = %dest, left = %member.id, ?live, "a pod left the destination; its other live pods keep it");
                }
                _ => tracing::info!(destination = %dest, "deregistered destination"),
            }
        }
        Ok(resp)
    }

    /// Removes `leaver` and the dead members from the pod set of `dest`,
    /// deleting it when no live member is left; 503 when Valkey fails.
    async fn unbind(
        &self,
        dest: &DestinationId,
        leaver: Option<(&MemberId, u64)>,
    ) -> Result<Deregistration, Response> {
        self.registry
            .deregister_destination(dest, leaver)
            .await
            .map_err(store_error)
    }
}

pub(super) async fn handler(State(c): Shared, id: Id<Destination>, req: Request) -> Response {
    let run = |Destination(id)| async move { c.lookup_and_deregister(&id, req).await };
    counted_with("deregister", id, run).await
}
