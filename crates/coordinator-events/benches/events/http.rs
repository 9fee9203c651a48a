//! The alternative channel, as a prototype with the same work per event:
//! one Valkey script numbers the event and reads the subscribed pods'
//! addresses (the subscription map), then the publisher hands the event
//! to its own subscriber directly and `POST`s it to every other pod's
//! `/_events/{dest}` over a pooled, kept-alive HTTP/1.1 connection; each
//! pod's handler passes it to its subscriber.

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use fred::prelude::*;
use fred::types::scripts::Script;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;

use crate::{Channel, PAYLOAD, PODS, Sink, now_micros};

/// `KEYS`: counter, subscribers set. Numbers the event, answers the
/// subscribed pods' addresses.
const PUBLISH: &str = r#"
local seq = redis.call('INCR', KEYS[1])
return {seq, redis.call('SMEMBERS', KEYS[2])}
"#;

pub(crate) struct Fleet {
    valkey: Vec<Client>,
    addresses: Vec<String>,
    local: Vec<mpsc::UnboundedSender<(usize, u64)>>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    script: Script,
    counter: String,
    subscribers: String,
}

async fn receive(State(tx): State<mpsc::UnboundedSender<(usize, u64)>>, body: Bytes) {
    // "<from> <sent micros>\n<payload>"
    let text = std::str::from_utf8(&body).unwrap();
    let (head, _payload) = text.split_once('\n').unwrap();
    let (from, sent) = head.split_once(' ').unwrap();
    let _ = tx.send((from.parse().unwrap(), sent.parse().unwrap()));
}

impl Fleet {
    pub(crate) async fn start(url: &str, sink: Sink) -> Fleet {
        let prefix = format!(
            "benchh{}",
            &coordinator::RequestId::generate().as_str()[..8]
        );
        let counter = format!("{prefix}:event-seq:bench");
        let subscribers = format!("{prefix}:hsubs:bench");
        let mut valkey = Vec::new();
        let mut addresses = Vec::new();
        let mut local = Vec::new();
        for i in 0..PODS {
            let client = coordinator::connect(url, Duration::from_secs(2))
                .await
                .unwrap();
            let (tx, mut rx) = mpsc::unbounded_channel::<(usize, u64)>();
            let sink = sink.clone();
            tokio::spawn(async move {
                while let Some((from, sent)) = rx.recv().await {
                    sink.record(i, from, sent);
                }
            });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = format!("http://{}", listener.local_addr().unwrap());
            let app = Router::new()
                .route("/_events/bench", post(receive))
                .with_state(tx.clone());
            tokio::spawn(async move { axum::serve(listener, app).await });
            let _: i64 = client.sadd(&subscribers, addr.as_str()).await.unwrap();
            valkey.push(client);
            addresses.push(addr);
            local.push(tx);
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build(connector);
        Fleet {
            valkey,
            addresses,
            local,
            http,
            script: Script::from_lua(PUBLISH),
            counter,
            subscribers,
        }
    }
}

impl Channel for Fleet {
    async fn publish(&self, from: usize) {
        // stamped before the script, as the pubsub channel does
        let sent = now_micros();
        let (_seq, pods): (i64, Vec<String>) = self
            .script
            .evalsha_with_reload(
                &self.valkey[from],
                vec![self.counter.clone(), self.subscribers.clone()],
                Vec::<String>::new(),
            )
            .await
            .unwrap();
        let _ = self.local[from].send((from, sent));
        let mut body = format!("{from} {sent}\n").into_bytes();
        body.extend_from_slice(PAYLOAD);
        let body = Bytes::from(body);
        let sends = pods
            .iter()
            .filter(|a| **a != self.addresses[from])
            .map(|addr| {
                let req = http::Request::post(format!("{addr}/_events/bench"))
                    .body(Full::new(body.clone()))
                    .unwrap();
                let client = self.http.clone();
                async move {
                    let resp = client.request(req).await.unwrap();
                    assert!(resp.status().is_success());
                }
            });
        futures::future::join_all(sends).await;
    }
}
