//! Live tenants: every write publishes a change event of its tenant
//! ([`coordinator_events`]: to the subscribers on every pod), served as
//! Server-Sent Events, with a page that lists a tenant's rows and follows
//! them.
//!
//! | route | answers |
//! |---|---|
//! | `GET /tenants/{t}/events` (and `/destinations/{t}/events`, the path the coordinator forwards) | `text/event-stream`: `ready` (`pod`, `seq`: the stream starts after this number), then per change `change` (`id:` the tenant's event number; data `seq`, `publisher`, `change`), `gap` (`first`, `last`: events missed), `restarted`, `interrupted` (this pod lost the broadcast channel), `resumed` |
//! | `GET /tenants/{t}/rows` (and `/destinations/{t}/rows`) | `{"pod", "tenant", "rows": [{"key", "value"}...]}` (at most 1000, by key) |
//! | `GET /tenants/{t}/live` | the page (`static/live.html`, no build step) |
//!
//! A change is `{"op": "put", "key", "value"}`, `{"op": "delete", "key"}`
//! or `{"op": "commit"}` (a transaction committed: read the rows again).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use coordinator_events::{Gap, Notice};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::Pod;
use crate::error::ApiError;
use crate::tenant::TenantId;

/// The page, served as it is.
const PAGE: &str = include_str!("../../static/live.html");
/// Rows listed at most.
const MAX_ROWS: i64 = 1000;
/// Longest wait for a publish after a write (the write stands anyway).
const PUBLISH_LIMIT: Duration = Duration::from_secs(2);

/// The live routes (outside the ownership fence: any pod serves them).
pub(crate) fn router(pod: Pod) -> Router {
    Router::new()
        .route("/tenants/{tenant}/events", get(events))
        .route("/destinations/{tenant}/events", get(events))
        .route("/tenants/{tenant}/rows", get(rows))
        .route("/destinations/{tenant}/rows", get(rows))
        .route("/tenants/{tenant}/live", get(page))
        .with_state(pod)
}

fn tenant(raw: String) -> Result<TenantId, ApiError> {
    TenantId::new(raw).map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// Publishes `change` of tenant `t` to its subscribers on every pod; the
/// event's number, or `null` if publishing failed (logged: the write
/// stands, subscribers elsewhere miss it).
pub(crate) async fn announce(pod: &Pod, t: &TenantId, change: Value) -> Value {
    let Ok(dest) = t.destination() else {
        return Value::Null;
    };
    let published = tokio::time::timeout(
        PUBLISH_LIMIT,
        pod.events().publish(&dest, change.to_string()),
    )
    .await;
    match published {
        Ok(Ok(p)) => p.position.map_or(Value::Null, |p| json!(p.seq)),
        Ok(Err(err)) => {
            tracing::warn!(tenant = %t, %err, "change event not published");
            Value::Null
        }
        Err(_) => {
            tracing::warn!(tenant = %t, "change event not published: timed out");
            Value::Null
        }
    }
}

async fn events(State(pod): State<Pod>, Path(t): Path<String>) -> Result<Response, ApiError> {
    let t = tenant(t)?;
    let dest = t.destination()?;
    let sub = pod
        .events()
        .subscribe(&dest)
        .await
        .map_err(|err| match err {
            coordinator_events::Error::TooManySubscribers(_) => {
                ApiError::Unavailable("too many event streams on this pod".into())
            }
            other => ApiError::Unavailable(format!("events: {other}")),
        })?;
    let ready = json!({
        "pod": pod.id(),
        "tenant": t.as_str(),
        "seq": sub.position().map(|p| p.seq),
    });
    let first = futures::stream::once(async move {
        Ok::<_, Infallible>(SseEvent::default().event("ready").data(ready.to_string()))
    });
    let rest = sub.into_stream().map(|n| Ok(sse(&n)));
    let stream: std::pin::Pin<Box<dyn Stream<Item = Result<SseEvent, Infallible>> + Send>> =
        Box::pin(first.chain(rest));
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// One notice as an SSE event.
fn sse(notice: &Notice) -> SseEvent {
    match notice {
        Notice::Event(e) => {
            // the payload came through Valkey: parsed, never trusted
            let change = serde_json::from_slice::<Value>(&e.payload)
                .unwrap_or_else(|_| json!({"op": "unknown"}));
            SseEvent::default()
                .event("change")
                .id(e.position.seq.to_string())
                .data(
                    json!({
                        "seq": e.position.seq,
                        "publisher": e.publisher.as_str(),
                        "change": change,
                    })
                    .to_string(),
                )
        }
        Notice::Gap(Gap::Missed { first, last }) => SseEvent::default()
            .event("gap")
            .data(json!({"first": first, "last": last}).to_string()),
        Notice::Gap(Gap::Restarted { generation }) => SseEvent::default()
            .event("restarted")
            .data(json!({"generation": generation}).to_string()),
        Notice::Interrupted => SseEvent::default().event("interrupted").data("{}"),
        Notice::Resumed => SseEvent::default().event("resumed").data("{}"),
    }
}

async fn rows(State(pod): State<Pod>, Path(t): Path<String>) -> Result<Response, ApiError> {
    let t = tenant(t)?;
    let permit = pod.member().acquire(&t.destination()?).await?;
    let conn = pod.pools().get(&t).await?;
    let sql = format!(
        "SELECT k, v FROM {}.kv ORDER BY k LIMIT {MAX_ROWS}",
        t.schema()
    );
    let found = conn.query(&sql, &[]).await?;
    drop(permit);
    let mut list = Vec::with_capacity(found.len());
    for row in found {
        let (key, value): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        list.push(json!({"key": key, "value": value}));
    }
    Ok(Json(json!({"pod": pod.id(), "tenant": t.as_str(), "rows": list})).into_response())
}

async fn page(Path(t): Path<String>) -> Result<Response, ApiError> {
    tenant(t)?;
    Ok(([(CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response())
}
