//! Shared fixtures: a real Valkey/Redis (from `VALKEY_URL`), resource pods
//! served by axum, and coordinators.

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod hold_proxy;
mod http_client;
mod server;

pub use hold_proxy::*;
pub use http_client::*;
pub use server::*;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use bytes::Bytes;
use coordinator::http::{
    Coordinator, CoordinatorConfig, ForwardConfig, Forwarder, ServeConfig, pod,
};
use coordinator::strategy::{DynStrategy, RoundRobin};
use coordinator::{
    CacheConfig, DestinationId, LockId, Member, MemberAddress, MemberConfig, MemberId, Registry,
    RegistryConfig, Resolution, ResolveOptions, SaturationConfig, ValkeyClient,
};
use fred::prelude::*;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Connects to `VALKEY_URL`; panics (the test fails) if it is unset or down.
pub async fn valkey() -> ValkeyClient {
    let url =
        std::env::var("VALKEY_URL").expect("VALKEY_URL is not set; run `cargo xtask test-drivers`");
    coordinator::connect(&url, Duration::from_secs(2))
        .await
        .expect("cannot connect to VALKEY_URL")
}

/// A prefix no other test uses.
pub fn prefix() -> String {
    format!("t{}", coordinator::RequestId::generate())
}

pub fn dest(s: &str) -> DestinationId {
    DestinationId::new(s).unwrap()
}

pub fn mid(s: &str) -> MemberId {
    MemberId::new(s).unwrap()
}

/// Polls `check` every 50 ms until it holds or `within` elapses.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn smembers(client: &ValkeyClient, key: &str) -> BTreeSet<String> {
    client
        .smembers::<Vec<String>, _>(key)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

pub async fn exists(client: &ValkeyClient, key: &str) -> bool {
    client.exists::<i64, _>(key).await.unwrap() > 0
}

/// Waits up to `within` for `key` to leave Valkey (a record expiring).
pub async fn gone_within(client: &ValkeyClient, key: &str, within: Duration) -> bool {
    eventually(within, || async { !exists(client, key).await }).await
}

/// Waits up to `within` for `pod`'s member record to expire.
pub async fn member_record_expires(client: &ValkeyClient, pod: &TestPod, within: Duration) -> bool {
    let key = pod.member.keys().member(pod.id());
    gone_within(client, &key, within).await
}

/// What a test pod observed.
#[derive(Default)]
pub struct PodStats {
    pub hits: AtomicUsize,
    pub slow_started: AtomicUsize,
    /// Slow calls dropped while their cancel token was cancelled (the cancel
    /// message aborted them).
    pub aborted_by_cancel: AtomicUsize,
    /// Slow calls dropped without a cancel (connection closed).
    pub dropped_otherwise: AtomicUsize,
    /// Cancel messages received.
    pub cancels_received: AtomicUsize,
}

/// A resource pod: a Member plus an axum server.
pub struct TestPod {
    pub member: Member,
    pub addr: std::net::SocketAddr,
    pub stats: Arc<PodStats>,
    heartbeat: Option<coordinator::HeartbeatTask>,
    shutdown: CancellationToken,
    server: Option<JoinHandle<()>>,
}

#[derive(Clone)]
struct PodState {
    member: Member,
    stats: Arc<PodStats>,
    work_ms: u64,
}

pub struct PodOptions {
    pub ttl: Duration,
    pub heartbeat: Duration,
    pub lock_ttl: Duration,
    pub saturation: SaturationConfig,
    /// How long `/destinations/{d}/work` holds its permit.
    pub work_ms: u64,
    /// Put the ownership fence (`pod::fenced`) in front of the pod's routes.
    pub fenced: bool,
}

impl Default for PodOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(2),
            heartbeat: Duration::from_millis(300),
            lock_ttl: Duration::from_secs(2),
            saturation: SaturationConfig::default(),
            work_ms: 0,
            fenced: false,
        }
    }
}

