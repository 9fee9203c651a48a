//! Three VVMs in one process on one in-memory storage, in real time, with a
//! 2 s leadership duration. The example kills the leader twice, first with
//! a graceful Shutdown and then with a network partition, which it simulates
//! by making every storage call of that VVM fail. It prints a timeline of who
//! leads, the time from each kill to the takeover, and the latency of each
//! Shutdown.
//!
//! ```text
//! cargo run -p vvm-orch --example cluster
//! ```
#![allow(clippy::expect_used)]

use std::{
    convert::Infallible,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use elections::RecordingKiller;
use elections_testsuite::FaultyStorage;
use storage_mem::MemStorage;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use vvm_orch::{ServiceContext, Vvm, VvmConfig, service_fn};

static START: OnceLock<Instant> = OnceLock::new();

/// Prints a timeline line, stamped with the time since the start.
fn say(line: &str) {
    let at = START.get_or_init(Instant::now).elapsed();
    println!("[{:>7.3}s] {line}", at.as_secs_f64());
}

enum Event {
    Leads(String, Instant),
    ShutDown(String, Duration),
}

struct Node {
    name: String,
    faulty: Arc<FaultyStorage>,
    stop: CancellationToken,
}

fn start_node(name: &str, mem: &MemStorage, events: &mpsc::UnboundedSender<Event>) -> Node {
    let faulty = FaultyStorage::new(Arc::new(mem.clone()));
    let mut config = VvmConfig::new(name);
    config.leadership_duration = Duration::from_secs(2);
    config.acquisition_duration = Duration::from_secs(600);
    config.acquisition_retry_pause = Duration::from_millis(100);

    let service_name = name.to_owned();
    let service_events = events.clone();
    let pipeline = service_fn(move |ctx: ServiceContext| {
        let name = service_name.clone();
        let events = service_events.clone();
        async move {
            let _ = events.send(Event::Leads(name.clone(), Instant::now()));
            say(&format!(
                "{name} LEADS {} (fencing token {})",
                ctx.key(),
                ctx.fencing_token()
            ));
            ctx.shutdown_requested().await;
            say(&format!("{name} stops its services"));
            Ok::<_, Infallible>(())
        }
    });
    // The example records killer deadlines instead of exiting the process.
    let vvm = Vvm::provide(config, faulty.clone(), pipeline)
        .expect("valid config")
        .with_killer(RecordingKiller::new());
    say(&format!("{name} launching"));
    let (vvm, problem) = vvm.launch();

    // The host loop: shut down on a problem or when told to.
    let stop = CancellationToken::new();
    let host_stop = stop.clone();
    let host_events = events.clone();
    let host_name = name.to_owned();
    tokio::spawn(async move {
        tokio::select! {
            () = problem.raised() => say(&format!("{host_name} problem: {}", problem.describe().unwrap_or_default())),
            () = host_stop.cancelled() => {}
        }
        let started = Instant::now();
        let result = vvm.shutdown().await;
        let latency = started.elapsed();
        say(&format!(
            "{host_name} shut down in {:.1} ms ({})",
            latency.as_secs_f64() * 1e3,
            match &result {
                Ok(()) => "clean".to_owned(),
                Err(problem) => format!("problem: {problem}"),
            }
        ));
        let _ = host_events.send(Event::ShutDown(host_name, latency));
    });
    Node {
        name: name.to_owned(),
        faulty,
        stop,
    }
}

/// The events the nodes report, and the shutdowns seen so far.
struct Events {
    rx: mpsc::UnboundedReceiver<Event>,
    shutdowns: Vec<(String, Duration)>,
}

impl Events {
    /// Waits for the next "X leads" event; returns who and when.
    async fn next_leader(&mut self) -> (String, Instant) {
        loop {
            match self.rx.recv().await.expect("nodes run") {
                Event::Leads(name, at) => return (name, at),
                Event::ShutDown(name, latency) => self.shutdowns.push((name, latency)),
            }
        }
    }

    /// Waits until `n` shutdowns have been reported.
    async fn shutdowns(&mut self, n: usize) {
        while self.shutdowns.len() < n {
            match self.rx.recv().await.expect("nodes run") {
                Event::ShutDown(name, latency) => self.shutdowns.push((name, latency)),
                Event::Leads(name, _) => say(&format!("(note: {name} took over meanwhile)")),
            }
        }
    }
}

#[tokio::main]
async fn main() {
    START.get_or_init(Instant::now);
    let mem = MemStorage::new();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut events = Events {
        rx,
        shutdowns: Vec::new(),
    };
    let mut nodes: Vec<Node> = ["vvm-a", "vvm-b", "vvm-c"]
        .iter()
        .map(|name| start_node(name, &mem, &tx))
        .collect();

    let (leader, _) = events.next_leader().await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Kill 1: graceful Shutdown. Leadership is released once the services
    // stopped, so a standby takes over at its next acquisition round.
    say(&format!("KILL 1: {leader} shuts down gracefully"));
    let node = take(&mut nodes, &leader);
    let killed_at = Instant::now();
    node.stop.cancel();
    let (leader, at) = events.next_leader().await;
    let graceful_takeover = at - killed_at;
    say(&format!(
        "{leader} took over {:.0} ms after the kill",
        graceful_takeover.as_secs_f64() * 1e3
    ));
    events.shutdowns(1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Kill 2: partition. The leader can no longer reach the storage: it
    // detects the loss, stops its services, but cannot delete its record,
    // so the standby must wait for the record to expire.
    say(&format!("KILL 2: {leader} is partitioned from the storage"));
    let node = take(&mut nodes, &leader);
    let killed_at = Instant::now();
    node.faulty.set_partitioned(true);
    let (leader, at) = events.next_leader().await;
    let partition_takeover = at - killed_at;
    say(&format!(
        "{leader} took over {:.0} ms after the partition (lease 2 s)",
        partition_takeover.as_secs_f64() * 1e3
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;

    say("shutting the rest down");
    for node in &nodes {
        node.stop.cancel();
    }
    // Every node: the gracefully killed, the partitioned, and the rest.
    events.shutdowns(2 + nodes.len()).await;
    let latencies: Vec<Duration> = events.shutdowns.iter().map(|(_, l)| *l).collect();
    let max = latencies.iter().max().copied().unwrap_or_default();
    let min = latencies.iter().min().copied().unwrap_or_default();

    println!();
    println!("summary");
    println!(
        "  takeover after a graceful shutdown: {:>7.1} ms",
        graceful_takeover.as_secs_f64() * 1e3
    );
    println!(
        "  takeover after a partition:         {:>7.1} ms (lease 2 s)",
        partition_takeover.as_secs_f64() * 1e3
    );
    println!(
        "  Shutdown latency: {:.2} ms .. {:.2} ms over {} shutdowns",
        min.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        latencies.len()
    );
    for (name, latency) in &events.shutdowns {
        println!("    {name}: {:.2} ms", latency.as_secs_f64() * 1e3);
    }
}

fn take(nodes: &mut Vec<Node>, name: &str) -> Node {
    let index = nodes
        .iter()
        .position(|n| n.name == name)
        .expect("the leader is one of the nodes");
    nodes.remove(index)
}
