//! The step every forwarding route shares: one incoming call, forwarded to
//! the member the registry chose, and forwarded once more to the member the
//! registry chooses next when the first refused the connection before the
//! body was sent. The handlers' shared answers (store and forward errors,
//! the per-route request counter) are here too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use http::request::Parts;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::coordinator::Coordinator;
use super::errors::{ApiError, has_dot_segment};
use super::forward::ForwardError;
use super::hook::CallResult;
use super::pod::STALE_OWNER;
use super::request_body::RetryableBody;
use super::response_body::GuardedBody;
use super::{REQUEST_ID_HEADER, STALE_OWNER_HEADER, STALE_OWNER_STATUS};
use crate::error::Error;
use crate::ids::{DestinationId, RequestId};
use crate::record::MemberRecord;
use crate::registry::{Reroute, Resolution};
use crate::telemetry;

/// One incoming call, split so it can be retried once before its body is sent.
pub(super) struct Call {
    pub(super) parts: Parts,
    pub(super) body: RetryableBody,
    pub(super) request_id: RequestId,
    /// Set when the body went past the configured limit.
    too_large: Arc<AtomicBool>,
}

impl Call {
    /// Checks the path and the declared length, and caps the body at
    /// `limit` bytes.
    fn new(req: Request, request_id: RequestId, limit: Option<u64>) -> Result<Self, ApiError> {
        check_path(&req)?;
        let (parts, body) = req.into_parts();
        let too_large = Arc::new(AtomicBool::new(false));
        let body = match limit {
            None => body,
            Some(limit) => {
                let declared = parts
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if declared.is_some_and(|n| n > limit) {
                    return Err(ApiError::PayloadTooLarge);
                }
                // past the limit the stream fails, and the flag turns the
                // forward's failure into a 413
                let tripped = too_large.clone();
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                Body::new(Limited::new(body, limit).map_err(move |err| {
                    if err.is::<LengthLimitError>() {
                        tripped.store(true, Ordering::Relaxed);
                    }
                    axum::Error::new(err)
                }))
            }
        };
        Ok(Self {
            parts,
            body: RetryableBody::new(body),
            request_id,
            too_large,
        })
    }

    /// The answer for a failed forward of this call.
    pub(super) fn failed(&self, err: &ForwardError) -> Response {
        if self.too_large.load(Ordering::Relaxed) {
            return ApiError::PayloadTooLarge.into_response();
        }
        forward_error(err)
    }
}

/// What a route answers: `Err` is the coordinator's own answer that ended
/// the call early (`?` in the routes), `Ok` the pod's or the final one.
pub(super) type Answer = Result<Response, Response>;

/// The response either way.
pub(super) fn answer(answer: Answer) -> Response {
    answer.unwrap_or_else(|early| early)
}

/// 503 `store_unavailable` for a failed Valkey step, logged and counted.
pub(super) fn store_error(err: Error) -> Response {
    tracing::warn!(%err, "coordination store error");
    telemetry::store_error("coordinator", &err);
    ApiError::StoreUnavailable.into_response()
}

fn forward_error(err: &ForwardError) -> Response {
    tracing::warn!(%err, "forward failed");
    match err {
        ForwardError::Timeout { .. } => ApiError::UpstreamTimeout.into_response(),
        _ => ApiError::UpstreamUnavailable.into_response(),
    }
}

/// 400 for a path with a dot segment: a pod normalising it could serve
/// another route than the one the coordinator routed by.
fn check_path(req: &Request) -> Result<(), ApiError> {
    if has_dot_segment(req.uri().path()) {
        return Err(ApiError::InvalidPath);
    }
    Ok(())
}

impl Coordinator {
    /// `req` as a [`Call`] with `request_id`, or the answer refusing it (400
    /// for a dot segment, 413 for a declared length over the limit).
    pub(super) fn accept(&self, req: Request, request_id: RequestId) -> Result<Call, ApiError> {
        Call::new(req, request_id, self.config.max_request_body())
    }

