//! Errors answered by the pod's and the coordinator's HTTP handlers.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio_postgres::error::SqlState;

/// Status for a call whose query was cancelled (nginx's "client closed
/// request", as the coordinator's pod glue uses).
const CANCELLED: u16 = coordinator::http::pod::CANCELLED_STATUS;

/// Why a call failed; each variant maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: a malformed id, key or parameter.
    #[error("{0}")]
    BadRequest(String),
    /// 404: no such key, or no such transaction on this pod.
    #[error("{0}")]
    NotFound(&'static str),
    /// 409: the transaction failed earlier and was rolled back.
    #[error("{0}")]
    Conflict(String),
    /// 503: PostgreSQL or Valkey is unavailable, or the pool is exhausted.
    #[error("{0}")]
    Unavailable(String),
    /// 500 (499 if the query was cancelled): PostgreSQL rejected a statement.
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(err: deadpool_postgres::PoolError) -> Self {
        use deadpool_postgres::PoolError;
        // the backend's text is logged, not answered
        tracing::warn!(error = %err, "connection pool error");
        Self::Unavailable(
            match err {
                PoolError::Timeout(_) => "connection pool: timed out",
                PoolError::Closed => "connection pool: closed",
                PoolError::Backend(_) => "connection pool: database unavailable",
                _ => "connection pool: unavailable",
            }
            .into(),
        )
    }
}

impl From<coordinator::Error> for ApiError {
    fn from(err: coordinator::Error) -> Self {
        Self::Unavailable(format!("coordination store: {err}"))
    }
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Db(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => {
                StatusCode::from_u16(CANCELLED).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
            }
            Self::Db(e) if e.is_closed() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Db(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(error = %self, "call failed");
        }
        let body = match &self {
            // PostgreSQL's text stays in the log: it can reveal schema,
            // data or server details to an untrusted caller
            Self::Db(e) => {
                tracing::warn!(error = %e, "database error");
                let sqlstate = e.code().map(|c| c.code().to_owned());
                serde_json::json!({ "error": "database error", "sqlstate": sqlstate })
            }
            _ => serde_json::json!({ "error": self.to_string() }),
        };
        (status, Json(body)).into_response()
    }
}
