//! The pooled HTTP client that forwards calls to member addresses.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, Version, request};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::headers::strip_hop_by_hop;
use super::in_flight::InFlightCalls;
use super::pod::cancel_path;
use super::pool::{Http1Pool, PodBody, PoolError};
use super::request_body::OnceBody;
use super::{EPOCH_HEADER, REQUEST_ID_HEADER, ROUTED_DESTINATION_HEADER};
use crate::address::MemberAddress;
use crate::error::{Error, Result};
use crate::ids::{DestinationId, RequestId};

/// Timeouts and pooling of the forwarding client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardConfig {
    /// TCP connect timeout (default 2 s).
    pub connect_timeout: Duration,
    /// Time allowed until the pod's response headers arrive (default 30 s);
    /// the body then streams without a deadline.
    pub response_timeout: Duration,
    /// How long idle pooled connections are kept (default 90 s).
    pub pool_idle_timeout: Duration,
    /// Idle connections kept per pod (default 64).
    pub pool_max_idle_per_host: usize,
    /// Speak HTTP/2 with prior knowledge (h2c) to pods instead of HTTP/1.1.
    pub http2_prior_knowledge: bool,
    /// Time allowed for a cancel message (default 2 s).
    pub cancel_timeout: Duration,
    /// PEM file of the CA that signs `https` members' certificates; `None`
    /// trusts the system's roots.
    pub tls_ca_file: Option<PathBuf>,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(30),
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 64,
            http2_prior_knowledge: false,
            cancel_timeout: Duration::from_secs(2),
            tls_ca_file: None,
        }
    }
}

impl ForwardConfig {
    /// Checks that every timeout is within 1 ms..=1 h.
    pub fn validate(&self) -> Result<()> {
        for (name, d) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("pool_idle_timeout", self.pool_idle_timeout),
            ("cancel_timeout", self.cancel_timeout),
        ] {
            if d < Duration::from_millis(1) || d > Duration::from_secs(3600) {
                return Err(Error::InvalidConfig(format!(
                    "{name} must be within 1 ms..=1 h, got {d:?}"
                )));
            }
        }
        Ok(())
    }
}

