//! A pod as a process: `events-probe`, driven through its stdin and read
//! through its JSON lines, killed with SIGKILL through its `Child` handle
//! (never by pid or name).

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::{HEARTBEAT, Seen, TTL, eventually};

pub struct Probe {
    pub id: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Probe {
    /// Starts a probe joined to `prefix` on `url` and waits for `ready`.
    pub async fn start(url: &str, prefix: &str, id: &str) -> Probe {
        let mut child = Command::new(env!("CARGO_BIN_EXE_events-probe"))
            .args(["--valkey", url, "--prefix", prefix, "--id", id])
            .args(["--ttl-ms", &TTL.as_millis().to_string()])
            .args(["--heartbeat-ms", &HEARTBEAT.as_millis().to_string()])
            .args(["--probe-ms", "200", "--command-timeout-ms", "500"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start events-probe");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        let probe = Probe {
            id: id.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
        };
        probe.wait_kind("ready", Duration::from_secs(10)).await;
        probe
    }

    pub async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("probe stdin closed");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// The first line matching `pred`, waiting up to `within`.
    pub async fn wait_for(&self, within: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        let mut found = None;
        eventually(within, || {
            found = self.lines().into_iter().find(|v| pred(v));
            let hit = found.is_some();
            async move { hit }
        })
        .await;
        found
    }

    async fn wait_kind(&self, kind: &str, within: Duration) -> Value {
        self.wait_for(within, |v| v["kind"] == kind)
            .await
            .unwrap_or_else(|| {
                panic!(
                    "{}: no {kind:?} line within {within:?}: {:?}",
                    self.id,
                    self.lines()
                )
            })
    }

    /// Subscribes to `dest`; the number the subscription starts after.
    pub async fn subscribe(&mut self, dest: &str) -> u64 {
        let before = self.count(|v| v["kind"] == "subscribed" && v["dest"] == dest);
        self.send(&format!("sub {dest}")).await;
        let ok = eventually(Duration::from_secs(10), || {
            let n = self.count(|v| v["kind"] == "subscribed" && v["dest"] == dest);
            async move { n > before }
        })
        .await;
        assert!(
            ok,
            "{}: not subscribed to {dest}: {:?}",
            self.id,
            self.lines()
        );
        self.lines()
            .iter()
            .rev()
            .find(|v| v["kind"] == "subscribed" && v["dest"] == dest)
            .and_then(|v| v["seq"].as_u64())
            .unwrap()
    }

    /// Publishes and waits for the answer (`published` or `publish_error`).
    pub async fn publish(&mut self, dest: &str, payload: &str) -> Value {
        let before = self.count(|v| v["kind"].as_str().is_some_and(|k| k.starts_with("publish")));
        self.send(&format!("pub {dest} {payload}")).await;
        let mut answer = None;
        eventually(Duration::from_secs(10), || {
            answer = self
                .lines()
                .into_iter()
                .filter(|v| v["kind"].as_str().is_some_and(|k| k.starts_with("publish")))
                .nth(before);
            let hit = answer.is_some();
            async move { hit }
        })
        .await;
        answer.unwrap_or_else(|| panic!("{}: no answer to a publish", self.id))
    }

    pub fn count(&self, pred: impl Fn(&Value) -> bool) -> usize {
        self.lines().iter().filter(|v| pred(v)).count()
    }

    /// The notices of `dest` so far, as [`Seen`].
    pub fn seen(&self, dest: &str) -> Vec<Seen> {
        self.lines()
            .iter()
            .filter(|v| v["dest"] == dest)
            .filter_map(|v| match v["kind"].as_str()? {
                "event" => Some(Seen::Event(
                    v["seq"].as_u64()?,
                    v["payload"].as_str()?.to_owned(),
                )),
                "gap" => Some(Seen::Gap(v["first"].as_u64()?, v["last"].as_u64()?)),
                "restarted" => Some(Seen::Restarted),
                "interrupted" => Some(Seen::Interrupted),
                "resumed" => Some(Seen::Resumed),
                _ => None,
            })
            .collect()
    }

    /// The payloads of the events of `dest` seen so far.
    pub fn payloads(&self, dest: &str) -> Vec<String> {
        self.seen(dest)
            .into_iter()
            .filter_map(|s| match s {
                Seen::Event(_, p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// SIGKILL, through the child handle.
    pub async fn kill(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }
}
