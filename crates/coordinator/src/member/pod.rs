//! Pod-side HTTP glue: the cancel endpoint, a middleware that makes
//! handlers cancellable by request id, and the ownership fence
//! ([`fenced`]), one line to adopt:
//!
//! ```no_run
//! # async fn app(member: coordinator::Member) {
//! use axum::{Router, middleware, routing::get};
//! use coordinator::http::pod;
//!
//! let app: Router = Router::new()
//!     .route("/destinations/{destination}/query", get(|| async { "rows" }))
//!     .layer(middleware::from_fn_with_state(member.clone(), pod::fenced));
//! # }
//! ```
//!
//! ```no_run
//! use axum::{Router, middleware, routing::post};
//! use coordinator::{CancelRegistry, http::pod};
//!
//! let cancels = CancelRegistry::new();
//! let app: Router = Router::new()
//!     .route("/destinations/{destination}/query", post(|| async { "rows" }))
//!     .layer(middleware::from_fn_with_state(cancels.clone(), pod::cancellable))
//!     .merge(pod::cancel_router(cancels));
//! ```

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::StatusCode;
use tokio_util::sync::CancellationToken;

use crate::http::{
    EPOCH_HEADER, REQUEST_ID_HEADER, ROUTED_DESTINATION_HEADER, STALE_OWNER_HEADER,
    STALE_OWNER_STATUS,
};
use crate::ids::{DestinationId, RequestId};
use crate::member::cancel::CancelRegistry;
use crate::member::{Member, OwnershipRefusal};

/// The value of [`STALE_OWNER_HEADER`] and of `error` in the JSON body of
/// a fence refusal.
pub const STALE_OWNER: &str = "stale_owner";

/// The route of the cancel endpoint on pods.
pub const CANCEL_ROUTE: &str = "/_coordinator/cancel/{request_id}";

/// The path of the cancel message for `id`.
pub fn cancel_path(id: &RequestId) -> String {
    format!("/_coordinator/cancel/{id}")
}

/// Status answered for a call cancelled by a cancel message (nginx's
/// "client closed request"; nobody is normally left to read it).
pub const CANCELLED_STATUS: u16 = 499;

/// `POST /_coordinator/cancel/{request_id}`: 204 if the call was in flight,
/// 404 if not, 400 for a malformed id.
pub fn cancel_router(registry: CancelRegistry) -> Router {
    Router::new()
        .route(CANCEL_ROUTE, post(cancel_handler))
        .with_state(registry)
}

async fn cancel_handler(
    State(registry): State<CancelRegistry>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = RequestId::new(id) else {
        return (StatusCode::BAD_REQUEST, "malformed request id").into_response();
    };
    if registry.cancel(&id) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        StatusCode::NOT_FOUND.into_response()
    }
}

/// Middleware (`axum::middleware::from_fn_with_state(registry, cancellable)`)
/// registering each call that carries a valid request id. The call's
/// [`CancellationToken`] is put in the request extensions for cooperative
/// checks; a cancel message drops the handler's future and answers 499.
pub async fn cancellable(
    State(registry): State<CancelRegistry>,
    mut req: Request,
    next: Next,
) -> Response {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| RequestId::new(v).ok());
    let Some(id) = id else {
        return next.run(req).await;
    };
    let call = registry.register(id);
    let token: CancellationToken = call.token().clone();
    req.extensions_mut().insert(token.clone());
    tokio::select! {
        biased;
        _ = token.cancelled() => {
            tracing::debug!(request_id = %call.id(), "call cancelled");
            let status = StatusCode::from_u16(CANCELLED_STATUS).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            (status, "cancelled").into_response()
        }
        resp = next.run(req) => resp,
    }
}

