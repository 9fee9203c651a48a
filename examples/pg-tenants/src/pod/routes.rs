//! The pod's HTTP routes.

use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use coordinator::LockId;
use coordinator::http::pod;
use deadpool_postgres::Object;
use serde_json::json;
use tokio_postgres::{CancelToken, Client, NoTls};

use super::Pod;
use super::live::announce;
use crate::POD_HEADER;
use crate::error::ApiError;
use crate::tenant::TenantId;

/// Longest key, in bytes.
const MAX_KEY_LEN: usize = 256;
/// Largest value, in bytes.
const MAX_VALUE_LEN: usize = 1 << 20;
/// Longest accepted `pg_sleep`, seconds.
const MAX_SLEEP_SECS: f64 = 3600.0;

/// Every route, the ownership fence (a routed call is refused with 421
/// `stale_owner` once this pod cannot know it still owns the tenant), the
/// cancellation middleware, the cancel endpoint, and the `x-pod-id` header
/// on every response.
pub(crate) fn router(pod: Pod) -> Router {
    let cancels = pod.member().cancellations().clone();
    let member = pod.member().clone();
    let pod_id = HeaderValue::from_str(pod.id()).ok();
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/destinations/{tenant}/kv/{key}",
            get(get_kv).put(put_kv).delete(delete_kv),
        )
        .route("/destinations/{tenant}/transactions", post(begin))
        .route("/destinations/{tenant}/sleep/{secs}", get(sleep))
        .route(
            "/locks/{lock}/kv/{key}",
            get(tx_get_kv).put(tx_put_kv).delete(tx_delete_kv),
        )
        .route("/locks/{lock}/commit", post(commit))
        .route("/locks/{lock}/rollback", post(rollback))
        .with_state(pod.clone())
        .layer(middleware::from_fn_with_state(member, pod::fenced))
        .layer(middleware::from_fn_with_state(
            cancels.clone(),
            pod::cancellable,
        ))
        .merge(pod::cancel_router(cancels))
        .merge(super::live::router(pod))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let pod_id = pod_id.clone();
            async move {
                let mut resp = next.run(req).await;
                if let Some(v) = pod_id {
                    resp.headers_mut().insert(POD_HEADER, v);
                }
                resp
            }
        }))
}

fn tenant(raw: String) -> Result<TenantId, ApiError> {
    TenantId::new(raw).map_err(|e| ApiError::BadRequest(e.to_string()))
}

fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(ApiError::BadRequest(format!(
            "keys are 1..={MAX_KEY_LEN} bytes"
        )));
    }
    // PostgreSQL text cannot hold NUL
    if key.contains('\0') {
        return Err(ApiError::BadRequest("keys cannot contain NUL".into()));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), ApiError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(ApiError::BadRequest(format!(
            "values are at most {MAX_VALUE_LEN} bytes"
        )));
    }
    if value.contains('\0') {
        return Err(ApiError::BadRequest("values cannot contain NUL".into()));
    }
    Ok(())
}

// ---- key-value statements, on any connection ----

async fn kv_get(c: &Client, t: &TenantId, key: &str) -> Result<String, ApiError> {
    let sql = format!("SELECT v FROM {}.kv WHERE k = $1", t.schema());
    match c.query_opt(&sql, &[&key]).await? {
        Some(row) => Ok(row.try_get(0)?),
        None => Err(ApiError::NotFound("no such key")),
    }
}

async fn kv_put(c: &Client, t: &TenantId, key: &str, value: &str) -> Result<(), ApiError> {
    let sql = format!(
        "INSERT INTO {}.kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
        t.schema()
    );
    c.execute(&sql, &[&key, &value]).await?;
    Ok(())
}

async fn kv_delete(c: &Client, t: &TenantId, key: &str) -> Result<(), ApiError> {
    let sql = format!("DELETE FROM {}.kv WHERE k = $1", t.schema());
    match c.execute(&sql, &[&key]).await? {
        0 => Err(ApiError::NotFound("no such key")),
        _ => Ok(()),
    }
}

// ---- tenant calls: one pooled connection each ----

/// A tenant's concurrency slot and a pooled connection of its pool.
async fn checkout(
    pod: &Pod,
    t: &TenantId,
) -> Result<(coordinator::DestinationPermit, Object), ApiError> {
    let permit = pod.member().acquire(&t.destination()?).await?;
    let conn = pod.pools().get(t).await?;
    Ok((permit, conn))
}

