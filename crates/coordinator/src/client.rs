//! A small typed client for callers of a coordinator: calls by destination,
//! and sessions (begin, calls under the lock, commit / abort) without
//! hand-built paths or headers.
//!
//! The contract it speaks is `docs/coordinator-http.md`: calls go to
//! `/destinations/{d}/...` and `/locks/{lock}/...`; the coordinator's own
//! errors are JSON `{"error", "code"}` answers without an `x-request-id`
//! header, which is how they are told apart from the pod's answers.
//!
//! ```no_run
//! use coordinator::DestinationId;
//! use coordinator::client::CoordinatorClient;
//!
//! # async fn demo() -> Result<(), coordinator::client::ClientError> {
//! let client = CoordinatorClient::new("http://127.0.0.1:8080")?;
//! let tenant = DestinationId::new("acme")?;
//! let resp = client.call(&tenant, http::Method::GET, "/kv/greeting", "").await?;
//! println!("{} {:?}", resp.status, resp.body);
//!
//! // the pod answers the begin call with {"lock": "<id>"} (or `x-lock-id`)
//! let session = client.begin(&tenant, "/transactions", "").await?;
//! session.call(http::Method::PUT, "/kv/a", "1").await?;
//! session.commit("/commit").await?;
//! # Ok(()) }
//! ```
//!
//! Every call carries a request id (`x-request-id`) the client chose, so a
//! running call can be cancelled from elsewhere by
//! [`CoordinatorClient::cancel`], and a client built
//! [`with_timeout`](CoordinatorClient::with_timeout) cancels a call that
//! outlives it:
//!
//! ```no_run
//! use std::time::Duration;
//! use coordinator::{DestinationId, RequestId};
//! use coordinator::client::{ClientError, CoordinatorClient};
//!
//! # async fn demo() -> Result<(), ClientError> {
//! let client = CoordinatorClient::new("http://127.0.0.1:8080")?;
//! let tenant = DestinationId::new("acme")?;
//! let id = RequestId::generate();
//! let slow = tokio::spawn({
//!     let (client, tenant, id) = (client.clone(), tenant.clone(), id.clone());
//!     async move { client.call_with_id(&tenant, http::Method::GET, "/report", "", &id).await }
//! });
//! // from another connection (or another process that knows the id)
//! assert!(client.cancel(&id).await?, "the call was in flight");
//! let _cancelled = slow.await;
//!
//! // a call that outlives 2 s answers `ClientError::Timeout` and is cancelled
//! let hasty = client.with_timeout(Duration::from_secs(2));
//! match hasty.call(&tenant, http::Method::GET, "/report", "").await {
//!     Err(ClientError::Timeout { request_id, .. }) => println!("cancelled {request_id}"),
//!     other => println!("{other:?}"),
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::http::REQUEST_ID_HEADER;
use crate::ids::{DestinationId, LockId, RequestId};

/// The header a pod may use to return a new session's lock id.
pub const LOCK_ID_HEADER: &str = "x-lock-id";

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The base URL or a path is not usable.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// An id was malformed.
    #[error(transparent)]
    Id(#[from] crate::Error),
    /// The coordinator could not be reached or the exchange broke.
    #[error("transport: {0}")]
    Transport(String),
    /// The coordinator answered itself with an error (see its `code`).
    #[error("coordinator answered {status} {code}: {message}")]
    Coordinator {
        /// The HTTP status.
        status: StatusCode,
        /// The stable code, e.g. `no_live_member`.
        code: String,
        /// The human-readable message.
        message: String,
    },
    /// `begin` got an answer without a lock id.
    #[error("the begin call answered {0} without a lock id")]
    NoLock(StatusCode),
    /// The whole call (answer and body) took longer than the client's
    /// timeout; the client sent `POST /cancel/{request_id}` for it.
    #[error("call {request_id} timed out after {after:?} and was cancelled")]
    Timeout {
        /// The timed-out call's request id.
        request_id: RequestId,
        /// The client's timeout.
        after: Duration,
    },
}

