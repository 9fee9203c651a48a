//! Cancellation of a running query: by the client's disconnect, by the
//! coordinator's cancel message, by `cancel(request id)` from another
//! connection, and by a client-side timeout.

use std::time::Duration;

use bytes::Bytes;
use coordinator::client::{ClientError, CoordinatorClient};
use coordinator::{DestinationId, RequestId};
use http_body_util::Full;
use tokio::io::AsyncWriteExt;

use crate::{Fleet, Opts, bounded};

/// Long enough never to finish within a test.
const SLEEP: &str = "/sleep/60";

/// How long a cancelled query may take to stop on the server.
const STOPS_WITHIN: Duration = Duration::from_secs(5);

impl Fleet {
    /// A tenant warmed up (its pod claimed, its pool open) and its pod.
    async fn warm(&self, name: &str) -> (String, String) {
        let t = self.tenant(name);
        let (pod, _) = self.ok("PUT", &format!("/tenants/{t}/kv/warm"), "up").await;
        (t, pod)
    }

    /// Waits until `tenant` runs one `pg_sleep` on the server.
    async fn sleeping(&self, tenant: &str) {
        assert!(
            self.sleeps_become(tenant, 1, Duration::from_secs(10)).await,
            "the slow query runs on the server"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn client_disconnect_cancels_the_running_query() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let (t, pod) = f.warm("slow").await;
        let addr = f.coordinator.trim_start_matches("http://").to_owned();
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(
                format!("GET /tenants/{t}{SLEEP} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        f.sleeping(&t).await;
        drop(stream);
        assert!(
            f.sleeps_become(&t, 0, STOPS_WITHIN).await,
            "the query is cancelled on the server once the client is gone"
        );
        // the tenant still works
        f.ok("GET", &format!("/tenants/{t}/kv/warm"), "").await;

        // the coordinator's cancel message, straight to the pod: the call
        // answers 499 and its query is cancelled on the server
        let pod_url = f.pod_urls[f.pods.iter().position(|p| *p == pod).unwrap()].clone();
        let id = RequestId::generate();
        let req = axum::http::Request::builder()
            .uri(format!("{pod_url}/destinations/{t}{SLEEP}"))
            .header(coordinator::http::REQUEST_ID_HEADER, id.as_str())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let call = tokio::spawn(f.http.request(req));
        f.sleeping(&t).await;
        let cancel = f
            .raw("POST", &format!("{pod_url}/_coordinator/cancel/{id}"), "")
            .await
            .unwrap();
        assert_eq!(cancel.status, 204, "the pod knew the call: {cancel:?}");
        let answered = tokio::time::timeout(STOPS_WITHIN, call)
            .await
            .expect("the cancelled call answers")
            .unwrap()
            .unwrap();
        assert_eq!(answered.status().as_u16(), 499);
        assert!(
            f.sleeps_become(&t, 0, STOPS_WITHIN).await,
            "the query is cancelled on the server by the cancel message"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn explicit_cancel_by_id_from_another_connection_and_a_client_timeout_stop_the_query() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let (t, _) = f.warm("cancel").await;
        let tenant = DestinationId::new(t.as_str()).unwrap();
        let client = CoordinatorClient::new(&f.coordinator).unwrap();

        // the caller chose the id; another client (its own connections)
        // cancels by it while the query runs
        let id = RequestId::generate();
        let call = tokio::spawn({
            let (client, tenant, id) = (client.clone(), tenant.clone(), id.clone());
            async move {
                client
                    .call_with_id(&tenant, axum::http::Method::GET, SLEEP, "", &id)
                    .await
            }
        });
        f.sleeping(&t).await;
        let other = CoordinatorClient::new(&f.coordinator).unwrap();
        // a second call under an id in flight is refused, not run
        let twin = other
            .call_with_id(&tenant, axum::http::Method::GET, "/kv/warm", "", &id)
            .await;
        assert!(
            matches!(&twin, Err(ClientError::Coordinator { code, .. }) if code == "request_id_in_use"),
            "{twin:?}"
        );
        assert!(other.cancel(&id).await.unwrap(), "the call was in flight");
        let answered = tokio::time::timeout(STOPS_WITHIN, call)
            .await
            .expect("the cancelled call answers at once")
            .unwrap()
            .unwrap();
        assert_eq!(answered.status.as_u16(), 499, "{answered:?}");
        assert_eq!(
            answered.headers[coordinator::http::REQUEST_ID_HEADER],
            id.as_str(),
            "the call ran under the caller's id"
        );
        assert!(
            f.sleeps_become(&t, 0, STOPS_WITHIN).await,
            "cancel(id) stops the query on the server"
        );
        assert!(!other.cancel(&id).await.unwrap(), "nothing left to cancel");
        // a caller id that does not look minted is refused before routing
        let r = f
            .raw_with(
                "GET",
                &format!("{}/tenants/{t}/kv/warm", f.coordinator),
                "",
                &[(coordinator::http::REQUEST_ID_HEADER, "1")],
            )
            .await
            .unwrap();
        assert_eq!((r.status, r.pod.as_deref()), (400, None), "{r:?}");

        // a client-side timeout abandons the call and cancels it
        let hasty = client.with_timeout(Duration::from_secs(2));
        let started = std::time::Instant::now();
        let call = tokio::spawn({
            let (hasty, tenant) = (hasty.clone(), tenant.clone());
            async move { hasty.call(&tenant, axum::http::Method::GET, SLEEP, "").await }
        });
        f.sleeping(&t).await;
        let timed_out = call.await.unwrap();
        assert!(
            matches!(timed_out, Err(ClientError::Timeout { .. })),
            "{timed_out:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            f.sleeps_become(&t, 0, STOPS_WITHIN).await,
            "the timed-out query is cancelled on the server"
        );
        // calls within the timeout are answered as usual
        let ok = hasty
            .call(&tenant, axum::http::Method::GET, "/kv/warm", "")
            .await
            .unwrap();
        assert_eq!(ok.status.as_u16(), 200, "{ok:?}");
    })
    .await;
}