    /// Forwards `member` the call, stamped with `fence` (the destination and
    /// its epoch) when given; the response body carries the cancel guard,
    /// except for a fence refusal (the pod did not run the call).
    pub(super) async fn forward(
        &self,
        call: &Call,
        member: &MemberRecord,
        fence: Option<(&DestinationId, u64)>,
    ) -> Result<Response, ForwardError> {
        let guard = self
            .forwarder
            .guard(member.address.clone(), call.request_id.clone());
        let started = Instant::now();
        let sent = self
            .forwarder
            .send_fenced(
                &member.address,
                &call.parts,
                call.body.attempt(),
                &call.request_id,
                fence,
            )
            .await;
        let outcome = match &sent {
            Ok(_) => "ok",
            Err(ForwardError::Connect { .. }) => "connect_error",
            Err(ForwardError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        let elapsed = started.elapsed();
        telemetry::forwarded(outcome, elapsed);
        if !self.hooks.is_empty() {
            let result = CallResult {
                request_id: &call.request_id,
                member: &member.id,
                method: &call.parts.method,
                path: call.parts.uri.path(),
                status: sent.as_ref().ok().map(|r| r.status()),
                error: sent.as_ref().err(),
                elapsed,
            };
            for hook in self.hooks.iter() {
                hook.on_result(&result);
            }
        }
        match sent {
            Ok(resp) if is_stale_owner(resp.status(), resp.headers()) => {
                guard.disarm();
                Ok(resp.map(Body::new))
            }
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                let mut resp =
                    Response::from_parts(parts, Body::new(GuardedBody::new(body, guard)));
                if let Ok(v) = HeaderValue::from_str(call.request_id.as_str()) {
                    resp.headers_mut().insert(REQUEST_ID_HEADER, v);
                }
                Ok(resp)
            }
            Err(e @ (ForwardError::Connect { .. } | ForwardError::Request(_))) => {
                guard.disarm();
                Err(e)
            }
            // dropping the armed guard sends a cancel to the pod
            Err(e) => Err(e),
        }
    }

    /// Forwards to `member` (stamped with the destination's `epoch` when the
    /// call is routed by a destination); if the connection fails before the
    /// body was sent, asks the registry for another member of the call's
    /// route `by` ([`Registry::reroute`](crate::Registry)) and tries once
    /// more. A destination call the pod refuses as a stale owner (the
    /// ownership fence) is re-resolved once and forwarded again; a second
    /// refusal goes to the caller. The answer names the member that served
    /// the call.
    pub(super) async fn forward_with_retry(
        &self,
        call: &Call,
        member: MemberRecord,
        epoch: Option<u64>,
        by: Reroute<'_>,
    ) -> Result<(Response, MemberRecord), Response> {
        let (resp, member) = self.forward_or_reroute(call, member, epoch, by).await?;
        match by {
            Reroute::Destination(dest, opts) if is_stale_owner(resp.status(), resp.headers()) => {
                if !call.body.can_resend() {
                    // the cache entry is gone: the caller's retry re-resolves
                    self.registry.evict(dest);
                    telemetry::stale_owner("passed");
                    return Ok((resp, member));
                }
                tracing::info!(destination = %dest, member = %member.id, ?epoch, "stale owner refused the call, resolving once more");
                telemetry::stale_owner("rerouted");
                let route = match Box::pin(self.registry.reresolve(dest, opts)).await {
                    Ok(Resolution::Routed(route)) => route,
                    Ok(Resolution::Unbound) => return Err(ApiError::UnknownDestination.into()),
                    Ok(Resolution::NoLiveMember) => return Err(ApiError::NoLiveMember.into()),
                    Err(e) => return Err(store_error(e)),
                };
                let fence = Some((dest, route.epoch));
                match self.forward(call, &route.member, fence).await {
                    Ok(resp) => {
                        if is_stale_owner(resp.status(), resp.headers()) {
                            self.registry.evict(dest);
                            telemetry::stale_owner("passed");
                        }
                        Ok((resp, route.member))
                    }
                    Err(e) => Err(call.failed(&e)),
                }
            }
            Reroute::Allocation(Some(dest)) if is_stale_owner(resp.status(), resp.headers()) => {
                // a `PUT` of a bound destination: answered as is, the
                // caller's retry re-resolves
                self.registry.evict(dest);
                telemetry::stale_owner("passed");
                Ok((resp, member))
            }
            _ => Ok((resp, member)),
        }
    }

    /// The forward and its one retry after a refused connection.
    async fn forward_or_reroute(
        &self,
        call: &Call,
        member: MemberRecord,
        epoch: Option<u64>,
        by: Reroute<'_>,
    ) -> Result<(Response, MemberRecord), Response> {
        let dest = match by {
            Reroute::Destination(dest, _) | Reroute::Allocation(Some(dest)) => Some(dest),
            Reroute::Allocation(None) => None,
        };
        let fence = dest.zip(epoch);
        match self.forward(call, &member, fence).await {
            Ok(resp) => Ok((resp, member)),
            Err(err @ ForwardError::Connect { .. }) if call.body.is_untouched() => {
                tracing::info!(route = ?by, member = %member.id, %err, "connect failed, choosing a member once more");
                // boxed: the lookup's state is allocated only on a retry
                let (retry, epoch) = match Box::pin(self.registry.reroute(by, &member.id)).await {
                    Ok(Some(m)) => m,
                    Ok(None) => return Err(call.failed(&err)),
                    Err(e) => return Err(store_error(e)),
                };
                match self.forward(call, &retry, dest.zip(epoch)).await {
                    Ok(resp) => Ok((resp, retry)),
                    Err(e) => Err(call.failed(&e)),
                }
            }
            Err(err) => Err(call.failed(&err)),
        }
    }
}

/// Whether a pod's answer is an ownership-fence refusal (421 with
/// `x-coordinator-refused: stale_owner`), not a 421 of the pod's own.
pub(super) fn is_stale_owner(status: http::StatusCode, headers: &http::HeaderMap) -> bool {
    status.as_u16() == STALE_OWNER_STATUS
        && headers
            .get(STALE_OWNER_HEADER)
            .is_some_and(|v| v.as_bytes() == STALE_OWNER.as_bytes())
}

/// Counts the answer to a call of `route` (`coordinator_requests_total`).
pub(super) fn counted(route: &'static str, response: Response) -> Response {
    telemetry::request(route, response.status());
    response
}

/// A handler's body: `handle` with the id the route's extractor read, or
/// the extractor's 400; either way the answer is counted under `route`.
pub(super) async fn counted_with<T, Fut>(
    route: &'static str,
    id: Result<T, ApiError>,
    handle: impl FnOnce(T) -> Fut,
) -> Response
where
    Fut: Future<Output = Response>,
{
    let response = match id {
        Ok(id) => handle(id).await,
        Err(e) => e.into_response(),
    };
    counted(route, response)
}