async fn get_kv(
    State(pod): State<Pod>,
    Path((t, key)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let t = tenant(t)?;
    check_key(&key)?;
    let (_permit, conn) = checkout(&pod, &t).await?;
    let value = kv_get(&conn, &t, &key).await?;
    Ok(
        Json(json!({"pod": pod.id(), "tenant": t.as_str(), "key": key, "value": value}))
            .into_response(),
    )
}

async fn put_kv(
    State(pod): State<Pod>,
    Path((t, key)): Path<(String, String)>,
    value: String,
) -> Result<Response, ApiError> {
    let t = tenant(t)?;
    check_key(&key)?;
    check_value(&value)?;
    let (permit, conn) = checkout(&pod, &t).await?;
    kv_put(&conn, &t, &key, &value).await?;
    drop((permit, conn));
    let event = announce(&pod, &t, json!({"op": "put", "key": key, "value": value})).await;
    Ok(Json(
        json!({"pod": pod.id(), "tenant": t.as_str(), "key": key, "value": value, "event": event}),
    )
    .into_response())
}

async fn delete_kv(
    State(pod): State<Pod>,
    Path((t, key)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let t = tenant(t)?;
    check_key(&key)?;
    let (permit, conn) = checkout(&pod, &t).await?;
    kv_delete(&conn, &t, &key).await?;
    drop((permit, conn));
    let event = announce(&pod, &t, json!({"op": "delete", "key": key})).await;
    Ok(Json(
        json!({"pod": pod.id(), "tenant": t.as_str(), "key": key, "deleted": true, "event": event}),
    )
    .into_response())
}

/// Sends a PostgreSQL cancel request if dropped while armed (the call was
/// cancelled or its client went away), and closes that connection instead
/// of returning it to the pool, so the cancel cannot hit a later query.
struct CancelOnDrop {
    armed: Option<(CancelToken, Object)>,
}

impl CancelOnDrop {
    /// Hands the connection back once the query has finished.
    fn disarm(mut self) -> Option<Object> {
        self.armed.take().map(|(_, conn)| conn)
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((token, conn)) = self.armed.take() else {
            return;
        };
        let client = Object::take(conn);
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            match token.cancel_query(NoTls).await {
                Ok(()) => tracing::info!("cancelled a running query (call cancelled)"),
                Err(err) => tracing::warn!(%err, "PostgreSQL cancel request failed"),
            }
            drop(client);
        });
    }
}

async fn sleep(
    State(pod): State<Pod>,
    Path((t, secs)): Path<(String, f64)>,
) -> Result<Response, ApiError> {
    let t = tenant(t)?;
    if !(0.0..=MAX_SLEEP_SECS).contains(&secs) {
        return Err(ApiError::BadRequest(format!(
            "seconds must be within 0..={MAX_SLEEP_SECS}"
        )));
    }
    let (_permit, conn) = checkout(&pod, &t).await?;
    let guard = CancelOnDrop {
        armed: Some((conn.cancel_token(), conn)),
    };
    let result = match &guard.armed {
        Some((_, conn)) => conn.execute("SELECT pg_sleep($1)", &[&secs]).await,
        None => return Err(ApiError::Unavailable("connection lost".into())),
    };
    drop(guard.disarm());
    result?;
    Ok(Json(json!({"pod": pod.id(), "tenant": t.as_str(), "slept": secs})).into_response())
}

// ---- transactions ----

async fn begin(State(pod): State<Pod>, Path(t): Path<String>) -> Result<Response, ApiError> {
    let t = tenant(t)?;
    // Run to completion even if the call is cancelled, so a minted lock is
    // always either stored or released.
    let task = tokio::spawn(async move {
        let dest = t.destination()?;
        let (permit, conn) = checkout(&pod, &t).await?;
        conn.batch_execute("BEGIN").await?;
        let meta = [("kind".to_owned(), "pg-transaction".to_owned())];
        let lock = match pod.member().new_lock(&dest, meta).await {
            Ok(lock) => lock,
            Err(err) => {
                let _ = conn.batch_execute("ROLLBACK").await;
                return Err(err.into());
            }
        };
        tracing::debug!(tenant = %t, %lock, "began transaction");
        let body = json!({"pod": pod.id(), "tenant": t.as_str(), "lock": lock.as_str()});
        pod.txs().insert(lock, super::tx::Tx::new(t, conn, permit));
        Ok((StatusCode::CREATED, Json(body)).into_response())
    });
    task.await
        .map_err(|e| ApiError::Unavailable(format!("begin failed: {e}")))?
}

