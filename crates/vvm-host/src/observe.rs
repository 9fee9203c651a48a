//! `--metrics-listen ADDR`: Prometheus text at `/metrics` and the health
//! report at `/healthz`, served with `http-edge` (the coordinator's hardened server)
//! (header-read timeout, idle timeout, connection cap).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use http_edge::ServeConfig;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::health::Health;

/// Buckets (seconds) of the latency histograms: storage calls, renewals,
/// forwards.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets (seconds) of the slack left before the killer deadline.
const SLACK_BUCKETS: &[f64] = &[
    0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 120.0,
];

/// How often histogram storage is compacted.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Limits of the endpoint: it serves a scraper and a probe or two.
fn limits() -> ServeConfig {
    ServeConfig {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        max_connections: 64,
        close_grace: Duration::from_secs(1),
    }
}

#[derive(Clone)]
struct Endpoint {
    prometheus: PrometheusHandle,
    health: Arc<Health>,
}

/// Installs the Prometheus recorder, binds `addr` and serves in the
/// background until the process ends. Returns the bound address.
pub(crate) async fn start(addr: SocketAddr, health: Arc<Health>) -> anyhow::Result<SocketAddr> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("elections_renewal_slack_seconds".to_owned()),
                SLACK_BUCKETS,
            )
        })
        .context("cannot configure the Prometheus recorder")?
        .install_recorder()
        .context("cannot install the Prometheus recorder")?;
    elections::telemetry::describe();
    ttl_storage::instrumented::describe();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --metrics-listen {addr}"))?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("cannot read the address bound for {addr}"))?;
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(Endpoint { prometheus, health });
    tokio::spawn(async move {
        if let Err(err) = http_edge::serve(listener, app, limits(), std::future::pending()).await {
            tracing::error!(error = %err, "metrics endpoint stopped");
        }
    });
    tracing::info!(address = %bound, "metrics endpoint listening (/metrics, /healthz)");
    Ok(bound)
}

async fn metrics(State(endpoint): State<Endpoint>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        endpoint.prometheus.render(),
    )
        .into_response()
}

async fn healthz(State(endpoint): State<Endpoint>) -> Response {
    let report = endpoint.health.report();
    let code = if report.healthy() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::to_string(&report).unwrap_or_else(|_| "{}".to_owned());
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
