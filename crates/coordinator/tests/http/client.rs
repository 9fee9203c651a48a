//! The typed caller client, the public forwarding call and the extractors,
//! against real pods and a real coordinator.

use axum::Router;
use axum::http::{Method, StatusCode};
use axum::routing::get;
use coordinator::client::{ClientError, CoordinatorClient};
use coordinator::http::extract::{Destination, Lock};
use coordinator::http::{ForwardConfig, Forwarder};
use coordinator::{MemberAddress, RequestId};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn client_calls_by_destination_and_runs_a_session() {
    let p = prefix();
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let client = CoordinatorClient::new(&c.base).unwrap();
    let d = dest("user@tenant:1");

    // no pod yet: the coordinator's own error, typed
    match client.call(&d, Method::GET, "/echo", "").await {
        Err(ClientError::Coordinator { status, code, .. }) => {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(code, "no_live_member");
        }
        other => panic!("expected a coordinator error, got {other:?}"),
    }

    let mut a = TestPod::start(&p, "node:pod:1", PodOptions::default()).await;
    let resp = client.call(&d, Method::GET, "/echo", "").await.unwrap();
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(&resp.body[..], b"node:pod:1:echo");

    // a pod's own error status is a response, not a client error
    let resp = client
        .call(&dest("reject-x"), Method::PUT, "", "")
        .await
        .unwrap();
    assert_eq!(resp.status, StatusCode::UNPROCESSABLE_ENTITY);

    let session = client.begin(&d, "/begin", "").await.unwrap();
    assert!(a.member.holds_lock(session.lock()));
    let resp = session.call(Method::GET, "/q", "").await.unwrap();
    assert_eq!(&resp.body[..], b"node:pod:1");
    let resp = session.commit("/commit").await.unwrap();
    assert_eq!(resp.status, StatusCode::OK);
    a.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn public_forward_and_extractors_on_routes_of_your_own() {
    let p = prefix();
    let mut pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let forwarder = Forwarder::new(ForwardConfig::default()).unwrap();
    let address = MemberAddress::parse(&format!("http://{}", pod.addr)).unwrap();
    let req = axum::http::Request::builder()
        .uri("/destinations/d/echo")
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = forwarder
        .send(&address, req, &RequestId::generate())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    let app = Router::new()
        .route(
            "/t/{destination}",
            get(|Destination(d): Destination| async move { d.to_string() }),
        )
        .route(
            "/s/{lock}",
            get(|Lock(l): Lock| async move { l.to_string() }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http = Http::new();
    assert_eq!(
        http.send("GET", &format!("{base}/t/node:pod:3")).await,
        (StatusCode::OK, "node:pod:3".to_owned())
    );
    for path in ["/t/a%2Fb", "/t/..", "/s/%00"] {
        let (status, body) = http.send("GET", &format!("{base}{path}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert!(body.contains("invalid_id"), "{path}: {body}");
    }
    server.abort();
    pod.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn client_cancels_by_its_own_request_id_and_when_its_timeout_expires() {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    let p = prefix();
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let mut pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let client = CoordinatorClient::new(&c.base).unwrap();
    let d = dest("cancel-me");
    let started = |n| {
        let stats = pod.stats.clone();
        async move {
            eventually(Duration::from_secs(5), || async {
                stats.slow_started.load(Ordering::SeqCst) == n
            })
            .await
        }
    };

    // the caller's id: another client cancels the call by it
    let id = RequestId::generate();
    let call = tokio::spawn({
        let (client, d, id) = (client.clone(), d.clone(), id.clone());
        async move { client.call_with_id(&d, Method::GET, "/slow", "", &id).await }
    });
    assert!(started(1).await);
    let other = CoordinatorClient::new(&c.base).unwrap();
    match other.call_with_id(&d, Method::GET, "/echo", "", &id).await {
        Err(ClientError::Coordinator { status, code, .. }) => {
            assert_eq!(
                (status, code.as_str()),
                (StatusCode::CONFLICT, "request_id_in_use")
            );
        }
        other => panic!("an id in flight was reused: {other:?}"),
    }
    assert!(other.cancel(&id).await.unwrap());
    let resp = call.await.unwrap().unwrap();
    assert_eq!(
        resp.status.as_u16(),
        coordinator::http::pod::CANCELLED_STATUS
    );
    assert_eq!(
        resp.headers[coordinator::http::REQUEST_ID_HEADER],
        id.as_str()
    );
    assert_eq!(pod.stats.aborted_by_cancel.load(Ordering::SeqCst), 1);
    assert!(!other.cancel(&id).await.unwrap(), "no longer in flight");

    // ids that do not look minted are refused before routing
    let short = RequestId::new("1").unwrap();
    match client
        .call_with_id(&d, Method::GET, "/echo", "", &short)
        .await
    {
        Err(ClientError::Coordinator { code, .. }) => assert_eq!(code, "invalid_id"),
        other => panic!("a guessable id was accepted: {other:?}"),
    }

    // a client-side timeout cancels the call on the pod (detached work:
    // only a cancel message stops it, not the closed connection)
    let hasty = client.with_timeout(Duration::from_millis(500));
    match hasty.call(&d, Method::GET, "/detached", "").await {
        Err(ClientError::Timeout { after, .. }) => assert_eq!(after, Duration::from_millis(500)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            pod.stats.aborted_by_cancel.load(Ordering::SeqCst) == 2
        })
        .await,
        "the timed-out call was cancelled on the pod"
    );
    assert_eq!(pod.stats.slow_started.load(Ordering::SeqCst), 2);
    let resp = hasty.call(&d, Method::GET, "/echo", "").await.unwrap();
    assert_eq!(resp.status, StatusCode::OK);
    pod.kill().await;
}
