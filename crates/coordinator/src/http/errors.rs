//! The coordinator's own error answers: one status and one stable `code` per
//! cause, as a JSON body `{"error": "<message>", "code": "<code>"}`.
//!
//! The full table (every route, every status) is `docs/coordinator-http.md`.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

/// Why the coordinator answered instead of the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiError {
    /// 400 `invalid_id`: a destination, lock or request id is malformed.
    InvalidId,
    /// 400 `invalid_path`: the path holds a `.` or `..` segment (also
    /// percent-encoded), which a pod could resolve to another route.
    InvalidPath,
    /// 404 `unknown_destination`: the destination has no pod set and first
    /// touch is off.
    UnknownDestination,
    /// 503 `no_live_member`: no live member can serve the destination.
    NoLiveMember,
    /// 404 `unknown_lock`: no such lock (never minted, released or expired).
    UnknownLock,
    /// 404 `lock_owner_gone`: the pod that minted the lock is dead; its
    /// session is lost and the caller starts a new one.
    LockOwnerGone,
    /// 503 `lock_owner_unreachable`: the lock owner's record is live but its
    /// address refuses connections.
    LockOwnerUnreachable,
    /// 404 `unknown_request`: no call with this request id is in flight here.
    UnknownRequest,
    /// 404 `no_route`: no coordinator route matches the path.
    NoRoute,
    /// 409 `request_id_in_use`: the caller's `x-request-id` names a call
    /// already in flight through this coordinator.
    RequestIdInUse,
    /// 409 `bound_elsewhere`: *pick and register* (or *register from
    /// response*) forwarded to a pod that answered 2xx, but another live
    /// pod holds the destination (a racing bind or first touch, a live
    /// owner outside this coordinator's address policy, a name the pod
    /// reused): the pod picked was not bound.
    BoundElsewhere,
    /// 413 `payload_too_large`: the request body is larger than
    /// `CoordinatorConfigBuilder::max_request_body`.
    PayloadTooLarge,
    /// 503 `store_unavailable`: Valkey failed or could not be reached.
    StoreUnavailable,
    /// 502 `upstream_unavailable`: the pod could not be reached (after one
    /// re-resolve) or broke the exchange.
    UpstreamUnavailable,
    /// 504 `upstream_timeout`: the pod's response headers did not arrive in
    /// time.
    UpstreamTimeout,
    /// 502 `missing_destination_id`: a pod answered a *register from
    /// response* call with 2xx but without a valid
    /// [`DESTINATION_ID_HEADER`](super::DESTINATION_ID_HEADER); nothing was
    /// registered.
    MissingDestinationId,
}

impl ApiError {
    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            ApiError::InvalidId | ApiError::InvalidPath => StatusCode::BAD_REQUEST,
            ApiError::UnknownDestination
            | ApiError::UnknownLock
            | ApiError::LockOwnerGone
            | ApiError::UnknownRequest
            | ApiError::NoRoute => StatusCode::NOT_FOUND,
            ApiError::NoLiveMember
            | ApiError::LockOwnerUnreachable
            | ApiError::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestIdInUse | ApiError::BoundElsewhere => StatusCode::CONFLICT,
            ApiError::UpstreamUnavailable | ApiError::MissingDestinationId => {
                StatusCode::BAD_GATEWAY
            }
            ApiError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The stable machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            ApiError::InvalidId => "invalid_id",
            ApiError::InvalidPath => "invalid_path",
            ApiError::UnknownDestination => "unknown_destination",
            ApiError::NoLiveMember => "no_live_member",
            ApiError::UnknownLock => "unknown_lock",
            ApiError::LockOwnerGone => "lock_owner_gone",
            ApiError::LockOwnerUnreachable => "lock_owner_unreachable",
            ApiError::UnknownRequest => "unknown_request",
            ApiError::NoRoute => "no_route",
            ApiError::RequestIdInUse => "request_id_in_use",
            ApiError::BoundElsewhere => "bound_elsewhere",
            ApiError::PayloadTooLarge => "payload_too_large",
            ApiError::StoreUnavailable => "store_unavailable",
            ApiError::UpstreamUnavailable => "upstream_unavailable",
            ApiError::UpstreamTimeout => "upstream_timeout",
            ApiError::MissingDestinationId => "missing_destination_id",
        }
    }

    /// A human-readable message (never carries upstream or Valkey text).
    pub fn message(self) -> &'static str {
        match self {
            ApiError::InvalidId => "malformed id",
            ApiError::InvalidPath => "dot segments are not allowed in the path",
            ApiError::UnknownDestination => "unknown destination",
            ApiError::NoLiveMember => "no live member for destination",
            ApiError::UnknownLock => "unknown lock",
            ApiError::LockOwnerGone => "the pod holding the lock is gone",
            ApiError::LockOwnerUnreachable => "the pod holding the lock is unreachable",
            ApiError::UnknownRequest => "no such request in flight",
            ApiError::NoRoute => "no such route",
            ApiError::RequestIdInUse => "a call with this request id is in flight",
            ApiError::BoundElsewhere => {
                "another live pod holds the destination; the pod picked was not bound"
            }
            ApiError::PayloadTooLarge => "request body too large",
            ApiError::StoreUnavailable => "coordination store unavailable",
            ApiError::UpstreamUnavailable => "upstream unavailable",
            ApiError::UpstreamTimeout => "upstream timeout",
            ApiError::MissingDestinationId => {
                "the pod answered without a valid destination id; nothing was registered"
            }
        }
    }

    /// The JSON body.
    pub fn body(self) -> String {
        serde_json::json!({ "error": self.message(), "code": self.code() }).to_string()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message(), self.code())
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status(), self.body()).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

/// The same answer as [`IntoResponse`], so that `?` turns an `ApiError`
/// into the response a handler returns early.
impl From<ApiError> for Response {
    fn from(err: ApiError) -> Self {
        err.into_response()
    }
}

/// Whether `path` has a `.` or `..` segment, literal or percent-encoded.
pub(crate) fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| {
        let mut dots = 0;
        let mut rest = seg;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                rest = r;
            } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case("%2e") {
                rest = &rest[3..];
            } else {
                return false;
            }
            dots += 1;
        }
        dots == 1 || dots == 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_found_encoded_or_not() {
        for bad in [
            "/destinations/x/../admin",
            "/destinations/x/./a",
            "/destinations/%2e%2E/a",
            "/destinations/x/.%2e",
            "/destinations/x/..",
        ] {
            assert!(has_dot_segment(bad), "{bad}");
        }
        for ok in [
            "/destinations/x/a.b",
            "/destinations/.../a",
            "/destinations/x/..a",
            "/",
        ] {
            assert!(!has_dot_segment(ok), "{ok}");
        }
    }

    #[test]
    fn bodies_are_json_with_a_code() {
        let v: serde_json::Value = serde_json::from_str(&ApiError::LockOwnerGone.body()).unwrap();
        assert_eq!(v["code"], "lock_owner_gone");
        assert_eq!(ApiError::LockOwnerGone.status(), StatusCode::NOT_FOUND);
    }
}
