//! The coordinator's HTTP entry points: axum handlers and a ready router.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{RawPathParams, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post, put};
use http::request::Parts;
use http::{HeaderValue, StatusCode};

use super::body::{CappedBody, GuardedBody, RetryableBody};
use super::errors::{ApiError, has_dot_segment};
use super::forward::{ForwardError, Forwarder};
use super::hook::{CallResult, ResultHook};
use super::{DESTINATION_ID_HEADER, REQUEST_ID_HEADER};
use crate::error::Error;
use crate::ids::{DestinationId, LockId, RequestId};
use crate::record::MemberRecord;
use crate::registry::{Registry, Resolution, ResolveOptions};
use crate::strategy::PickPurpose;
use crate::telemetry;

/// Behaviour of the handlers; built with [`CoordinatorConfig::builder`].
///
/// Defaults follow the design: a call to a destination nobody owns yet
/// claims a live member (*first touch*), and a destination whose members
/// are all dead is reassigned (*failover*).
///
/// ```
/// use coordinator::http::CoordinatorConfig;
///
/// // opt out of first touch: unbound destinations answer 404 until a
/// // `PUT /destinations/{d}` binds them
/// let config = CoordinatorConfig::builder().claim_on_miss(false).build();
/// assert!(!config.lookup().claim_on_miss);
/// assert!(CoordinatorConfig::default().lookup().claim_on_miss);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoordinatorConfig {
    lookup: ResolveOptions,
    max_request_body: Option<u64>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl CoordinatorConfig {
    /// A builder starting from the defaults (first touch and failover on).
    pub fn builder() -> CoordinatorConfigBuilder {
        CoordinatorConfigBuilder {
            lookup: ResolveOptions {
                claim_on_miss: true,
                reassign_orphans: true,
            },
            max_request_body: None,
        }
    }

    /// The resolution used by *lookup and proxy*.
    pub fn lookup(&self) -> ResolveOptions {
        self.lookup
    }

    /// The largest request body forwarded, if limited.
    pub fn max_request_body(&self) -> Option<u64> {
        self.max_request_body
    }
}

/// Builds a [`CoordinatorConfig`].
#[derive(Clone, Copy, Debug)]
pub struct CoordinatorConfigBuilder {
    lookup: ResolveOptions,
    max_request_body: Option<u64>,
}

impl CoordinatorConfigBuilder {
    /// First touch (default on): a call to an unbound destination claims a
    /// live member with the strategy. Off: such calls answer 404
    /// `unknown_destination` until `PUT /destinations/{d}` binds one.
    pub fn claim_on_miss(mut self, on: bool) -> Self {
        self.lookup.claim_on_miss = on;
        self
    }

    /// Failover (default on): a destination whose members are all dead gets
    /// a fresh live member. Off: such calls answer 503 `no_live_member`.
    pub fn reassign_orphans(mut self, on: bool) -> Self {
        self.lookup.reassign_orphans = on;
        self
    }

    /// Largest request body to forward (default: unlimited, bodies are
    /// streamed). A larger `content-length` answers 413 `payload_too_large`
    /// before anything is forwarded; a streamed body that grows past it is
    /// cut off and answers 413 too.
    pub fn max_request_body(mut self, bytes: u64) -> Self {
        self.max_request_body = Some(bytes);
        self
    }

    /// The configuration.
    pub fn build(self) -> CoordinatorConfig {
        CoordinatorConfig {
            lookup: self.lookup,
            max_request_body: self.max_request_body,
        }
    }
}

/// Routes calls by destination or lock and forwards them to the owning pod.
/// Cheap to clone.
///
/// The coordinator's own answers are JSON `{"error", "code"}` bodies
/// ([`ApiError`]); the table of every route and status is
/// `docs/coordinator-http.md`.
#[derive(Clone)]
pub struct Coordinator {
    registry: Registry,
    forwarder: Forwarder,
    config: CoordinatorConfig,
    hooks: Arc<[Arc<dyn ResultHook>]>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("registry", &self.registry)
            .field("forwarder", &self.forwarder)
            .field("config", &self.config)
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

/// One incoming call, split so it can be retried once before its body is sent.
struct Call {
    parts: Parts,
    body: RetryableBody,
    request_id: RequestId,
    /// Set when the body went past the configured limit.
    too_large: Arc<AtomicBool>,
}

impl Call {
    /// Checks the path and the declared length, and caps the body at
    /// `limit` bytes.
    fn new(req: Request, request_id: RequestId, limit: Option<u64>) -> Result<Self, ApiError> {
        check_path(&req)?;
        let (parts, body) = req.into_parts();
        let too_large = Arc::new(AtomicBool::new(false));
        let body = match limit {
            None => body,
            Some(limit) => {
                let declared = parts
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if declared.is_some_and(|n| n > limit) {
                    return Err(ApiError::PayloadTooLarge);
                }
                Body::new(CappedBody::new(body, limit, too_large.clone()))
            }
        };
        Ok(Self {
            parts,
            body: RetryableBody::new(body),
            request_id,
            too_large,
        })
    }

