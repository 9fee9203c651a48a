//! *Register from response* (`POST /destinations`) and result hooks.

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use coordinator::http::CallResult;

use crate::common::*;

/// `("METHOD path member", status)` of each attempt a hook saw.
type Seen = Arc<Mutex<Vec<(String, Option<StatusCode>)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_destination_named_by_the_pod_is_registered_to_it() {
    let p = prefix();
    let v = valkey().await;
    let a = TestPod::start(&p, "a", PodOptions::default()).await;
    let b = TestPod::start(&p, "b", PodOptions::default()).await;
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let hook = move |r: &CallResult<'_>| {
        record
            .lock()
            .unwrap()
            .push((format!("{} {} {}", r.method, r.path, r.member), r.status));
    };
    let c = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            hooks: vec![Arc::new(hook)],
            ..CoordinatorOptions::default()
        },
    )
    .await;
    let http = Http::new();

    // Round robin over two pods: two creations land on both.
    let mut owners = Vec::new();
    for _ in 0..2 {
        let (status, id) = http.send("POST", &format!("{}/destinations", c.base)).await;
        assert_eq!(status, StatusCode::CREATED, "{id}");
        let owner = if id.starts_with("s-a-") { "a" } else { "b" };
        assert!(id.starts_with(&format!("s-{owner}-")), "{id}");
        // Registered in Valkey, in the Node layout.
        assert_eq!(
            smembers(&v, &format!("{p}:destination:{id}")).await,
            [owner.to_owned()].into()
        );
        // The next call to it reaches the pod that made it.
        let (status, body) = http
            .send("GET", &format!("{}/destinations/{id}/x", c.base))
            .await;
        assert_eq!((status, body), (StatusCode::OK, format!("{owner}:x")));
        owners.push(owner);
    }
    owners.sort_unstable();
    assert_eq!(owners, ["a", "b"]);

    // A 2xx without a valid id registers nothing and says so.
    for query in ["header=bad", "header=none"] {
        let (status, body) = http
            .send("POST", &format!("{}/destinations?{query}", c.base))
            .await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
        assert!(body.contains("missing_destination_id"), "{body}");
    }
    let (status, _) = http
        .send("GET", &format!("{}/destinations/../x", c.base))
        .await;
    assert_ne!(status, StatusCode::OK);

    // The hook saw every forwarded attempt with the pod's status.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 6, "{seen:?}");
    let created = seen
        .iter()
        .filter(|(what, status)| {
            what.starts_with("POST /destinations ") && *status == Some(StatusCode::CREATED)
        })
        .count();
    assert_eq!(created, 4, "{seen:?}");
    assert!(
        seen.iter()
            .any(|(what, status)| what.starts_with("GET /destinations/s-")
                && *status == Some(StatusCode::OK)),
        "{seen:?}"
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn register_from_response_without_members_is_no_live_member() {
    let p = prefix();
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let (status, body) = Http::new()
        .send("POST", &format!("{}/destinations", c.base))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("no_live_member"), "{body}");
}
