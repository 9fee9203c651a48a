//! A resource pod for coordinator chaos ([`chaos::fleet`]): a
//! `coordinator::Member` with a heartbeat, serving
//! `GET /destinations/{d}/work` behind the public ownership fence
//! (`coordinator::http::pod::fenced`), as a user's pod would. Every call it
//! served or refused is appended to its history file.
//!
//! The handler works for `--work-ms`, then re-checks its ownership
//! (`Member::check_ownership`) before it keeps the result, as a pod with a
//! side effect should: a call admitted before a SIGSTOP that resumes after
//! the pod's lease ran out is refused then, not served. `--unfenced` drops
//! both the layer and the re-check (the negative control);
//! `--no-commit-check` drops the re-check only.
//!
//! `DELETE /destinations/{d}` (the coordinator's *lookup and deregister*)
//! answers 200: the fence then makes the pod leave `d`.
//!
//! Prints `ready <address>` on stdout once registered and listening.

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context;
use axum::{
    Router,
    extract::{Path, Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use chaos::fleet::{
    SharedValkey,
    history::{Entry, Served, now_us},
};
use clap::Parser;
use coordinator::{
    DestinationId, Member, MemberAddress, MemberConfig, MemberId,
    http::{EPOCH_HEADER, ROUTED_DESTINATION_HEADER, STALE_OWNER_HEADER, pod},
};
use http::{HeaderMap, StatusCode};

/// A chaos pod.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    valkey: SharedValkey,
    /// This pod's member id (one per process).
    #[arg(long)]
    id: String,
    /// History file (appended).
    #[arg(long)]
    history: PathBuf,
    /// Member record TTL in milliseconds; heartbeats every quarter of it.
    #[arg(long, default_value_t = 2_000)]
    ttl_ms: u64,
    /// How long each call works, in milliseconds.
    #[arg(long, default_value_t = 10)]
    work_ms: u64,
    /// Negative control: no ownership fence at all.
    #[arg(long)]
    unfenced: bool,
    /// Keep a call's result without re-checking ownership after its work.
    #[arg(long)]
    no_commit_check: bool,
    /// Listen on this loopback port (0: any). A pod restarted at its old
    /// port gets the calls routed to its predecessor from warm caches.
    #[arg(long, default_value_t = 0)]
    port: u16,
}

#[derive(Clone)]
struct Pod {
    member: Member,
    id: String,
    history: Arc<Mutex<File>>,
    work: Duration,
    commit_check: bool,
}

impl Pod {
    /// Appends one line in one write (a SIGKILL never tears a line).
    fn record(&self, entry: &Entry) {
        let line = entry.to_line() + "\n";
        let mut file = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(err) = file.write_all(line.as_bytes()) {
            tracing::error!(%err, "cannot write the history");
        }
    }
}

/// The destination and epoch a coordinator stamped on a call, if any.
fn fence_headers(headers: &HeaderMap) -> (Option<String>, u64) {
    let dest = headers
        .get(ROUTED_DESTINATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let epoch = headers
        .get(EPOCH_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (dest, epoch)
}

async fn work(State(pod): State<Pod>, Path(dest): Path<String>, headers: HeaderMap) -> Response {
    let start_us = now_us();
    tokio::time::sleep(pod.work).await;
    let end_us = now_us();
    let (_, epoch) = fence_headers(&headers);
    if pod.commit_check {
        let Ok(id) = DestinationId::new(dest.clone()) else {
            return (StatusCode::BAD_REQUEST, "bad destination").into_response();
        };
        if let Err(refusal) = pod.member.check_ownership(&id, epoch).await {
            // not kept: the outer layer records the refusal
            return pod::stale_owner_response(refusal);
        }
    }
    pod.record(&Entry::Served(Served {
        destination: dest,
        pod: pod.id.clone(),
        epoch,
        start_us,
        end_us,
    }));
    (StatusCode::OK, pod.id.clone()).into_response()
}

/// `DELETE /destinations/{d}`: the destination is torn down (nothing to
/// do here); recorded as a call served, like any other routed call.
async fn tear_down(
    State(pod): State<Pod>,
    Path(dest): Path<String>,
    headers: HeaderMap,
) -> Response {
    let start_us = now_us();
    let (_, epoch) = fence_headers(&headers);
    pod.record(&Entry::Served(Served {
        destination: dest,
        pod: pod.id.clone(),
        epoch,
        start_us,
        end_us: now_us(),
    }));
    (StatusCode::OK, pod.id.clone()).into_response()
}

/// The outermost layer: records every stale-owner refusal.
async fn note_refusals(State(pod): State<Pod>, req: Request, next: Next) -> Response {
    let (dest, epoch) = fence_headers(req.headers());
    let resp = next.run(req).await;
    if resp.status().as_u16() == coordinator::http::STALE_OWNER_STATUS
        && resp.headers().contains_key(STALE_OWNER_HEADER)
    {
        pod.record(&Entry::Refused {
            destination: dest.unwrap_or_else(|| "-".into()),
            pod: pod.id.clone(),
            epoch,
            t_us: now_us(),
        });
    }
    resp
}

/// Binds `127.0.0.1:port`, trying for a few seconds (the process this one
/// replaces may still be releasing it).
async fn bind(port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    let mut attempts = 0;
    loop {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => return Ok(listener),
            Err(err) if attempts < 50 => {
                attempts += 1;
                tracing::debug!(%err, port, "port busy, trying again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(err).with_context(|| format!("binding port {port}")),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = chaos::process::start("info");
    let listener = bind(args.port).await?;
    let addr = listener.local_addr()?;
    let valkey = args.valkey.connect(Duration::from_millis(500)).await?;
    let ttl = Duration::from_millis(args.ttl_ms);
    let mut config = MemberConfig::new(
        MemberId::new(args.id.clone())?,
        MemberAddress::parse(&format!("http://{addr}"))?,
    );
    config.prefix = args.valkey.prefix.clone();
    config.ttl = ttl;
    config.heartbeat_interval = ttl / 4;
    config.lock_ttl = ttl;
    let member = Member::new(valkey, config)?;
    member.register().await.context("registering")?;
    let _heartbeat = member.start_heartbeat();
    let history = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.history)
        .with_context(|| format!("opening {}", args.history.display()))?;
    let state = Pod {
        member: member.clone(),
        id: args.id.clone(),
        history: Arc::new(Mutex::new(history)),
        work: Duration::from_millis(args.work_ms),
        commit_check: !args.unfenced && !args.no_commit_check,
    };
    let mut app = Router::new()
        .route("/destinations/{destination}/work", get(work))
        .route(
            "/destinations/{destination}",
            axum::routing::delete(tear_down),
        )
        .with_state(state.clone());
    if !args.unfenced {
        app = app.layer(middleware::from_fn_with_state(member, pod::fenced));
    }
    let app = app.layer(middleware::from_fn_with_state(state, note_refusals));
    println!("ready {addr}");
    axum::serve(listener, app).await?;
    Ok(())
}
