//! The `pg-coordinator` binary: tenant and transaction routes onto the
//! coordinator's destination and lock routing.
//!
//! | route | forwarded as | routed by |
//! |---|---|---|
//! | `/tenants/{tenant}[/...]` | `/destinations/{tenant}[/...]` | the tenant's pod set (first touch claims a pod by the strategy; an orphaned tenant is reassigned) |
//! | `/transactions/{lock}[/...]` | `/locks/{lock}[/...]` | the lock record (the pod that ran `BEGIN`) |
//! | `/destinations/{tenant}[/...]` | unchanged | as `/tenants/...`: the coordinator's own paths, which [`coordinator::client::CoordinatorClient`] speaks |
//! | `/locks/{lock}[/...]` | unchanged | as `/transactions/...` |
//! | `POST /cancel/{request_id}` | a cancel message to the pod running the call | the calls this coordinator forwards (204, or 404 `unknown_request`) |
//! | `GET /pods` | — | live pods with their load (open connections) |
//! | `GET /metrics` | — | Prometheus text (from [`run`]): the coordinator's metrics, among them the fleet-load gauges `coordinator_fleet_*` |
//! | `GET /healthz` | — | `ok` |
//!
//! Malformed tenant ids (`^[A-Za-z0-9_-]{1,64}$`) and lock ids answer 400
//! before any Valkey access. A call may carry its own `x-request-id` (32
//! lowercase hex digits) and be cancelled by it from another connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::{Path, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any, get, post};
use axum::{Json, Router};
use clap::{Parser, ValueEnum};
use coordinator::http::{Coordinator, CoordinatorConfig, ForwardConfig, Forwarder, ServeConfig};
use coordinator::strategy::{DynStrategy, LeastLoaded, Random, RoundRobin};
use coordinator::{CacheConfig, LockId, Registry, RegistryConfig, RequestId};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;

use crate::error::ApiError;
use crate::tenant::TenantId;

/// Allocation strategy for first touch, failover and fanned-out tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    /// Cycle through the candidates.
    RoundRobin,
    /// Smallest published load (open connections); ties round-robin.
    LeastLoaded,
    /// Uniformly at random.
    Random,
}

/// `pg-coordinator`: routes tenant and transaction calls to PostgreSQL pods.
#[derive(Debug, Clone, Parser)]
#[command(name = "pg-coordinator", version, about)]
pub struct CoordArgs {
    /// Valkey/Redis URL.
    #[arg(long, env = "VALKEY_URL", default_value = "redis://127.0.0.1:6379")]
    pub valkey_url: String,
    /// Address to listen on.
    #[arg(long, env = "COORDINATOR_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Valkey key prefix shared with the pods.
    #[arg(long, env = "COORDINATOR_PREFIX", default_value = "coordinator")]
    pub prefix: String,
    /// Allocation strategy.
    #[arg(long, env = "STRATEGY", value_enum, default_value = "round-robin")]
    pub strategy: StrategyArg,
    /// Lifetime of cached tenant pod sets, milliseconds (0 turns the cache off).
    #[arg(long, env = "CACHE_TTL_MS", default_value_t = 5_000)]
    pub cache_ttl_ms: u64,
    /// Time allowed for a pod's response headers, milliseconds.
    #[arg(long, env = "RESPONSE_TIMEOUT_MS", default_value_t = 30_000)]
    pub response_timeout_ms: u64,
    /// Largest request body forwarded to a pod, bytes (larger: 413); the
    /// default fits the pods' largest value (1 MiB).
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = (1 << 20) + (64 << 10))]
    pub max_body_bytes: u64,
    /// Most client connections open at once.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// How often the fleet-load gauges (`coordinator_fleet_*` in
    /// `/metrics`) are refreshed from the pods' reported loads, milliseconds.
    #[arg(long, env = "FLEET_LOAD_PERIOD_MS", default_value_t = 5_000)]
    pub fleet_load_period_ms: u64,
}

/// The coordinator's routes over `coordinator`.
pub fn router(coordinator: Coordinator) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/pods", get(pods))
        .route("/tenants/{tenant}", routed("/tenants"))
        .route("/tenants/{tenant}/{*rest}", routed("/tenants"))
        .route("/transactions/{lock}", routed("/transactions"))
        .route("/transactions/{lock}/{*rest}", routed("/transactions"))
        .route("/destinations/{tenant}", routed("/destinations"))
        .route("/destinations/{tenant}/{*rest}", routed("/destinations"))
        .route("/locks/{lock}", routed("/locks"))
        .route("/locks/{lock}/{*rest}", routed("/locks"))
        .route("/cancel/{request_id}", post(cancel))
        .with_state(coordinator)
}

/// `GET /metrics`: the Prometheus text of `handle`.
fn metrics_router(handle: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let text = handle.render();
            async move { ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }),
    )
}

/// Replaces the first path segment (`/tenants`, `/transactions`) with `to`,
/// keeping the rest of the path and the query as sent.
fn rewrite(req: &mut Request, from: &str, to: &str) -> Result<(), ApiError> {
    let uri = req.uri();
    let rest = uri.path().strip_prefix(from).unwrap_or("");
    let path_and_query = match uri.query() {
        Some(q) => format!("{to}{rest}?{q}"),
        None => format!("{to}{rest}"),
    };
    *req.uri_mut() = Uri::builder()
        .path_and_query(path_and_query)
        .build()
        .map_err(|e| ApiError::BadRequest(format!("bad path: {e}")))?;
    Ok(())
}

type Params = Path<std::collections::HashMap<String, String>>;

/// A routed call's target, read from its path parameters.
enum Target {
    Tenant(coordinator::DestinationId),
    Lock(LockId),
}

