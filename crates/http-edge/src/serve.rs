//! The server loop, its connection table and the per-connection task.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;

use crate::ServeError;

/// What [`serve`] returns.
pub type Result<T, E = ServeError> = std::result::Result<T, E>;

/// Limits of [`serve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeConfig {
    /// Time allowed for a request's headers to arrive (default 10 s).
    /// For HTTP/1 the clock starts as soon as the connection waits for a
    /// request, so a keep-alive connection idle this long is closed too.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight (response bodies included)
    /// for this long is closed (default 60 s). Bytes alone do not count as
    /// activity: a client that only trickles partial headers, pings or
    /// window updates (HTTP/2) is closed after this long.
    pub idle_timeout: Duration,
    /// Most connections open at once (default 1024). [`serve`] lowers it
    /// to what the process's file-descriptor limit allows (after raising
    /// the soft limit to the hard one): half the descriptors left after
    /// [`RESERVED_FDS`](crate::RESERVED_FDS), the other half being for the
    /// upstream connections proxied requests open.
    pub max_connections: usize,
    /// Time a closing connection gets to finish before it is dropped
    /// (default 1 s).
    pub close_grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            close_grace: Duration::from_secs(1),
        }
    }
}

impl ServeConfig {
    /// Checks the bounds: timeouts within 1 ms..=1 h, 1..=1 000 000
    /// connections.
    pub fn validate(&self) -> Result<()> {
        for (name, d) in [
            ("header_read_timeout", self.header_read_timeout),
            ("idle_timeout", self.idle_timeout),
            ("close_grace", self.close_grace),
        ] {
            if d < Duration::from_millis(1) || d > Duration::from_secs(3600) {
                return Err(ServeError::InvalidConfig(format!(
                    "{name} must be within 1 ms..=1 h, got {d:?}"
                )));
            }
        }
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return Err(ServeError::InvalidConfig(format!(
                "max_connections must be within 1..=1000000, got {}",
                self.max_connections
            )));
        }
        Ok(())
    }
}

/// What one open connection is doing.
struct ConnState {
    /// Milliseconds since the server's start when a request last started or
    /// finished (its response body sent), or the connection opened.
    last_active: AtomicU64,
    /// Requests whose responses, bodies included, are not sent yet.
    in_flight: AtomicUsize,
    /// Asks the connection to close.
    close: CancellationToken,
}

impl ConnState {
    fn touch(&self, clock: &Clock) {
        self.last_active.store(clock.now_ms(), Ordering::Relaxed);
    }
}