struct SlowGuard {
    token: CancellationToken,
    stats: Arc<PodStats>,
}

impl Drop for SlowGuard {
    fn drop(&mut self) {
        if self.token.is_cancelled() {
            self.stats.aborted_by_cancel.fetch_add(1, Ordering::SeqCst);
        } else {
            self.stats.dropped_otherwise.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn pod_destination(
    State(s): State<PodState>,
    Path(d): Path<String>,
    req: Request,
) -> Response {
    s.stats.hits.fetch_add(1, Ordering::SeqCst);
    let id = s.member.id().to_string();
    match *req.method() {
        // provisioning: refuse destinations named "reject-*"
        axum::http::Method::PUT if d.starts_with("reject") => {
            (StatusCode::UNPROCESSABLE_ENTITY, id).into_response()
        }
        axum::http::Method::PUT => (StatusCode::CREATED, id).into_response(),
        _ => (StatusCode::OK, id).into_response(),
    }
}

/// `POST /destinations`: creates a destination named by the pod, answered
/// in the body and in `x-destination-id`; `?header=bad` names it `..`,
/// `?header=none` leaves the header out.
async fn pod_create(State(s): State<PodState>, req: Request) -> Response {
    let n = s.stats.hits.fetch_add(1, Ordering::SeqCst);
    let id = format!("s-{}-{n}", s.member.id());
    let header = match req.uri().query() {
        Some("header=bad") => Some(".."),
        Some("header=none") => None,
        _ => Some(id.as_str()),
    };
    let mut resp = (StatusCode::CREATED, id.clone()).into_response();
    if let Some(value) = header {
        resp.headers_mut().insert(
            coordinator::http::DESTINATION_ID_HEADER,
            axum::http::HeaderValue::from_str(value).unwrap(),
        );
    }
    resp
}

async fn pod_action(
    State(s): State<PodState>,
    Path((d, action)): Path<(String, String)>,
    req: Request,
) -> Response {
    s.stats.hits.fetch_add(1, Ordering::SeqCst);
    let id = s.member.id().to_string();
    let d = DestinationId::new(d).unwrap();
    match action.as_str() {
        "work" => {
            let _permit = s.member.acquire(&d).await.unwrap();
            tokio::time::sleep(Duration::from_millis(s.work_ms)).await;
            id.into_response()
        }
        "begin" => {
            let lock = s
                .member
                .new_lock(&d, [("kind".to_owned(), "tx".to_owned())])
                .await
                .unwrap();
            let mut resp = lock.to_string().into_response();
            resp.headers_mut().insert(
                "x-lock-id",
                axum::http::HeaderValue::from_str(lock.as_str()).unwrap(),
            );
            resp
        }
        "slow" => {
            let token = req
                .extensions()
                .get::<CancellationToken>()
                .cloned()
                .expect("cancellable middleware");
            let _guard = SlowGuard {
                token,
                stats: s.stats.clone(),
            };
            s.stats.slow_started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(30)).await;
            id.into_response()
        }
        "detached" => {
            // work that outlives the HTTP exchange (like a database query):
            // only a cancel message for the request id can stop it
            let request_id = req
                .headers()
                .get(coordinator::http::REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| coordinator::RequestId::new(v).ok())
                .expect("request id header");
            let call = s.member.cancellations().register(request_id);
            let stats = s.stats.clone();
            let work = tokio::spawn(async move {
                let token = call.token().clone();
                let _guard = SlowGuard {
                    token: token.clone(),
                    stats: stats.clone(),
                };
                stats.slow_started.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    _ = token.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
                drop(call);
            });
            let _ = work.await;
            id.into_response()
        }
        "upload" => match axum::body::to_bytes(req.into_body(), usize::MAX).await {
            Ok(body) => (StatusCode::OK, format!("{id}:{}", body.len())).into_response(),
            // The coordinator cut the body off (over its limit).
            Err(_) => StatusCode::BAD_REQUEST.into_response(),
        },
        _ => (StatusCode::OK, format!("{id}:{action}")).into_response(),
    }
}

async fn pod_lock(State(s): State<PodState>, Path(p): Path<Vec<(String, String)>>) -> Response {
    s.stats.hits.fetch_add(1, Ordering::SeqCst);
    let lock = LockId::new(p[0].1.clone()).unwrap();
    if s.member.holds_lock(&lock) {
        s.member.id().to_string().into_response()
    } else {
        StatusCode::GONE.into_response()
    }
}

async fn count_cancels(
    State(stats): State<Arc<PodStats>>,
    req: Request,
    next: middleware::Next,
) -> Response {
    if req.uri().path().starts_with("/_coordinator/cancel/") {
        stats.cancels_received.fetch_add(1, Ordering::SeqCst);
    }
    next.run(req).await
}

impl TestPod {
    pub fn cancels(&self) -> usize {
        self.stats.cancels_received.load(Ordering::SeqCst)
    }

    /// Binds a port, registers `id` under `prefix` and starts heartbeating.
    pub async fn start(prefix: &str, id: &str, opts: PodOptions) -> TestPod {
        Self::start_at(prefix, id, "127.0.0.1:0".parse().unwrap(), opts).await
    }

    /// [`TestPod::start`] at `addr` (a pod restarted at its old address).
    pub async fn start_at(
        prefix: &str,
        id: &str,
        addr: std::net::SocketAddr,
        opts: PodOptions,
    ) -> TestPod {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut config = MemberConfig::new(
            mid(id),
            MemberAddress::parse(&format!("http://{addr}")).unwrap(),
        );
        config.prefix = prefix.to_owned();
        config.ttl = opts.ttl;
        config.heartbeat_interval = opts.heartbeat;
        config.lock_ttl = opts.lock_ttl;
        config.saturation = opts.saturation;
        let member = Member::new(valkey().await, config).unwrap();
        member.register().await.unwrap();
        let heartbeat = Some(member.start_heartbeat());
        let stats = Arc::new(PodStats::default());
        let state = PodState {
            member: member.clone(),
            stats: stats.clone(),
            work_ms: opts.work_ms,
        };
        let cancels = member.cancellations().clone();
        let fence = opts.fenced.then(|| member.clone());
        let app = Router::new()
            .route("/destinations", axum::routing::post(pod_create))
            .route("/destinations/{destination}", any(pod_destination))
            .route("/destinations/{destination}/{action}", any(pod_action))
            .route("/locks/{lock}", any(pod_lock))
            .route("/locks/{lock}/{*rest}", any(pod_lock))
            .with_state(state)
            .layer(middleware::from_fn_with_state(
                cancels.clone(),
                pod::cancellable,
            ));
        let app = match fence {
            Some(member) => app.layer(middleware::from_fn_with_state(member, pod::fenced)),
            None => app,
        };
        let app = app
            .merge(pod::cancel_router(cancels))
            .layer(middleware::from_fn_with_state(stats.clone(), count_cancels));
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
                .unwrap();
        });
        TestPod {
            member,
            addr,
            stats,
            heartbeat,
            shutdown,
            server: Some(server),
        }
    }