/// A pod's answer, relayed by the coordinator.
#[derive(Clone, Debug)]
pub struct PodResponse {
    /// The pod's status.
    pub status: StatusCode,
    /// The pod's headers (hop-by-hop ones removed), with `x-request-id`.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

/// A client of one coordinator. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CoordinatorClient {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
    timeout: Option<Duration>,
}

/// Percent-encodes `s` as one URL path segment (everything but
/// `A-Z a-z 0-9 - . _ ~` is escaped).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl CoordinatorClient {
    /// A client of the coordinator at `base` (`http://host:port`).
    pub fn new(base: &str) -> Result<Self, ClientError> {
        let uri: Uri = base
            .parse()
            .map_err(|_| ClientError::InvalidUrl(base.to_owned()))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(ClientError::InvalidUrl(format!(
                "{base}: expected http://host:port"
            )));
        }
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http: Client::builder(TokioExecutor::new()).build_http(),
            timeout: None,
        })
    }

    /// This client with every call bounded by `timeout` (answer and whole
    /// body): a call that outlives it is abandoned, cancelled with
    /// [`CoordinatorClient::cancel`] and answers [`ClientError::Timeout`].
    /// Without it (the default) calls are not bounded by the client.
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        Self {
            timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// Cancels the call running under `request_id` through this coordinator
    /// (`POST /cancel/{request_id}`), from any connection: the pod stops
    /// it and its caller gets the pod's answer to a cancelled call (499 for
    /// the coordinator's pods). `true` if the call was in flight and the pod
    /// knew it; `false` if not (finished, never started, or sent through
    /// another coordinator).
    ///
    /// # Errors
    ///
    /// [`ClientError::Transport`] when the coordinator cannot be reached,
    /// [`ClientError::Coordinator`] for its other error answers.
    pub async fn cancel(&self, request_id: &RequestId) -> Result<bool, ClientError> {
        let url = format!("{}/cancel/{}", self.base, segment(request_id.as_str()));
        match self.exchange(Method::POST, &url, Bytes::new(), None).await {
            Ok(resp) => Ok(resp.status == StatusCode::NO_CONTENT),
            Err(ClientError::Coordinator { code, .. }) if code == "unknown_request" => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sends `method` to `/destinations/{dest}{path}` (`path` empty or
    /// starting with `/`, query allowed) under a fresh request id.
    pub async fn call(
        &self,
        dest: &DestinationId,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<PodResponse, ClientError> {
        self.call_with_id(dest, method, path, body, &RequestId::generate())
            .await
    }

    /// [`CoordinatorClient::call`] under `request_id` (mint it with
    /// [`RequestId::generate`]: the coordinator refuses other shapes with
    /// 400 `invalid_id`, and an id in flight with 409
    /// `request_id_in_use`), so that [`CoordinatorClient::cancel`] can
    /// stop the call while it runs.
    pub async fn call_with_id(
        &self,
        dest: &DestinationId,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
        request_id: &RequestId,
    ) -> Result<PodResponse, ClientError> {
        let url = format!(
            "{}/destinations/{}{path}",
            self.base,
            segment(dest.as_str())
        );
        self.send(method, &url, body.into(), request_id).await
    }

    /// Begins a session: `POST /destinations/{dest}{path}`; the pod answers
    /// 2xx with the lock id in the `x-lock-id` header or a JSON field
    /// `lock`.
    pub async fn begin(
        &self,
        dest: &DestinationId,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<Session, ClientError> {
        let resp = self.call(dest, Method::POST, path, body).await?;
        let from_header = resp
            .headers
            .get(LOCK_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let from_body = || {
            serde_json::from_slice::<serde_json::Value>(&resp.body)
                .ok()
                .and_then(|v| v.get("lock").and_then(|l| l.as_str()).map(str::to_owned))
        };
        let lock = match from_header.or_else(from_body) {
            Some(l) if resp.status.is_success() => LockId::new(l)?,
            _ => return Err(ClientError::NoLock(resp.status)),
        };
        Ok(Session {
            client: self.clone(),
            lock,
        })
    }

    /// A session over an existing lock id.
    pub fn session(&self, lock: LockId) -> Session {
        Session {
            client: self.clone(),
            lock,
        }
    }

    /// One call under `request_id`, bounded by the client's timeout (on
    /// expiry the call is dropped and cancelled by id).
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Bytes,
        request_id: &RequestId,
    ) -> Result<PodResponse, ClientError> {
        let call = self.exchange(method, url, body, Some(request_id));
        let Some(after) = self.timeout else {
            return call.await;
        };
        match tokio::time::timeout(after, call).await {
            Ok(result) => result,
            Err(_) => {
                // dropping the call closed its connection, which cancels it
                // too; the explicit cancel also covers a pooled connection
                let cancel = tokio::time::timeout(after, self.cancel(request_id)).await;
                if !matches!(cancel, Ok(Ok(true))) {
                    tracing::debug!(%request_id, ?cancel, "cancel after timeout");
                }
                Err(ClientError::Timeout {
                    request_id: request_id.clone(),
                    after,
                })
            }
        }
    }

    async fn exchange(
        &self,
        method: Method,
        url: &str,
        body: Bytes,
        request_id: Option<&RequestId>,
    ) -> Result<PodResponse, ClientError> {
        let mut req = Request::builder().method(method).uri(url);
        if let Some(id) = request_id {
            req = req.header(REQUEST_ID_HEADER, id.as_str());
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| ClientError::InvalidUrl(format!("{url}: {e}")))?;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?
            .to_bytes();
        // the coordinator's own answers carry no request id
        if !parts.headers.contains_key(REQUEST_ID_HEADER) && !parts.status.is_success() {
            let json = serde_json::from_slice::<serde_json::Value>(&body).ok();
            let field = |name: &str| {
                json.as_ref()
                    .and_then(|v| v.get(name))
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            };
            if let Some(code) = field("code") {
                return Err(ClientError::Coordinator {
                    status: parts.status,
                    code,
                    message: field("error").unwrap_or_default(),
                });
            }
        }
        Ok(PodResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// Calls made under one lock: every call goes to the pod that minted it.
#[derive(Clone, Debug)]
pub struct Session {
    client: CoordinatorClient,
    lock: LockId,
}

impl Session {
    /// The lock id.
    pub fn lock(&self) -> &LockId {
        &self.lock
    }

    /// Sends `method` to `/locks/{lock}{path}` under a fresh request id
    /// (bounded by the client's timeout, as every call).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<PodResponse, ClientError> {
        let url = format!(
            "{}/locks/{}{path}",
            self.client.base,
            segment(self.lock.as_str())
        );
        let id = RequestId::generate();
        self.client.send(method, &url, body.into(), &id).await
    }

    /// Ends the session with `POST /locks/{lock}{path}` (e.g. `/commit`).
    pub async fn commit(self, path: &str) -> Result<PodResponse, ClientError> {
        self.call(Method::POST, path, Bytes::new()).await
    }

    /// Abandons the session with `POST /locks/{lock}{path}` (e.g. `/rollback`).
    pub async fn abort(self, path: &str) -> Result<PodResponse, ClientError> {
        self.call(Method::POST, path, Bytes::new()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_escaped_as_one_segment() {
        assert_eq!(segment("node:pod:3"), "node%3Apod%3A3");
        assert_eq!(segment("user@x y/?#"), "user%40x%20y%2F%3F%23");
        assert_eq!(segment("plain-id_1.~"), "plain-id_1.~");
    }

    #[test]
    fn base_urls_are_checked() {
        assert!(CoordinatorClient::new("http://127.0.0.1:8080/").is_ok());
        assert!(CoordinatorClient::new("ftp://x").is_err());
        assert!(CoordinatorClient::new("nope").is_err());
    }
}
