//! Plain HTTP/1.1 connections to pods, pooled by pod, on hyper's low-level
//! client API (`hyper::client::conn::http1`).
//!
//! The general-purpose pooled client (hyper-util's) spawns a task per
//! request that waits for the connection to be reusable, keys its pool by
//! scheme and authority behind a lock, and boxes the connector's future.
//! Here a connection goes back to its pod's idle list the moment the
//! response body ends, checked out again by the next call to that pod; one
//! task per connection drives it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::request_body::OnceBody;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a pooled exchange failed.
pub(crate) enum PoolError {
    /// No connection could be opened: the pod never saw the call.
    Connect(BoxError),
    /// The exchange failed after the request was handed to a connection.
    Upstream(BoxError),
}

/// Idle connections by pod (`host:port`, the port always written). A sweeper task, started
/// with the first connection and ending with the pool, closes connections
/// idle past the idle timeout and forgets pods with none left, so pods that
/// come and go do not accumulate.
pub(crate) struct Http1Pool {
    idle: Mutex<HashMap<String, Vec<IdleConn>>>,
    max_idle_per_host: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    sweeper: AtomicBool,
}

struct IdleConn {
    sender: SendRequest<OnceBody>,
    since: Instant,
}

impl Http1Pool {
    pub(crate) fn new(
        max_idle_per_host: usize,
        idle_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            idle: Mutex::default(),
            max_idle_per_host,
            idle_timeout,
            connect_timeout,
            sweeper: AtomicBool::new(false),
        }
    }

    /// Closes the connections idle too long (or closed by their pod) and
    /// forgets pods with no idle connection left.
    fn sweep(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|_, list| {
            list.retain(|c| !c.sender.is_closed() && c.since.elapsed() < self.idle_timeout);
            !list.is_empty()
        });
    }

    /// Starts the sweeper once; it holds the pool weakly and ends with it.
    fn start_sweeper(self: &Arc<Self>) {
        if self.sweeper.swap(true, Ordering::Relaxed) {
            return;
        }
        let pool = Arc::downgrade(self);
        let every = (self.idle_timeout / 2).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                pool.sweep();
            }
        });
    }

    /// An idle connection to `authority` still open, if any.
    fn take_idle(&self, authority: &str) -> Option<SendRequest<OnceBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(authority)?;
        while let Some(conn) = list.pop() {
            if !conn.sender.is_closed() && conn.since.elapsed() < self.idle_timeout {
                return Some(conn.sender);
            }
        }
        None
    }

    /// Puts a connection whose last response ended back in the idle list.
    fn give_back(&self, authority: &str, sender: SendRequest<OnceBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = match idle.get_mut(authority) {
            Some(list) => list,
            None => idle.entry(authority.to_owned()).or_default(),
        };
        if list.len() < self.max_idle_per_host {
            list.push(IdleConn {
                sender,
                since: Instant::now(),
            });
        }
    }

    async fn connect(self: &Arc<Self>, authority: &str) -> Result<SendRequest<OnceBody>, BoxError> {
        self.start_sweeper();
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(authority))
            .await
            .map_err(|_| format!("connect timed out after {:?}", self.connect_timeout))??;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(%err, "pod connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Sends `req` (origin-form URI, `Host` set) to the pod at `authority`
    /// on an idle connection, or a new one; a request an idle connection
    /// turned out unable to take (closed meanwhile) goes on a new one.
    pub(crate) async fn send(
        self: &Arc<Self>,
        authority: &str,
        mut req: Request<OnceBody>,
    ) -> Result<Response<PodBody>, PoolError> {
        if let Some(mut sender) = self.take_idle(authority)
            && sender.ready().await.is_ok()
        {
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(self.pooled(authority, sender, resp)),
                Err(mut err) => match err.take_message() {
                    // not sent: the connection closed meanwhile
                    Some(back) => req = back,
                    None => return Err(PoolError::Upstream(err.into_error().into())),
                },
            }
        }
        let mut sender = self.connect(authority).await.map_err(PoolError::Connect)?;
        match sender.send_request(req).await {
            Ok(resp) => Ok(self.pooled(authority, sender, resp)),
            Err(err) => Err(PoolError::Upstream(err.into())),
        }
    }

    fn pooled(
        self: &Arc<Self>,
        authority: &str,
        sender: SendRequest<OnceBody>,
        resp: Response<Incoming>,
    ) -> Response<PodBody> {
        let (parts, inner) = resp.into_parts();
        let mut body = PodBody {
            inner,
            conn: Some((sender, self.clone(), authority.to_owned())),
        };
        body.release_if_ended();
        Response::from_parts(parts, body)
    }
}