    /// The answer for a failed forward of this call.
    fn failed(&self, err: &ForwardError) -> Response {
        if self.too_large.load(Ordering::Relaxed) {
            return ApiError::PayloadTooLarge.into_response();
        }
        forward_error(err)
    }
}

fn store_error(err: &Error) -> Response {
    tracing::warn!(%err, "coordination store error");
    telemetry::store_error("coordinator", err);
    ApiError::StoreUnavailable.into_response()
}

fn forward_error(err: &ForwardError) -> Response {
    tracing::warn!(%err, "forward failed");
    match err {
        ForwardError::Timeout { .. } => ApiError::UpstreamTimeout.into_response(),
        _ => ApiError::UpstreamUnavailable.into_response(),
    }
}

/// 400 for a path with a dot segment: a pod normalising it could serve
/// another route than the one the coordinator routed by.
fn check_path(req: &Request) -> Result<(), ApiError> {
    if has_dot_segment(req.uri().path()) {
        return Err(ApiError::InvalidPath);
    }
    Ok(())
}

impl Coordinator {
    /// A coordinator over `registry`, forwarding with `forwarder`.
    pub fn new(registry: Registry, forwarder: Forwarder, config: CoordinatorConfig) -> Self {
        Self {
            registry,
            forwarder,
            config,
            hooks: Arc::new([]),
        }
    }

    /// Adds a [`ResultHook`] that sees every forwarding attempt's result
    /// (after the hooks added before it).
    pub fn with_result_hook(mut self, hook: Arc<dyn ResultHook>) -> Self {
        let mut hooks = self.hooks.to_vec();
        hooks.push(hook);
        self.hooks = hooks.into();
        self
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The forwarder.
    pub fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }

    /// The ready-made routes:
    ///
    /// | route | handler |
    /// |---|---|
    /// | `POST /destinations` | [`Coordinator::register_from_response`] |
    /// | `PUT /destinations/{destination}` | [`Coordinator::pick_and_register`] |
    /// | `DELETE /destinations/{destination}` | [`Coordinator::lookup_and_deregister`] |
    /// | any other `/destinations/{destination}[/...]` | [`Coordinator::lookup_and_proxy`] |
    /// | any `/locks/{lock}[/...]` | [`Coordinator::lookup_lock_and_proxy`] |
    /// | `POST /cancel/{request_id}` | [`Coordinator::cancel`] (204 / 404) |
    ///
    /// The original path and query are forwarded unchanged.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/destinations", post(register_handler))
            .route(
                "/destinations/{destination}",
                put(bind_handler)
                    .delete(deregister_handler)
                    .fallback(proxy_handler),
            )
            .route("/destinations/{destination}/{*rest}", any(proxy_handler))
            .route("/locks/{lock}", any(lock_handler))
            .route("/locks/{lock}/{*rest}", any(lock_handler))
            .route("/cancel/{request_id}", post(cancel_handler))
            .fallback(|| async { counted("none", ApiError::NoRoute.into_response()) })
            .with_state(self.clone())
    }