/// Why a forward failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardError {
    /// No connection to the pod could be opened; the pod never saw the call.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// The pod address.
        address: String,
        /// The client error.
        #[source]
        source: BoxError,
    },
    /// The pod did not answer within the response timeout.
    #[error("no response from {address} within {timeout:?}")]
    Timeout {
        /// The pod address.
        address: String,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The exchange with the pod failed after connecting.
    #[error("exchange with {address} failed: {source}")]
    Upstream {
        /// The pod address.
        address: String,
        /// The client error.
        #[source]
        source: BoxError,
    },
    /// The upstream request could not be built.
    #[error("cannot build the upstream request: {0}")]
    Request(String),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Forwards calls to pods over a pooled hyper client. Cheap to clone.
///
/// Clones share one pooled client (a clone is one reference count).
#[derive(Clone)]
pub struct Forwarder {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client<HttpsConnector<HttpConnector>, OnceBody>,
    /// Plain HTTP/1.1 members (every `http` member unless h2c is on).
    h1: Option<Arc<Http1Pool>>,
    config: ForwardConfig,
    in_flight: InFlightCalls,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// A forwarder with `config`. Needs a Tokio runtime when used.
    ///
    /// `http` members are called in cleartext (HTTP/1.1, or h2c with
    /// [`ForwardConfig::http2_prior_knowledge`]); `https` members over
    /// rustls, their certificate verified against
    /// [`ForwardConfig::tls_ca_file`] or the system roots.
    pub fn new(config: ForwardConfig) -> Result<Self> {
        config.validate()?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let tls = crate::tls::client_config(config.tls_ca_file.as_deref())?;
        let builder = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let connector = if config.http2_prior_knowledge {
            builder.enable_http2().wrap_connector(connector)
        } else {
            builder.enable_http1().wrap_connector(connector)
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .http2_only(config.http2_prior_knowledge)
            .build(connector);
        let h1 = (!config.http2_prior_knowledge).then(|| {
            Arc::new(Http1Pool::new(
                config.pool_max_idle_per_host,
                config.pool_idle_timeout,
                config.connect_timeout,
            ))
        });
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                h1,
                config,
                in_flight: InFlightCalls::new(),
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &ForwardConfig {
        &self.inner.config
    }

    fn version(&self) -> Version {
        if self.inner.config.http2_prior_knowledge {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        }
    }

    /// Forwards `req` to the member at `address`: same method, path and
    /// query, hop-by-hop headers removed, `Host` set to the pod and
    /// `x-request-id: request_id` added; the request body and the pod's
    /// response body are streamed. The response headers arrive within
    /// [`ForwardConfig::response_timeout`].
    ///
    /// This is the forwarding step of the coordinator's handlers, for
    /// routes of your own (e.g. *register from response*: pick a member
    /// with [`crate::Registry::pick_member`], forward, then bind the id the
    /// pod answered with [`crate::Registry::add_pod_to_destination`]).
    /// Unlike the handlers it does not retry, and does not send a cancel
    /// message if the caller gives up (use [`Forwarder::send_cancel`]).
    ///
    /// ```no_run
    /// use coordinator::RequestId;
    /// use coordinator::http::{ForwardConfig, Forwarder};
    ///
    /// # async fn demo(member: coordinator::MemberRecord, req: axum::extract::Request)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// let forwarder = Forwarder::new(ForwardConfig::default())?;
    /// let resp = forwarder.send(&member.address, req, &RequestId::generate()).await?;
    /// println!("pod answered {}", resp.status());
    /// # Ok(()) }
    /// ```
    pub async fn send(
        &self,
        address: &MemberAddress,
        req: Request<axum::body::Body>,
        request_id: &RequestId,
    ) -> Result<Response<PodBody>, ForwardError> {
        let (parts, body) = req.into_parts();
        let body = super::request_body::RetryableBody::new(body);
        self.send_parts(address, &parts, body.attempt(), request_id)
            .await
    }

    /// Sends `parts` + `body` to `address`, same method, path and query,
    /// hop-by-hop headers removed, `Host` set to the pod and the request id
    /// header added.
    pub(crate) async fn send_parts(
        &self,
        address: &MemberAddress,
        parts: &request::Parts,
        body: OnceBody,
        request_id: &RequestId,
    ) -> Result<Response<PodBody>, ForwardError> {
        self.send_fenced(address, parts, body, request_id, None)
            .await
    }

    /// [`Forwarder::send_parts`], stamped with `fence` (the destination and
    /// its epoch) when given. The fence headers a client sent are removed
    /// either way: only the coordinator sets them.
    pub(crate) async fn send_fenced(
        &self,
        address: &MemberAddress,
        parts: &request::Parts,
        body: OnceBody,
        request_id: &RequestId,
        fence: Option<(&DestinationId, u64)>,
    ) -> Result<Response<PodBody>, ForwardError> {
        let pooled = self.pooled(address);
        let uri = match (pooled, parts.uri.path_and_query()) {
            // origin-form, as HTTP/1.1 sends it; `Host` names the pod
            (true, Some(pq)) => http::Uri::from(pq.clone()),
            (true, None) => http::Uri::from_static("/"),
            (false, pq) => address
                .uri_for(pq.map_or("/", |p| p.as_str()))
                .map_err(|e| ForwardError::Request(e.to_string()))?,
        };
        let mut headers = parts.headers.clone();
        strip_hop_by_hop(&mut headers);
        if pooled {
            let host = HeaderValue::from_str(address.authority().as_str())
                .map_err(|e| ForwardError::Request(e.to_string()))?;
            headers.insert(header::HOST, host);
        } else {
            headers.remove(header::HOST);
        }
        let id = HeaderValue::from_str(request_id.as_str())
            .map_err(|e| ForwardError::Request(e.to_string()))?;
        headers.insert(REQUEST_ID_HEADER, id);
        headers.remove(EPOCH_HEADER);
        headers.remove(ROUTED_DESTINATION_HEADER);
        if let Some((dest, epoch)) = fence {
            let dest = HeaderValue::from_str(dest.as_str())
                .map_err(|e| ForwardError::Request(e.to_string()))?;
            headers.insert(ROUTED_DESTINATION_HEADER, dest);
            headers.insert(EPOCH_HEADER, HeaderValue::from(epoch));
        }
        let mut req = Request::new(body);
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        *req.version_mut() = self.version();
        self.exchange(address, req, self.inner.config.response_timeout)
            .await
    }

    /// Whether calls to `address` go through the HTTP/1.1 pool.
    fn pooled(&self, address: &MemberAddress) -> bool {
        self.inner.h1.is_some() && !address.is_tls()
    }

    async fn exchange(
        &self,
        address: &MemberAddress,
        req: Request<OnceBody>,
        timeout: Duration,
    ) -> Result<Response<PodBody>, ForwardError> {
        let sent = match (&self.inner.h1, address.is_tls()) {
            (Some(pool), false) => {
                let target = connect_target(address);
                tokio::time::timeout(timeout, pool.send(&target, req)).await
            }
            _ => {
                let sent = tokio::time::timeout(timeout, self.inner.client.request(req)).await;
                sent.map(|r| {
                    r.map(|resp| resp.map(PodBody::client)).map_err(|source| {
                        match source.is_connect() {
                            true => PoolError::Connect(source.into()),
                            false => PoolError::Upstream(source.into()),
                        }
                    })
                })
            }
        };
        match sent {
            Err(_) => Err(ForwardError::Timeout {
                address: address.to_string(),
                timeout,
            }),
            Ok(Err(PoolError::Connect(source))) => Err(ForwardError::Connect {
                address: address.to_string(),
                source,
            }),
            Ok(Err(PoolError::Upstream(source))) => Err(ForwardError::Upstream {
                address: address.to_string(),
                source,
            }),
            Ok(Ok(mut resp)) => {
                strip_hop_by_hop(resp.headers_mut());
                Ok(resp)
            }
        }
    }

    /// Sends a cancel message for `request_id` to the pod at `address`
    /// (`POST /_coordinator/cancel/<id>`); `true` if the pod knew the call.
    pub async fn send_cancel(
        &self,
        address: &MemberAddress,
        request_id: &RequestId,
    ) -> Result<bool, ForwardError> {
        let path = cancel_path(request_id);
        let mut req = Request::new(OnceBody::empty());
        let uri = if self.pooled(address) {
            let host = HeaderValue::from_str(address.authority().as_str())
                .map_err(|e| ForwardError::Request(e.to_string()))?;
            req.headers_mut().insert(header::HOST, host);
            path.parse::<http::Uri>()
                .map_err(|e| ForwardError::Request(e.to_string()))?
        } else {
            address
                .uri_for(&path)
                .map_err(|e| ForwardError::Request(e.to_string()))?
        };
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri;
        *req.version_mut() = self.version();
        let resp = self
            .exchange(address, req, self.inner.config.cancel_timeout)
            .await?;
        Ok(resp.status().is_success())
    }

    /// Cancels a call this forwarder is running, by request id; `false` if
    /// no such call is in flight here.
    pub async fn cancel(&self, request_id: &RequestId) -> Result<bool, ForwardError> {
        let address = self.inner.in_flight.get(request_id);
        match address {
            Some(a) => self.send_cancel(&a, request_id).await,
            None => Ok(false),
        }
    }

    /// Whether a call with `request_id` is in flight through this forwarder.
    pub(crate) fn is_in_flight(&self, request_id: &RequestId) -> bool {
        self.inner.in_flight.get(request_id).is_some()
    }

    /// Registers a call in flight to `address`; the guard sends a cancel
    /// when dropped while armed.
    pub(crate) fn guard(&self, address: MemberAddress, request_id: RequestId) -> CancelGuard {
        self.inner
            .in_flight
            .insert(request_id.clone(), address.clone());
        CancelGuard {
            forwarder: self.clone(),
            address,
            request_id,
            armed: true,
        }
    }
}

/// `host:port` to connect to for a plain member: its authority, with the
/// scheme's default port added when it names none.
fn connect_target(address: &MemberAddress) -> std::borrow::Cow<'_, str> {
    let authority = address.authority();
    match authority.port_u16() {
        Some(_) => authority.as_str().into(),
        None => format!("{}:{}", authority.host(), address.port()).into(),
    }
}

/// Lives as long as a forwarded call; if dropped before the call completed
/// (client disconnect, timeout), it sends a cancel message to the pod.
pub(crate) struct CancelGuard {
    forwarder: Forwarder,
    address: MemberAddress,
    request_id: RequestId,
    armed: bool,
}

impl CancelGuard {
    /// The call completed (or never reached the pod): no cancel on drop.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.forwarder.inner.in_flight.remove(&self.request_id);
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(request_id = %self.request_id, "no runtime to send a cancel message");
            return;
        };
        let forwarder = self.forwarder.clone();
        let address = self.address.clone();
        let id = self.request_id.clone();
        rt.spawn(async move {
            match forwarder.send_cancel(&address, &id).await {
                Ok(known) => tracing::debug!(request_id = %id, %address, known, "sent cancel"),
                Err(err) => {
                    tracing::warn!(request_id = %id, %address, %err, "cancel message failed")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::any;
    use http::HeaderMap;
    use http_body_util::BodyExt;

    async fn echo_headers(headers: HeaderMap, body: axum::body::Bytes) -> String {
        let mut names: Vec<String> = headers
            .iter()
            .map(|(k, v)| format!("{k}={}", v.to_str().unwrap_or("?")))
            .collect();
        names.sort();
        format!("{}|{}", names.join(","), String::from_utf8_lossy(&body))
    }

    async fn upstream() -> MemberAddress {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/{*p}", any(echo_headers));
        tokio::spawn(async move { axum::serve(listener, app).await });
        MemberAddress::parse(&format!("http://{addr}")).unwrap()
    }

    fn parts(body: &'static str) -> (request::Parts, super::super::request_body::RetryableBody) {
        let req = Request::builder()
            .method("POST")
            .uri("http://coordinator.local/destinations/d/x?q=1")
            .header("host", "coordinator.local")
            .header("connection", "keep-alive, x-private")
            .header("x-private", "1")
            .header("te", "trailers")
            .header("x-app", "kept")
            .header(REQUEST_ID_HEADER, "forged")
            .body(axum::body::Body::from(body))
            .unwrap();
        let (parts, body) = req.into_parts();
        (parts, super::super::request_body::RetryableBody::new(body))
    }

    #[tokio::test]
    async fn forwards_body_and_end_to_end_headers_only() {
        let address = upstream().await;
        let forwarder = Forwarder::new(ForwardConfig::default()).unwrap();
        let (parts, body) = parts("payload");
        let id = RequestId::generate();
        let resp = forwarder
            .send_parts(&address, &parts, body.attempt(), &id)
            .await
            .unwrap();
        assert!(resp.status().is_success());
        let text = String::from_utf8(
            resp.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap();
        let (headers, body) = text.split_once('|').unwrap();
        assert_eq!(body, "payload");
        assert!(headers.contains("x-app=kept"), "{headers}");
        assert!(headers.contains(&format!("x-request-id={id}")), "{headers}");
        assert!(
            headers.contains(&format!("host={}", address.authority())),
            "{headers}"
        );
        for gone in ["x-private", "te=", "connection", "forged"] {
            assert!(!headers.contains(gone), "{gone} forwarded: {headers}");
        }
    }

    #[test]
    fn connects_to_the_default_port_when_the_address_names_none() {
        for (address, target) in [
            ("http://10.0.0.7:3000", "10.0.0.7:3000"),
            ("http://pod-a", "pod-a:80"),
            ("http://[::1]", "[::1]:80"),
            ("http://[::1]:8080", "[::1]:8080"),
        ] {
            let address = MemberAddress::parse(address).unwrap();
            assert_eq!(connect_target(&address), target);
        }
    }

    #[tokio::test]
    async fn speaks_h2c_with_prior_knowledge() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route(
            "/{*p}",
            any(|req: axum::extract::Request| async move { format!("{:?}", req.version()) }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let address = MemberAddress::parse(&format!("http://{addr}")).unwrap();
        let forwarder = Forwarder::new(ForwardConfig {
            http2_prior_knowledge: true,
            ..ForwardConfig::default()
        })
        .unwrap();
        let (parts, body) = parts("x");
        let resp = forwarder
            .send_parts(&address, &parts, body.attempt(), &RequestId::generate())
            .await
            .unwrap();
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&text[..], b"HTTP/2.0");
    }

    #[tokio::test]
    async fn refused_connection_is_a_connect_error_and_leaves_the_body_untouched() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address =
            MemberAddress::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        drop(listener);
        let forwarder = Forwarder::new(ForwardConfig::default()).unwrap();
        let (parts, body) = parts("payload");
        let err = forwarder
            .send_parts(&address, &parts, body.attempt(), &RequestId::generate())
            .await
            .unwrap_err();
        assert!(matches!(err, ForwardError::Connect { .. }), "{err}");
        assert!(body.is_untouched(), "the body can be retried");
    }
}
