//! Cancelling a call in flight through this coordinator:
//! `POST /cancel/{request_id}`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::http::call::counted_with;
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::http::extract::{CancelledRequest, Id};
use crate::ids::RequestId;

impl Coordinator {
    /// Sends a cancel message for a call this coordinator is forwarding;
    /// `false` if it is not in flight here (or the pod did not know it).
    pub async fn cancel(&self, request_id: &RequestId) -> bool {
        match self.forwarder.cancel(request_id).await {
            Ok(known) => known,
            Err(err) => {
                tracing::warn!(%err, "cancel failed");
                false
            }
        }
    }
}

pub(super) async fn handler(State(c): Shared, id: Id<CancelledRequest>) -> Response {
    counted_with("cancel", id, |CancelledRequest(id)| async move {
        match c.cancel(&id).await {
            true => StatusCode::NO_CONTENT.into_response(),
            false => ApiError::UnknownRequest.into_response(),
        }
    })
    .await
}