    /// Forwards `member` the call; the response body carries the cancel guard.
    async fn forward(&self, call: &Call, member: &MemberRecord) -> Result<Response, ForwardError> {
        let guard = self
            .forwarder
            .guard(member.address.clone(), call.request_id.clone());
        let started = Instant::now();
        let sent = self
            .forwarder
            .send_parts(
                &member.address,
                &call.parts,
                call.body.attempt(),
                &call.request_id,
            )
            .await;
        let outcome = match &sent {
            Ok(_) => "ok",
            Err(ForwardError::Connect { .. }) => "connect_error",
            Err(ForwardError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        let elapsed = started.elapsed();
        telemetry::forwarded(outcome, elapsed);
        if !self.hooks.is_empty() {
            let result = CallResult {
                request_id: &call.request_id,
                member: &member.id,
                method: &call.parts.method,
                path: call.parts.uri.path(),
                status: sent.as_ref().ok().map(|r| r.status()),
                error: sent.as_ref().err(),
                elapsed,
            };
            for hook in self.hooks.iter() {
                hook.on_result(&result);
            }
        }
        match sent {
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                let mut resp =
                    Response::from_parts(parts, Body::new(GuardedBody::new(body, guard)));
                if let Ok(v) = HeaderValue::from_str(call.request_id.as_str()) {
                    resp.headers_mut().insert(REQUEST_ID_HEADER, v);
                }
                Ok(resp)
            }
            Err(e @ (ForwardError::Connect { .. } | ForwardError::Request(_))) => {
                guard.disarm();
                Err(e)
            }
            // dropping the armed guard sends a cancel to the pod
            Err(e) => Err(e),
        }
    }

    /// Forwards to `member`; if the connection fails before the body was
    /// sent, evicts the cached set, finds another member with `next` and
    /// tries once more.
    async fn forward_with_retry<F, Fut>(
        &self,
        dest: &DestinationId,
        call: &Call,
        member: MemberRecord,
        next: F,
    ) -> Result<(Response, MemberRecord), Response>
    where
        F: FnOnce(MemberRecord) -> Fut,
        Fut: Future<Output = Result<Option<MemberRecord>, Error>>,
    {
        match self.forward(call, &member).await {
            Ok(resp) => Ok((resp, member)),
            Err(err @ ForwardError::Connect { .. }) if call.body.is_untouched() => {
                tracing::info!(destination = %dest, member = %member.id, %err, "connect failed, re-resolving once");
                self.registry.evict(dest);
                let retry = match Box::pin(next(member)).await {
                    Ok(Some(m)) => m,
                    Ok(None) => return Err(call.failed(&err)),
                    Err(e) => return Err(store_error(&e)),
                };
                match self.forward(call, &retry).await {
                    Ok(resp) => Ok((resp, retry)),
                    Err(e) => Err(call.failed(&e)),
                }
            }
            Err(err) => Err(call.failed(&err)),
        }
    }

    /// Re-resolves `dest` from Valkey, preferring a member other than `failed`.
    async fn re_resolve(
        &self,
        dest: &DestinationId,
        opts: ResolveOptions,
        failed: MemberRecord,
    ) -> Result<Option<MemberRecord>, Error> {
        match self.registry.resolve_destination(dest, opts).await? {
            Resolution::Routed(route) => {
                let others: Vec<MemberRecord> = route
                    .set
                    .iter()
                    .filter(|m| m.id != failed.id)
                    .cloned()
                    .collect();
                if route.member.id != failed.id || others.is_empty() {
                    return Ok(Some(route.member));
                }
                Ok(self
                    .registry
                    .pick_in(Some(dest), &others, PickPurpose::Request))
            }
            _ => Ok(None),
        }
    }

    /// *Lookup and proxy*: routes `req` by `dest` (cache first) and forwards
    /// it. 404 when unbound (unless `claim_on_miss`), 503 when no member is
    /// live.
    pub async fn lookup_and_proxy(&self, dest: &DestinationId, req: Request) -> Response {
        self.lookup_and_proxy_with_id(dest, req, RequestId::generate())
            .await
    }

    /// [`Coordinator::lookup_and_proxy`] with a request id chosen by a
    /// trusted in-process caller, who can later [`Coordinator::cancel`] it.
    pub async fn lookup_and_proxy_with_id(
        &self,
        dest: &DestinationId,
        req: Request,
        request_id: RequestId,
    ) -> Response {
        let call = match Call::new(req, request_id, self.config.max_request_body) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let opts = self.config.lookup;
        let member = match self.routed_member(dest, opts).await {
            Ok(member) => member,
            Err(response) => return response,
        };
        match self
            .forward_with_retry(dest, &call, member, |failed| {
                self.re_resolve(dest, opts, failed)
            })
            .await
        {
            Ok((resp, _)) => resp,
            Err(resp) => resp,
        }
    }

    /// *Pick and register*: forwards to the destination's live member if it
    /// has one; otherwise picks a live member with the strategy, forwards,
    /// and binds it (`SADD`) only if the pod answers 2xx. 503 when no member
    /// is live.
    pub async fn pick_and_register(&self, dest: &DestinationId, req: Request) -> Response {
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let opts = ResolveOptions {
            claim_on_miss: false,
            reassign_orphans: false,
        };
        let (member, bound) = match self.registry.route(dest, opts).await {
            Ok(Resolution::Routed(r)) => (r.member, true),
            Ok(Resolution::Unbound | Resolution::NoLiveMember) => {
                match self.registry.pick_member(Some(dest)).await {
                    Ok(Some(m)) => (m, false),
                    Ok(None) => return ApiError::NoLiveMember.into_response(),
                    Err(e) => return store_error(&e),
                }
            }
            Err(e) => return store_error(&e),
        };
        let registry = self.registry.clone();
        let next = |failed: MemberRecord| async move {
            let live: Vec<MemberRecord> = registry
                .list_live_members()
                .await?
                .into_iter()
                .filter(|m| m.id != failed.id)
                .collect();
            Ok(registry.pick_in(Some(dest), &live, PickPurpose::FirstTouch))
        };
        let (resp, member) = match self.forward_with_retry(dest, &call, member, next).await {
            Ok(x) => x,
            Err(resp) => return resp,
        };
        if !bound && resp.status().is_success() {
            if let Err(e) = self.registry.add_pod_to_destination(dest, &member.id).await {
                return store_error(&e);
            }
            tracing::info!(destination = %dest, member = %member.id, "bound destination");
        }
        resp
    }

    /// *Register from response*: for destinations the pod names itself (a
    /// new session, a sandbox, an upload). Picks a live member with the
    /// strategy, forwards the call, and when the pod answers 2xx with a
    /// valid [`DESTINATION_ID_HEADER`], binds that destination to the pod
    /// (`SADD`) before the answer goes back, so the caller's next call to
    /// `/destinations/{id}` reaches the same pod. A refused connection is
    /// retried once on another live member. 503 `no_live_member` when none
    /// is live; 502 `missing_destination_id` when a 2xx answer has no valid
    /// id (the pod may have created something: it is told nothing more, so
    /// make creation idempotent or expire unclaimed resources).
    pub async fn register_from_response(&self, req: Request) -> Response {
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let member = match self.registry.pick_member(None).await {
            Ok(Some(m)) => m,
            Ok(None) => return ApiError::NoLiveMember.into_response(),
            Err(e) => return store_error(&e),
        };
        let (resp, member) = match self.forward(&call, &member).await {
            Ok(resp) => (resp, member),
            Err(err @ ForwardError::Connect { .. }) if call.body.is_untouched() => {
                tracing::info!(member = %member.id, %err, "connect failed, picking another member once");
                let live: Vec<MemberRecord> = match self.registry.list_live_members().await {
                    Ok(live) => live.into_iter().filter(|m| m.id != member.id).collect(),
                    Err(e) => return store_error(&e),
                };
                let Some(retry) = self.registry.pick_in(None, &live, PickPurpose::FirstTouch)
                else {
                    return call.failed(&err);
                };
                match self.forward(&call, &retry).await {
                    Ok(resp) => (resp, retry),
                    Err(e) => return call.failed(&e),
                }
            }
            Err(err) => return call.failed(&err),
        };
        if !resp.status().is_success() {
            return resp;
        }
        let named = resp
            .headers()
            .get(DESTINATION_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| DestinationId::new(v).ok());
        let Some(dest) = named else {
            tracing::warn!(member = %member.id, "pod answered 2xx without a valid destination id");
            return ApiError::MissingDestinationId.into_response();
        };
        if let Err(e) = self
            .registry
            .add_pod_to_destination(&dest, &member.id)
            .await
        {
            return store_error(&e);
        }
        self.registry.evict(&dest);
        tracing::info!(destination = %dest, member = %member.id, "registered destination from response");
        resp
    }

    /// *Lookup and deregister*: forwards to a live member of `dest` and, if
    /// the pod answers 2xx, deletes the destination's pod set. 404 when
    /// unbound; when every member of the set is dead there is nothing to
    /// tear down on a pod: the set is deleted and the answer is 204 (as the
    /// Node coordinator does).
    pub async fn lookup_and_deregister(&self, dest: &DestinationId, req: Request) -> Response {
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let opts = ResolveOptions {
            claim_on_miss: false,
            reassign_orphans: false,
        };
        let member = match self.registry.route(dest, opts).await {
            Ok(Resolution::Routed(r)) => r.member,
            Ok(Resolution::Unbound) => return ApiError::UnknownDestination.into_response(),
            Ok(Resolution::NoLiveMember) => {
                if let Err(e) = self.registry.deregister_destination(dest).await {
                    return store_error(&e);
                }
                tracing::info!(destination = %dest, "deregistered a destination whose members are all dead");
                return StatusCode::NO_CONTENT.into_response();
            }
            Err(e) => return store_error(&e),
        };
        let resp = match self
            .forward_with_retry(dest, &call, member, |failed| {
                self.re_resolve(dest, opts, failed)
            })
            .await
        {
            Ok((resp, _)) => resp,
            Err(resp) => return resp,
        };
        if resp.status().is_success() {
            if let Err(e) = self.registry.deregister_destination(dest).await {
                return store_error(&e);
            }
            tracing::info!(destination = %dest, "deregistered destination");
        }
        resp
    }

    /// *Lookup lock and proxy*: resolves the lock record and forwards to the
    /// pod that minted it. 404 `unknown_lock` for an unknown (or expired)
    /// lock, 404 `lock_owner_gone` when the owner is dead (the session is
    /// lost: the caller starts a new one), 503 `lock_owner_unreachable` when
    /// its record is live but it refuses connections.
    pub async fn lookup_lock_and_proxy(&self, lock: &LockId, req: Request) -> Response {
        let call = match Call::new(req, RequestId::generate(), self.config.max_request_body) {
            Ok(call) => call,
            Err(e) => return e.into_response(),
        };
        let record = match self.registry.resolve_lock(lock).await {
            Ok(Some(r)) => r,
            Ok(None) => return ApiError::UnknownLock.into_response(),
            Err(e) => return store_error(&e),
        };
        let Some(owner) = record.owner_record else {
            return ApiError::LockOwnerGone.into_response();
        };
        match self.forward(&call, &owner).await {
            Ok(resp) => resp,
            Err(ForwardError::Connect { .. }) => ApiError::LockOwnerUnreachable.into_response(),
            Err(e) => call.failed(&e),
        }
    }

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

/// The route's captures, percent-decoded, without a map per call.
type Params = RawPathParams;

fn param<T: std::str::FromStr>(params: &RawPathParams, name: &str) -> Option<T> {
    params
        .iter()
        .find(|(key, _)| *key == name)
        .and_then(|(_, v)| v.parse().ok())
}

fn malformed() -> Response {
    ApiError::InvalidId.into_response()
}

/// Counts the answer to a call of `route` (`coordinator_requests_total`).
fn counted(route: &'static str, response: Response) -> Response {
    telemetry::request(route, response.status());
    response
}

async fn proxy_handler(State(c): State<Coordinator>, p: Params, req: Request) -> Response {
    let response = match param::<DestinationId>(&p, "destination") {
        Some(dest) => c.lookup_and_proxy(&dest, req).await,
        None => malformed(),
    };
    counted("proxy", response)
}

async fn register_handler(State(c): State<Coordinator>, req: Request) -> Response {
    counted("register", c.register_from_response(req).await)
}

async fn bind_handler(State(c): State<Coordinator>, p: Params, req: Request) -> Response {
    let response = match param::<DestinationId>(&p, "destination") {
        Some(dest) => c.pick_and_register(&dest, req).await,
        None => malformed(),
    };
    counted("bind", response)
}

async fn deregister_handler(State(c): State<Coordinator>, p: Params, req: Request) -> Response {
    let response = match param::<DestinationId>(&p, "destination") {
        Some(dest) => c.lookup_and_deregister(&dest, req).await,
        None => malformed(),
    };
    counted("deregister", response)
}

async fn lock_handler(State(c): State<Coordinator>, p: Params, req: Request) -> Response {
    let response = match param::<LockId>(&p, "lock") {
        Some(lock) => c.lookup_lock_and_proxy(&lock, req).await,
        None => malformed(),
    };
    counted("lock", response)
}

async fn cancel_handler(State(c): State<Coordinator>, p: Params) -> Response {
    let response = match param::<RequestId>(&p, "request_id") {
        Some(id) if c.cancel(&id).await => StatusCode::NO_CONTENT.into_response(),
        Some(_) => ApiError::UnknownRequest.into_response(),
        None => malformed(),
    };
    counted("cancel", response)
}

impl Coordinator {
    /// The member serving `dest`, or the response that says why there is
    /// none: 404 for an unbound destination, 503 when no member is live or
    /// the store fails.
    async fn routed_member(
        &self,
        dest: &DestinationId,
        opts: ResolveOptions,
    ) -> Result<MemberRecord, Response> {
        match self.registry.route(dest, opts).await {
            Ok(Resolution::Routed(r)) => Ok(r.member),
            Ok(Resolution::Unbound) => Err(ApiError::UnknownDestination.into_response()),
            Ok(Resolution::NoLiveMember) => Err(ApiError::NoLiveMember.into_response()),
            Err(e) => Err(store_error(&e)),
        }
    }
}