    pub fn id(&self) -> &MemberId {
        self.member.id()
    }

    pub fn hits(&self) -> usize {
        self.stats.hits.load(Ordering::SeqCst)
    }

    /// Stops heartbeating (the record then expires) without deregistering.
    pub async fn stop_heartbeat(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.stop().await;
        }
    }

    /// Starts heartbeating again (after `stop_heartbeat`).
    pub fn restart_heartbeat(&mut self) {
        if self.heartbeat.is_none() {
            self.heartbeat = Some(self.member.start_heartbeat());
        }
    }

    /// Closes the HTTP server (idle connections included).
    pub async fn stop_server(&mut self) {
        self.shutdown.cancel();
        if let Some(s) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
    }

    /// A crash: no more heartbeats, no more HTTP; the record expires by TTL.
    pub async fn kill(&mut self) {
        self.stop_heartbeat().await;
        self.stop_server().await;
    }
}

/// A coordinator served over HTTP.
pub struct TestCoordinator {
    pub registry: Registry,
    pub coordinator: Coordinator,
    pub base: String,
    server: JoinHandle<()>,
}

impl Drop for TestCoordinator {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub struct CoordinatorOptions {
    pub cache: Option<CacheConfig>,
    pub strategy: DynStrategy,
    pub forward: ForwardConfig,
    pub config: CoordinatorConfig,
    /// Listener limits of the coordinator's server.
    pub serve: ServeConfig,
    /// Result hooks to add.
    pub hooks: Vec<Arc<dyn coordinator::http::ResultHook>>,
    /// The Valkey client of its registry (default: a direct one).
    pub valkey: Option<ValkeyClient>,
    /// The member addresses it forwards to.
    pub member_addresses: coordinator::AddressPolicy,
}

impl Default for CoordinatorOptions {
    fn default() -> Self {
        Self {
            cache: Some(CacheConfig::default()),
            strategy: Arc::new(RoundRobin::new()),
            forward: ForwardConfig::default(),
            config: CoordinatorConfig::default(),
            serve: ServeConfig::default(),
            hooks: Vec::new(),
            valkey: None,
            member_addresses: coordinator::AddressPolicy::default(),
        }
    }
}

pub async fn registry(prefix: &str, cache: Option<CacheConfig>, strategy: DynStrategy) -> Registry {
    let config = RegistryConfig {
        prefix: prefix.to_owned(),
        cache,
        ..RegistryConfig::default()
    };
    Registry::new(valkey().await, config, strategy).unwrap()
}

impl TestCoordinator {
    pub async fn start(prefix: &str, opts: CoordinatorOptions) -> TestCoordinator {
        let valkey = match opts.valkey {
            Some(client) => client,
            None => valkey().await,
        };
        let config = RegistryConfig {
            prefix: prefix.to_owned(),
            cache: opts.cache,
            member_addresses: opts.member_addresses,
        };
        let registry = Registry::new(valkey, config, opts.strategy).unwrap();
        let coordinator = opts.hooks.into_iter().fold(
            Coordinator::new(
                registry.clone(),
                Forwarder::new(opts.forward).unwrap(),
                opts.config,
            ),
            Coordinator::with_result_hook,
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = coordinator.router();
        let limits = opts.serve;
        let server = tokio::spawn(async move {
            coordinator::http::serve(listener, app, limits, std::future::pending())
                .await
                .unwrap();
        });
        TestCoordinator {
            registry,
            coordinator,
            base: format!("http://{addr}"),
            server,
        }
    }
}

/// A pod `pod-a` bound to destination `hot`, and a registry with a cache
/// that has not looked `hot` up yet, but has run its lookup script once (so
/// the next lookup is one round trip: EVALSHA may need a second trip once).
pub async fn pod_and_a_cold_destination(p: &str) -> (TestPod, Registry) {
    let pod = TestPod::start(p, "pod-a", PodOptions::default()).await;
    let reg = registry(p, Some(Default::default()), Arc::new(RoundRobin::new())).await;
    pod.member.add_to_destination(&dest("warm")).await.unwrap();
    reg.route(&dest("warm"), ResolveOptions::default())
        .await
        .unwrap();
    pod.member.add_to_destination(&dest("hot")).await.unwrap();
    (pod, reg)
}

/// Resolves `dest` in `n` tasks released at once; their answers.
pub async fn resolve_at_once(
    reg: &Registry,
    dest: &DestinationId,
    n: usize,
) -> Vec<coordinator::Result<Resolution>> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (reg, barrier, dest) = (reg.clone(), barrier.clone(), dest.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                reg.route(&dest, ResolveOptions::default()).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    answers
}