fn target(p: &std::collections::HashMap<String, String>) -> Result<Target, ApiError> {
    if let Some(raw) = p.get("lock") {
        return parse_lock(raw)
            .map(Target::Lock)
            .ok_or_else(|| ApiError::BadRequest("malformed transaction id".into()));
    }
    let raw = p.get("tenant").map(String::as_str).unwrap_or("");
    let tenant = TenantId::new(raw).map_err(|_| {
        ApiError::BadRequest("tenant ids are 1..=64 characters of A-Z a-z 0-9 _ -".into())
    })?;
    let dest = tenant
        .destination()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(Target::Tenant(dest))
}

/// The routes under `/{prefix}/{tenant or lock}[/...]`: forwarded as
/// `/destinations/...` by the tenant, or `/locks/...` by the lock.
fn routed(prefix: &'static str) -> MethodRouter<Coordinator> {
    any(
        move |State(c): State<Coordinator>, Path(p): Params, mut req: Request| async move {
            let target = match target(&p) {
                Ok(t) => t,
                Err(e) => return e.into_response(),
            };
            let to = match target {
                Target::Tenant(_) => "/destinations",
                Target::Lock(_) => "/locks",
            };
            if let Err(e) = rewrite(&mut req, prefix, to) {
                return e.into_response();
            }
            match target {
                Target::Tenant(dest) => c.lookup_and_proxy(&dest, req).await,
                Target::Lock(lock) => c.lookup_lock_and_proxy(&lock, req).await,
            }
        },
    )
}

/// Lock ids minted by the pods: 32 lowercase hex digits.
fn parse_lock(raw: &str) -> Option<LockId> {
    let hex = raw.len() == 32 && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    hex.then(|| LockId::new(raw).ok()).flatten()
}

/// `POST /cancel/{request_id}`: cancels a call this coordinator forwards.
async fn cancel(State(c): State<Coordinator>, Path(p): Params) -> Response {
    let raw = p.get("request_id").map(String::as_str).unwrap_or("");
    let Ok(id) = RequestId::new(raw) else {
        return ApiError::BadRequest("malformed request id".into()).into_response();
    };
    if c.cancel(&id).await {
        StatusCode::NO_CONTENT.into_response()
    } else {
        coordinator::http::ApiError::UnknownRequest.into_response()
    }
}

async fn pods(State(c): State<Coordinator>) -> Response {
    match c.registry().list_live_members().await {
        Ok(members) => {
            let pods: Vec<_> = members
                .iter()
                .map(
                    |m| json!({"id": m.id.as_str(), "address": m.address.as_str(), "load": m.load}),
                )
                .collect();
            Json(json!({ "pods": pods })).into_response()
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// Builds the coordinator from `args`, connecting to Valkey.
pub async fn build(args: &CoordArgs) -> anyhow::Result<Coordinator> {
    let valkey = coordinator::connect(&args.valkey_url, Duration::from_secs(5))
        .await
        .context("cannot connect to Valkey")?;
    let strategy: DynStrategy = match args.strategy {
        StrategyArg::RoundRobin => Arc::new(RoundRobin::new()),
        StrategyArg::LeastLoaded => Arc::new(LeastLoaded::new()),
        StrategyArg::Random => Arc::new(Random),
    };
    let cache = (args.cache_ttl_ms > 0).then(|| CacheConfig {
        ttl: Duration::from_millis(args.cache_ttl_ms),
        ..CacheConfig::default()
    });
    let registry = Registry::new(
        valkey,
        RegistryConfig {
            prefix: args.prefix.clone(),
            cache,
            ..RegistryConfig::default()
        },
        strategy,
    )?;
    let forward = ForwardConfig {
        response_timeout: Duration::from_millis(args.response_timeout_ms),
        ..ForwardConfig::default()
    };
    Ok(Coordinator::new(
        registry,
        Forwarder::new(forward)?,
        // a tenant's first call claims a pod; an orphaned tenant moves;
        // bodies larger than any value a pod accepts answer 413 here
        CoordinatorConfig::builder()
            .max_request_body(args.max_body_bytes)
            .build(),
    ))
}

/// Runs the coordinator until Ctrl-C / SIGTERM.
pub async fn run(args: CoordArgs) -> anyhow::Result<()> {
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the Prometheus recorder")?;
    let coordinator = build(&args).await?;
    coordinator
        .registry()
        .spawn_fleet_load_gauges(Duration::from_millis(args.fleet_load_period_ms.max(1)));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %listener.local_addr()?, strategy = ?args.strategy, "coordinator serving");
    let limits = ServeConfig {
        max_connections: args.max_connections,
        ..ServeConfig::default()
    };
    coordinator::http::serve(
        listener,
        router(coordinator).merge(metrics_router(prometheus)),
        limits,
        crate::shutdown_signal(),
    )
    .await
    .context("server failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_the_prefix_and_keeps_the_query() {
        let mut req = Request::builder()
            .uri("/tenants/acme/kv/a%20b?x=1")
            .body(axum::body::Body::empty())
            .unwrap();
        rewrite(&mut req, "/tenants", "/destinations").unwrap();
        assert_eq!(req.uri().to_string(), "/destinations/acme/kv/a%20b?x=1");
    }

    #[test]
    fn lock_ids_are_32_lowercase_hex_digits() {
        assert!(parse_lock(LockId::generate().as_str()).is_some());
        for bad in ["", "abc", &"G".repeat(32), &"a".repeat(33), &"A".repeat(32)] {
            assert!(parse_lock(bad).is_none(), "{bad:?}");
        }
    }
}