/// Middleware (`axum::middleware::from_fn_with_state(member, fenced)`)
/// applying the ownership fence ([`Member::check_ownership`]) to every call
/// a coordinator routed for a destination (one carrying
/// [`EPOCH_HEADER`] and
/// [`ROUTED_DESTINATION_HEADER`]).
///
/// - accepted: the handler runs. A routed `DELETE /destinations/{d}` (the
///   coordinator's *lookup and deregister*) that the handler answers 2xx
///   makes this pod leave `d` before the answer goes out
///   ([`Member::remove_from_destination`]): it raises its own fence, so the
///   routes cached before the deletion are refused whoever claims `d`
///   next;
/// - refused (this pod's registration is not live by its own clock, the
///   epoch is older than one seen or than the destination's epoch read on
///   first sight, this pod is not in the set or is leaving it): 421
///   Misdirected Request, header `x-coordinator-refused: stale_owner`, JSON
///   `{"error":"stale_owner","reason":...}` ([`OwnershipRefusal::reason`]);
///   the handler does not run. The coordinator re-resolves and forwards
///   once more;
/// - a malformed epoch or destination header, or one without the other:
///   400, the handler does not run;
/// - no fence headers at all (a call not routed by a coordinator: a health
///   check, an operator's direct call): the handler runs, unchecked. Expose
///   the pod's port to coordinators only if every call must be fenced.
pub async fn fenced(State(member): State<Member>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let fence = match (
        headers.get(EPOCH_HEADER),
        headers.get(ROUTED_DESTINATION_HEADER),
    ) {
        (None, None) => return next.run(req).await,
        (Some(epoch), Some(dest)) => epoch
            .to_str()
            .ok()
            .and_then(|e| e.parse::<u64>().ok())
            .zip(dest.to_str().ok().and_then(|d| DestinationId::new(d).ok())),
        _ => None,
    };
    let Some((epoch, dest)) = fence else {
        return (
            StatusCode::BAD_REQUEST,
            "malformed coordinator fence headers",
        )
            .into_response();
    };
    let deregistration =
        req.method() == http::Method::DELETE && names_destination(req.uri().path(), &dest);
    match member.check_ownership(&dest, epoch).await {
        Ok(()) if deregistration => {
            let resp = next.run(req).await;
            if resp.status().is_success() {
                match member.remove_from_destination(&dest).await {
                    Ok(left) => {
                        tracing::info!(destination = %dest, epoch = left, "deregistered: left the destination");
                    }
                    Err(err) => {
                        tracing::warn!(destination = %dest, %err, "deregistered, but leaving the destination failed: it stays refused, the leave is retried");
                    }
                }
            }
            resp
        }
        Ok(()) => next.run(req).await,
        Err(refusal) => {
            tracing::info!(destination = %dest, epoch, %refusal, "refused a routed call: stale owner");
            stale_owner_response(refusal)
        }
    }
}

/// Whether `path` is `/destinations/{dest}` (percent-decoded), the route of
/// the coordinator's *lookup and deregister*.
fn names_destination(path: &str, dest: &DestinationId) -> bool {
    path.strip_prefix("/destinations/")
        .filter(|rest| !rest.contains('/'))
        .and_then(|rest| {
            percent_encoding::percent_decode_str(rest)
                .decode_utf8()
                .ok()
        })
        .is_some_and(|rest| rest == dest.as_str())
}

/// The answer to a call refused by the ownership fence.
pub fn stale_owner_response(refusal: OwnershipRefusal) -> Response {
    let status =
        StatusCode::from_u16(STALE_OWNER_STATUS).unwrap_or(StatusCode::MISDIRECTED_REQUEST);
    let body = serde_json::json!({ "error": STALE_OWNER, "reason": refusal.reason() });
    let mut resp = (status, axum::Json(body)).into_response();
    resp.headers_mut().insert(
        STALE_OWNER_HEADER,
        http::HeaderValue::from_static(STALE_OWNER),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_destination_route_itself_is_a_deregistration() {
        let d = DestinationId::new("tenant x").unwrap();
        assert!(names_destination("/destinations/tenant%20x", &d));
        assert!(!names_destination("/destinations/tenant%20x/kv/k", &d));
        assert!(!names_destination("/destinations/tenant", &d));
        assert!(!names_destination("/locks/tenant%20x", &d));
    }
}
