//! Cancelling a call in flight through this coordinator:
//! `POST /cancel/{request_id}`, and the caller's own request id
//! (`x-request-id` on a destination or lock call) that it cancels by.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};

use crate::http::REQUEST_ID_HEADER;
use crate::http::call::counted_with;
use crate::http::coordinator::{Coordinator, Shared};
use crate::http::errors::ApiError;
use crate::http::extract::{CancelledRequest, Id};
use crate::ids::RequestId;

/// Whether `id` has the shape of [`RequestId::generate`]: 32 lowercase hex
/// digits. A caller-chosen id is the capability to cancel the call, so a
/// short or patterned one is refused.
fn looks_generated(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

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

impl Coordinator {
    /// The request id of a destination or lock call: the caller's
    /// `x-request-id` when it sent one (32 lowercase hex digits, as
    /// [`RequestId::generate`] mints; 400 `invalid_id` otherwise, 409
    /// `request_id_in_use` while a call with that id is in flight here), a
    /// fresh one when it did not.
    pub(super) fn caller_request_id(&self, headers: &HeaderMap) -> Result<RequestId, ApiError> {
        let Some(value) = headers.get(REQUEST_ID_HEADER) else {
            return Ok(RequestId::generate());
        };
        let id = value
            .to_str()
            .ok()
            .filter(|s| looks_generated(s))
            .and_then(|s| RequestId::new(s).ok())
            .ok_or(ApiError::InvalidId)?;
        if self.forwarder.is_in_flight(&id) {
            return Err(ApiError::RequestIdInUse);
        }
        Ok(id)
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

#[cfg(test)]
mod tests {
    use super::looks_generated;
    use crate::ids::RequestId;

    #[test]
    fn caller_ids_must_look_generated() {
        assert!(looks_generated(RequestId::generate().as_str()));
        for bad in [
            "",
            "1",
            "abc",
            &"A".repeat(32),
            &"a".repeat(31),
            &"g".repeat(32),
        ] {
            assert!(!looks_generated(bad), "{bad:?}");
        }
    }
}