fn lock_id(raw: String) -> Result<LockId, ApiError> {
    LockId::new(raw).map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// Runs one statement of transaction `lock` on its pinned connection.
async fn in_tx<T>(
    pod: &Pod,
    lock: String,
    key: &str,
    op: impl AsyncFnOnce(&Client, &TenantId) -> Result<T, ApiError>,
) -> Result<(LockId, TenantId, T), ApiError> {
    let lock = lock_id(lock)?;
    check_key(key)?;
    let tx = pod
        .txs()
        .get(&lock)
        .ok_or(ApiError::NotFound("no such transaction on this pod"))?;
    let guard = tx.lock().await?;
    let conn = guard
        .as_ref()
        .ok_or(ApiError::NotFound("transaction already finished"))?;
    match op(conn, &tx.tenant).await {
        Ok(v) => Ok((lock, tx.tenant.clone(), v)),
        Err(e) => {
            if matches!(e, ApiError::Db(_)) {
                tx.mark_failed();
            }
            Err(e)
        }
    }
}

async fn tx_get_kv(
    State(pod): State<Pod>,
    Path((lock, key)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (lock, t, value) = in_tx(&pod, lock, &key, async |c, t| kv_get(c, t, &key).await).await?;
    Ok(Json(json!({"pod": pod.id(), "tenant": t.as_str(), "lock": lock.as_str(), "key": key, "value": value})).into_response())
}

async fn tx_put_kv(
    State(pod): State<Pod>,
    Path((lock, key)): Path<(String, String)>,
    value: String,
) -> Result<Response, ApiError> {
    check_value(&value)?;
    let (lock, t, ()) = in_tx(&pod, lock, &key, async |c, t| {
        kv_put(c, t, &key, &value).await
    })
    .await?;
    Ok(Json(json!({"pod": pod.id(), "tenant": t.as_str(), "lock": lock.as_str(), "key": key, "value": value})).into_response())
}

async fn tx_delete_kv(
    State(pod): State<Pod>,
    Path((lock, key)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (lock, t, ()) = in_tx(&pod, lock, &key, async |c, t| kv_delete(c, t, &key).await).await?;
    Ok(Json(json!({"pod": pod.id(), "tenant": t.as_str(), "lock": lock.as_str(), "key": key, "deleted": true})).into_response())
}

async fn commit(State(pod): State<Pod>, Path(lock): Path<String>) -> Result<Response, ApiError> {
    finish(pod, lock, true).await
}

async fn rollback(State(pod): State<Pod>, Path(lock): Path<String>) -> Result<Response, ApiError> {
    finish(pod, lock, false).await
}

/// Commits or rolls back, releases the connection and deletes the lock
/// record; runs to completion even if the call is cancelled.
async fn finish(pod: Pod, lock: String, commit: bool) -> Result<Response, ApiError> {
    let lock = lock_id(lock)?;
    let task = tokio::spawn(async move {
        let tx = pod
            .txs()
            .remove(&lock)
            .ok_or(ApiError::NotFound("no such transaction on this pod"))?;
        let aborted = commit && tx.failed();
        let ended = tx.finish(commit && !aborted).await;
        let released = pod.member().unregister_lock(&lock).await;
        ended?;
        released?;
        if aborted {
            return Err(ApiError::Conflict(
                "a statement failed: the transaction was rolled back".into(),
            ));
        }
        let field = if commit { "committed" } else { "rolled_back" };
        let event = if commit {
            announce(&pod, &tx.tenant, json!({"op": "commit"})).await
        } else {
            serde_json::Value::Null
        };
        Ok(Json(json!({"pod": pod.id(), "tenant": tx.tenant.as_str(), "lock": lock.as_str(), field: true, "event": event})).into_response())
    });
    task.await
        .map_err(|e| ApiError::Unavailable(format!("transaction end failed: {e}")))?
}