/// A pod's response body, streamed as it arrives (`Bytes` frames, no
/// copies). Over plain HTTP/1.1 its connection goes back to the pool when
/// it ends; dropping it before its end closes that connection.
pub struct PodBody {
    inner: Incoming,
    /// The pooled connection the body came on, given back when the body
    /// ends; `None` for a body of the general client, or once given back
    /// or failed.
    conn: Option<(SendRequest<OnceBody>, Arc<Http1Pool>, String)>,
}

impl PodBody {
    /// A body of the general-purpose client: no connection to give back.
    pub(crate) fn client(inner: Incoming) -> Self {
        Self { inner, conn: None }
    }

    fn release_if_ended(&mut self) {
        if self.inner.is_end_stream()
            && let Some((sender, pool, authority)) = self.conn.take()
        {
            pool.give_back(&authority, sender);
        }
    }
}

impl std::fmt::Debug for PodBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodBody").finish_non_exhaustive()
    }
}

impl http_body::Body for PodBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.release_if_ended(),
            Poll::Ready(Some(Ok(_))) => self.release_if_ended(),
            Poll::Ready(Some(Err(_))) => self.conn = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::extract::ConnectInfo;
    use axum::routing::get;
    use http_body_util::BodyExt;
    use std::collections::HashSet;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pool() -> Arc<Http1Pool> {
        Arc::new(Http1Pool::new(
            8,
            Duration::from_secs(60),
            Duration::from_secs(2),
        ))
    }

    fn get_req(authority: &str, path: &str) -> Request<OnceBody> {
        Request::builder()
            .uri(path)
            .header(http::header::HOST, authority)
            .body(OnceBody::empty())
            .unwrap()
    }

    /// A keep-alive pod that records the peer address of every connection.
    async fn counting_pod() -> (String, Arc<Mutex<HashSet<SocketAddr>>>) {
        let seen: Arc<Mutex<HashSet<SocketAddr>>> = Arc::default();
        let record = seen.clone();
        let app = Router::new()
            .route(
                "/small",
                get(move |ConnectInfo(peer): ConnectInfo<SocketAddr>| {
                    record.lock().unwrap().insert(peer);
                    async { "ok" }
                }),
            )
            .route("/big", get(|| async { "x".repeat(1 << 20) }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        });
        (addr.to_string(), seen)
    }

    async fn call(pool: &Arc<Http1Pool>, authority: &str, path: &str) -> Bytes {
        let resp = match pool.send(authority, get_req(authority, path)).await {
            Ok(resp) => resp,
            Err(PoolError::Connect(e) | PoolError::Upstream(e)) => panic!("{e}"),
        };
        assert!(resp.status().is_success());
        resp.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_response_body_ended() {
        let (authority, seen) = counting_pod().await;
        let pool = pool();
        for _ in 0..5 {
            assert_eq!(&call(&pool, &authority, "/small").await[..], b"ok");
        }
        assert_eq!(seen.lock().unwrap().len(), 1, "one connection for 5 calls");
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_closes_its_connection() {
        let (authority, seen) = counting_pod().await;
        let pool = pool();
        assert_eq!(&call(&pool, &authority, "/small").await[..], b"ok");
        let resp = match pool.send(&authority, get_req(&authority, "/big")).await {
            Ok(resp) => resp,
            Err(_) => panic!("big call failed"),
        };
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.is_data());
        drop(body); // most of the megabyte unread
        assert_eq!(&call(&pool, &authority, "/small").await[..], b"ok");
        // the first connection carried /small and /big, then was dropped
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn connections_idle_past_the_idle_timeout_are_closed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        // answers one request, keeps the connection open, then reports
        // whether the coordinator closed it (EOF) within 2 s
        let closed = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            let _ = socket.read(&mut buf).await.unwrap();
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            let eof = tokio::time::timeout(Duration::from_secs(2), socket.read(&mut buf)).await;
            matches!(eof, Ok(Ok(0)))
        });
        let pool = Arc::new(Http1Pool::new(
            8,
            Duration::from_millis(100),
            Duration::from_secs(2),
        ));
        assert_eq!(&call(&pool, &authority, "/").await[..], b"ok");
        assert!(closed.await.unwrap(), "the idle connection was kept open");
        assert!(pool.idle.lock().unwrap().is_empty(), "the pod is forgotten");
    }

    #[tokio::test]
    async fn a_connection_the_pod_closed_while_idle_is_replaced() {
        // answers one request per connection, then closes it without
        // saying so (no `connection: close`), as a pod's idle timeout does
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0; 4096];
                    let _ = socket.read(&mut buf).await;
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                });
            }
        });
        let pool = pool();
        for _ in 0..3 {
            assert_eq!(&call(&pool, &authority, "/").await[..], b"ok");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
