//! Cancelling a call in flight through this coordinator:
//! `POST /cancel/{request_id}`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::http::call::counted;
use crate::http::coordinator::Coordinator;
use crate::http::errors::ApiError;
use crate::http::extract::CancelledRequest;
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

pub(super) async fn handler(
    State(c): State<Coordinator>,
    id: Result<CancelledRequest, ApiError>,
) -> Response {
    let response = match id {
        Ok(CancelledRequest(id)) if c.cancel(&id).await => StatusCode::NO_CONTENT.into_response(),
        Ok(_) => ApiError::UnknownRequest.into_response(),
        Err(e) => e.into_response(),
    };
    counted("cancel", response)
}
