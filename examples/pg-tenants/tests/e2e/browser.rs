//! The live page in a real browser: headless Chromium (Debian's `chromium`
//! package; `.ci/install-deps.sh` installs it) opens `/tenants/{t}/live`
//! on one pod, a write is made through the coordinator to the tenant's
//! pod (another one), and the page must show it within 1 s. Driven over
//! the DevTools protocol (a websocket to `--remote-debugging-port`); a
//! screenshot is saved beside the fleet's logs.
//!
//! Without a `chromium` on the `PATH` (or in `CHROMIUM`) the test fails,
//! saying so: `cargo xtask test-drivers` skips it then, and reports it as
//! skipped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;

use crate::fleet::{Fleet, Opts, bounded};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How soon the page must show a write.
const WITHIN: Duration = Duration::from_secs(1);

fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return path.into();
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .expect(
            "no chromium on the PATH (apt-get install chromium; .ci/install-deps.sh does): \
             cargo xtask test-drivers skips this test without it",
        )
}

/// A headless Chromium with a fresh profile, killed on drop.
struct Browser {
    _child: Child,
    _profile: Profile,
    page: Socket,
    next_id: u64,
}

/// Chromium's profile directory, removed on drop.
struct Profile(PathBuf);

impl Drop for Profile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Browser {
    async fn start(profile: PathBuf) -> Browser {
        std::fs::create_dir_all(&profile).unwrap();
        let child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                "--window-size=1000,700",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start chromium");
        // Chromium writes the port it chose into the profile
        let port_file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.lines().next()?.trim().parse::<u16>().ok())
            {
                break port;
            }
            assert!(
                Instant::now() < deadline,
                "chromium did not open its DevTools port"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let list = http_get(port, "/json/list").await;
        let targets: Value = serde_json::from_str(&list).unwrap();
        let ws = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_owned();
        let (page, _) = tokio_tungstenite::connect_async(ws).await.unwrap();
        Browser {
            _child: child,
            _profile: Profile(profile),
            page,
            next_id: 0,
        }
    }

    /// One DevTools command; its `result`.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.page.send(Message::text(msg)).await.unwrap();
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(10), self.page.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no answer"))
                .expect("the DevTools socket closed")
                .unwrap();
            let Message::Text(text) = msg else { continue };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluates `expr` in the page; its value.
    async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true}),
            )
            .await;
        r["result"]["value"].clone()
    }

    /// Polls `expr` every 20 ms until it is `true` or `within` passes.
    async fn until(&mut self, expr: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.eval(expr).await == Value::Bool(true) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A plain `GET` on Chromium's DevTools HTTP endpoint.
async fn http_get(port: u16, path: &str) -> String {
    use http_body_util::{BodyExt, Empty};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let uri = format!("http://127.0.0.1:{port}{path}");
    let resp = client.get(uri.parse().unwrap()).await.unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// The JavaScript test of the row `key` showing `value`.
fn shows(key: &str, value: &str) -> String {
    format!(
        "(() => {{ const tr = [...document.querySelectorAll('#rows tr')].find(r => r.dataset.key === {key:?}); \
         return !!tr && tr.children[1].textContent === {value:?}; }})()"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL, Valkey and chromium: run cargo xtask test-drivers --engine pg-example"]
async fn browser_page_shows_a_write_made_through_another_pod_within_a_second() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let t = f.tenant("page");
        let (owner, _) = f
            .ok("PUT", &format!("/tenants/{t}/kv/seed"), "planted")
            .await;
        let viewer = f.pods.iter().position(|p| *p != owner).unwrap();
        let page_url = format!("{}/tenants/{t}/live", f.pod_urls[viewer]);

        let mut b = Browser::start(f.procs.dir().join("chromium-profile")).await;
        b.call("Page.navigate", json!({"url": page_url})).await;
        assert!(
            b.until(
                "document.body && document.body.dataset.ready === '1'",
                Duration::from_secs(15)
            )
            .await,
            "the page did not get live: {:?}",
            b.eval("document.body && document.body.innerText").await
        );
        assert!(
            b.until(&shows("seed", "planted"), Duration::from_secs(5))
                .await,
            "rows listed"
        );

        let value = format!("written via {owner}");
        let (pod, _) = f
            .ok("PUT", &format!("/tenants/{t}/kv/greeting"), &value)
            .await;
        assert_eq!(pod, owner);
        assert_ne!(pod, f.pods[viewer], "the write is made through another pod");
        let written = Instant::now();
        let shown = b.until(&shows("greeting", &value), WITHIN).await;
        let took = written.elapsed();

        let shot = b
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        let path = f.procs.dir().join("browser-live-page.png");
        std::fs::write(&path, png).unwrap();
        eprintln!(
            "screenshot: {} (shown: {shown}, after {took:?})",
            path.display()
        );
        assert!(
            shown,
            "the page on {} did not show the write through {owner} within {WITHIN:?}: {:?}",
            f.pods[viewer],
            b.eval("document.body.innerText").await
        );
    })
    .await;
}
