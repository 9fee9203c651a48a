//! Live tenants across pods: an event stream (`GET /tenants/{t}/events`,
//! Server-Sent Events) open on every pod and one through the coordinator;
//! writes made through the coordinator and straight on a pod reach every
//! stream, numbered in one order; a killed pod's stream ends, the others
//! keep receiving.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::fleet::{Fleet, Opts, bounded};

/// One SSE event: its name and JSON data.
#[derive(Clone, Debug)]
pub(crate) struct Sse {
    pub(crate) event: String,
    pub(crate) data: Value,
}

/// An open event stream, read in the background.
pub(crate) struct Stream {
    pub(crate) url: String,
    seen: Arc<Mutex<Vec<Sse>>>,
    ended: Arc<Mutex<bool>>,
}

impl Stream {
    pub(crate) async fn open(url: &str) -> Stream {
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let req = axum::http::Request::get(url)
            .header("accept", "text/event-stream")
            .body(Empty::new())
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "{url}");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(Mutex::new(false));
        let (sink, done) = (seen.clone(), ended.clone());
        tokio::spawn(async move {
            let mut body = resp.into_body();
            let mut text = String::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Ok(chunk) = frame.into_data() else {
                    continue;
                };
                text.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = text.find("\n\n") {
                    let block: String = text.drain(..end + 2).collect();
                    let (mut event, mut data) = (String::from("message"), String::new());
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            event = v.trim().to_owned();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.trim());
                        }
                    }
                    if !data.is_empty() {
                        let data = serde_json::from_str(&data).unwrap_or(Value::Null);
                        sink.lock().unwrap().push(Sse { event, data });
                    }
                }
            }
            *done.lock().unwrap() = true;
        });
        let s = Stream {
            url: url.to_owned(),
            seen,
            ended,
        };
        assert!(
            s.wait(Duration::from_secs(10), |e| e.event == "ready")
                .await
                .is_some(),
            "{url}: no ready event"
        );
        s
    }

    pub(crate) fn seen(&self) -> Vec<Sse> {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn ended(&self) -> bool {
        *self.ended.lock().unwrap()
    }

    pub(crate) async fn wait(&self, within: Duration, pred: impl Fn(&Sse) -> bool) -> Option<Sse> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(e) = self.seen().into_iter().find(|e| pred(e)) {
                return Some(e);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The `change` events' numbers, in arrival order.
    pub(crate) fn change_seqs(&self) -> Vec<u64> {
        self.seen()
            .iter()
            .filter(|e| e.event == "change")
            .filter_map(|e| e.data["seq"].as_u64())
            .collect()
    }
}

/// Waits until `stream` shows the change `op` on `key` (with `value`).
async fn expect_change(stream: &Stream, op: &str, key: &str, value: Option<&str>) -> u64 {
    let hit = stream
        .wait(Duration::from_secs(5), |e| {
            e.event == "change"
                && e.data["change"]["op"] == op
                && e.data["change"]["key"] == key
                && value.is_none_or(|v| e.data["change"]["value"] == v)
        })
        .await;
    let hit =
        hit.unwrap_or_else(|| panic!("{}: no {op} of {key}: {:?}", stream.url, stream.seen()));
    hit.data["seq"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn changes_reach_the_event_streams_on_every_pod() {
    bounded(async {
        let mut f = Fleet::start(Opts::default()).await;
        let t = f.tenant("live");
        let (owner, _) = f.ok("PUT", &format!("/tenants/{t}/kv/seed"), "0").await;
        let mut streams = Vec::new();
        for base in &f.pod_urls {
            streams.push(Stream::open(&format!("{base}/tenants/{t}/events")).await);
        }
        // and one through the coordinator (forwarded to the tenant's pod)
        streams.push(Stream::open(&format!("{}/tenants/{t}/events", f.coordinator)).await);

        // a write through the coordinator: every stream, every pod
        let (pod, put) = f
            .ok("PUT", &format!("/tenants/{t}/kv/greeting"), "hello")
            .await;
        assert_eq!(pod, owner);
        let seq = put["event"].as_u64().expect("the write's event number");
        for s in &streams {
            assert_eq!(
                expect_change(s, "put", "greeting", Some("hello")).await,
                seq
            );
        }
        // a write made straight on another pod reaches them all too
        let other = f.pods.iter().position(|p| *p != owner).unwrap();
        let r = f
            .raw(
                "PUT",
                &format!("{}/destinations/{t}/kv/direct", f.pod_urls[other]),
                "x",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        for s in &streams {
            expect_change(s, "put", "direct", Some("x")).await;
        }
        f.ok("DELETE", &format!("/tenants/{t}/kv/greeting"), "")
            .await;
        for s in &streams {
            expect_change(s, "delete", "greeting", None).await;
        }
        // one order, no gaps, on every stream
        let first = streams[0].change_seqs();
        assert_eq!(first.len(), 3, "{:?}", streams[0].seen());
        assert!(first.windows(2).all(|w| w[1] == w[0] + 1), "{first:?}");
        for s in &streams {
            assert_eq!(s.change_seqs(), first, "{}", s.url);
            assert!(s.seen().iter().all(|e| e.event != "gap"), "{:?}", s.seen());
        }

        // a pod killed: its stream ends, the others keep receiving
        let victim = f
            .pods
            .iter()
            .position(|p| *p != owner && p != &f.pods[other])
            .unwrap();
        let name = f.pods[victim].clone();
        f.procs.kill(&name);
        let ended = async {
            for _ in 0..100 {
                if streams[victim].ended() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        };
        assert!(ended.await, "the killed pod's stream did not end");
        f.ok("PUT", &format!("/tenants/{t}/kv/after"), "kill").await;
        for (i, s) in streams.iter().enumerate() {
            if i != victim {
                expect_change(s, "put", "after", Some("kill")).await;
            }
        }
    })
    .await;
}
