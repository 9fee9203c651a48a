//! `coordinator::CoordinatorClient` sessions against `pg-pod` processes:
//! begin, calls under the lock, commit and abort, with no hand-built path
//! or header.

use axum::http::Method;
use coordinator::client::{ClientError, CoordinatorClient, PodResponse, Session};
use coordinator::{DestinationId, LockId};
use serde_json::Value;

use crate::{Fleet, Opts, bounded};

fn json(resp: &PodResponse) -> Value {
    serde_json::from_slice(&resp.body).unwrap_or(Value::Null)
}

fn pod(resp: &PodResponse) -> String {
    resp.headers[pg_tenants::POD_HEADER]
        .to_str()
        .unwrap()
        .to_owned()
}

/// `method kv/{key}` under `session`: it must succeed on `home`; the JSON.
async fn in_session(session: &Session, method: Method, key: &str, body: &str, home: &str) -> Value {
    let r = session
        .call(method, &format!("/kv/{key}"), body.to_owned())
        .await
        .unwrap();
    assert!(r.status.is_success(), "{key}: {r:?}");
    assert_eq!(pod(&r), home, "every call of the session lands on its pod");
    json(&r)
}

impl Fleet {
    /// `key`'s committed value, read outside any session (`None`: 404).
    async fn committed(
        &self,
        client: &CoordinatorClient,
        t: &DestinationId,
        key: &str,
    ) -> Option<String> {
        let r = client
            .call(t, Method::GET, &format!("/kv/{key}"), "")
            .await
            .unwrap();
        match r.status.as_u16() {
            404 => None,
            200 => json(&r)["value"].as_str().map(str::to_owned),
            other => panic!("GET {key} outside the session: {other} {r:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn client_sessions_begin_call_under_the_lock_and_commit_or_abort() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let client = CoordinatorClient::new(&f.coordinator).unwrap();
        let t = DestinationId::new(f.tenant("session")).unwrap();
        let seeded = client.call(&t, Method::PUT, "/kv/seed", "0").await.unwrap();
        assert_eq!(seeded.status.as_u16(), 200, "{seeded:?}");
        let home = pod(&seeded);

        // commit: the writes appear together, and the lock is released
        let session = client.begin(&t, "/transactions", "").await.unwrap();
        assert_eq!(session.lock().as_str().len(), 32);
        in_session(&session, Method::PUT, "a", "1", &home).await;
        in_session(&session, Method::DELETE, "seed", "", &home).await;
        let own = in_session(&session, Method::GET, "a", "", &home).await;
        assert_eq!(own["value"], "1", "the session sees its own writes");
        assert_eq!(f.committed(&client, &t, "a").await, None);
        assert_eq!(f.committed(&client, &t, "seed").await.as_deref(), Some("0"));
        let lock = session.lock().clone();
        let done = session.commit("/commit").await.unwrap();
        assert_eq!(json(&done)["committed"], true, "{done:?}");
        assert_eq!(f.committed(&client, &t, "a").await.as_deref(), Some("1"));
        assert_eq!(f.committed(&client, &t, "seed").await, None);
        let after = client.session(lock).call(Method::GET, "/kv/a", "").await;
        assert!(
            matches!(&after, Err(ClientError::Coordinator { code, .. }) if code == "unknown_lock"),
            "a committed session's lock is gone: {after:?}"
        );

        // abort: nothing of the session stays
        let session = client.begin(&t, "/transactions", "").await.unwrap();
        in_session(&session, Method::PUT, "x", "9", &home).await;
        in_session(&session, Method::PUT, "a", "changed", &home).await;
        let done = session.abort("/rollback").await.unwrap();
        assert_eq!(json(&done)["rolled_back"], true, "{done:?}");
        assert_eq!(f.committed(&client, &t, "x").await, None);
        assert_eq!(f.committed(&client, &t, "a").await.as_deref(), Some("1"));

        // a lock nobody minted is the coordinator's typed error
        let unknown = client
            .session(LockId::generate())
            .call(Method::GET, "/kv/a", "")
            .await;
        assert!(
            matches!(&unknown, Err(ClientError::Coordinator { code, .. }) if code == "unknown_lock"),
            "{unknown:?}"
        );
        // begin on a path that mints no lock says so
        let no_lock = client.begin(&t, "/kv/nolock", "").await;
        assert!(matches!(no_lock, Err(ClientError::NoLock(_))), "{no_lock:?}");
    })
    .await;
}