#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// The open connections, for the cap.
#[derive(Default)]
struct Table {
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes room for one more connection: `true` if there is room (perhaps
    /// after asking the longest-idle connection to close), `false` if every
    /// connection is busy.
    fn admit(&self, max: usize) -> bool {
        let conns = self.lock();
        let open = conns.values().filter(|c| !c.close.is_cancelled()).count();
        open < max || Self::shed(&conns)
    }

    /// Asks the longest-idle connection (no request in flight) to close:
    /// `false` if every connection is busy.
    fn shed_idle(&self) -> bool {
        Self::shed(&self.lock())
    }

    fn shed(conns: &HashMap<u64, Arc<ConnState>>) -> bool {
        let victim = conns
            .values()
            .filter(|c| !c.close.is_cancelled() && c.in_flight.load(Ordering::Relaxed) == 0)
            .min_by_key(|c| c.last_active.load(Ordering::Relaxed));
        match victim {
            Some(v) => {
                v.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// Counts a request in flight until dropped (it travels with the response
/// body); its start and end are the connection's activity.
struct Busy {
    state: Arc<ConnState>,
    clock: Clock,
}

impl Busy {
    fn new(state: &Arc<ConnState>, clock: Clock) -> Self {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        state.touch(&clock);
        Self {
            state: state.clone(),
            clock,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.state.touch(&self.clock);
        self.state.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted in flight until it is
/// sent (or dropped).
struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl hyper::body::Body for BusyBody {
    type Data = <Body as hyper::body::Body>::Data;
    type Error = <Body as hyper::body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether an accept error concerns only the one connection (retry at once)
/// rather than the process (back off, e.g. out of file descriptors).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Whether an accept error means the process or the system is out of file
/// descriptors (EMFILE, ENFILE).
fn is_out_of_fds(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    )
}

/// First and longest pause after a failed `accept`; it doubles on each
/// failure in a row and resets on success.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(500));

/// Serves `app` on `listener` with the limits of `config` until `shutdown`
/// completes; then stops accepting, asks every connection to close and
/// waits for them (each gets [`ServeConfig::close_grace`]).
///
/// HTTP/1.1 and HTTP/2 (h2c) are both spoken. The soft file-descriptor
/// limit is raised to the hard one ([`raise_fd_limit`](crate::raise_fd_limit))
/// and the connection cap lowered to what it allows (see
/// [`ServeConfig::max_connections`]); when `accept` fails for want of
/// descriptors, the longest-idle connection is closed and accepting backs
/// off (5 ms, doubling to 500 ms) rather than spinning.
///
/// ```no_run
/// use http_edge::{ServeConfig, serve};
///
/// # async fn demo(app: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// serve(listener, app, ServeConfig::default(), async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    config.validate()?;
    let fd_limit = crate::raise_fd_limit();
    let cap = crate::fds::connection_cap(config.max_connections, fd_limit);
    if cap < config.max_connections {
        tracing::info!(
            configured = config.max_connections,
            cap,
            fd_limit,
            "connection cap lowered to fit the file-descriptor limit"
        );
    }
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let config = Arc::new(config);
    let table = Arc::new(Table::default());
    let clock = Clock(Instant::now());
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let mut next_id: u64 = 0;
    let mut backoff = ACCEPT_BACKOFF.0;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(x) => {
                backoff = ACCEPT_BACKOFF.0;
                x
            }
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                let shed = is_out_of_fds(&e) && table.shed_idle();
                tracing::warn!(err = %e, ?backoff, shed, "accept failed; backing off");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                continue;
            }
        };
        if !table.admit(cap) {
            tracing::debug!(%peer, "connection cap reached and every connection is busy: refusing");
            drop(stream);
            continue;
        }
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, err = %e, "cannot set TCP_NODELAY");
        }
        next_id = next_id.wrapping_add(1);
        let id = next_id;
        let state = Arc::new(ConnState {
            last_active: AtomicU64::new(clock.now_ms()),
            in_flight: AtomicUsize::new(0),
            close: stop.child_token(),
        });
        table.lock().insert(id, state.clone());
        let conn = ConnTask {
            builder: builder.clone(),
            config: config.clone(),
            app: app.clone(),
            state,
            clock,
        };
        let table = table.clone();
        tasks.spawn(async move {
            conn.run(stream).await;
            table.lock().remove(&id);
        });
    }
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// One connection's task.
struct ConnTask {
    builder: Arc<auto::Builder<TokioExecutor>>,
    config: Arc<ServeConfig>,
    app: Router,
    state: Arc<ConnState>,
    clock: Clock,
}

impl ConnTask {
    /// When the connection becomes idle-closable if nothing happens first.
    fn idle_deadline(&self) -> tokio::time::Instant {
        if self.state.in_flight.load(Ordering::Relaxed) > 0 {
            return tokio::time::Instant::now() + self.config.idle_timeout;
        }
        let last = self.state.last_active.load(Ordering::Relaxed);
        let idle_for = Duration::from_millis(self.clock.now_ms().saturating_sub(last));
        tokio::time::Instant::now() + self.config.idle_timeout.saturating_sub(idle_for)
    }

    fn is_idle(&self) -> bool {
        let last = self.state.last_active.load(Ordering::Relaxed);
        let idle_for = Duration::from_millis(self.clock.now_ms().saturating_sub(last));
        self.state.in_flight.load(Ordering::Relaxed) == 0 && idle_for >= self.config.idle_timeout
    }

    async fn run(self, stream: TcpStream) {
        let io = TokioIo::new(stream);
        let app = self.app.clone();
        let state = self.state.clone();
        let clock = self.clock;
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = Busy::new(&state, clock);
            let mut app = app.clone();
            async move {
                let resp = app.call(req.map(Body::new)).await?;
                Ok::<_, std::convert::Infallible>(resp.map(|inner| BusyBody { inner, _busy: busy }))
            }
        });
        let conn = self.builder.serve_connection_with_upgrades(io, service);
        tokio::pin!(conn);
        // One timer and one cancellation waiter per connection, not per
        // wake-up: the idle timer is only moved when it fires early (the
        // connection was active meanwhile).
        let close = self.state.close.clone();
        let cancelled = close.cancelled();
        tokio::pin!(cancelled);
        let idle = tokio::time::sleep_until(self.idle_deadline());
        tokio::pin!(idle);
        let mut closing: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                done = conn.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(err = %e, "connection ended with an error");
                    }
                    return;
                }
                () = cancelled.as_mut(), if closing.is_none() => {
                    conn.as_mut().graceful_shutdown();
                    closing = Some(tokio::time::Instant::now() + self.config.close_grace);
                }
                () = idle.as_mut(), if closing.is_none() => {
                    if self.is_idle() {
                        tracing::debug!("closing an idle connection");
                        self.state.close.cancel();
                        conn.as_mut().graceful_shutdown();
                        closing = Some(tokio::time::Instant::now() + self.config.close_grace);
                    } else {
                        idle.as_mut().reset(self.idle_deadline());
                    }
                }
                () = sleep_until_opt(closing) => {
                    tracing::debug!("connection did not close within the grace period: dropping it");
                    return;
                }
            }
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
