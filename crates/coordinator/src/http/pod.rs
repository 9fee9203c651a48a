//! Pod-side HTTP glue: the cancel endpoint and a middleware that makes
//! handlers cancellable by request id.
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

use super::REQUEST_ID_HEADER;
use crate::cancel::CancelRegistry;
use crate::ids::RequestId;

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
