//! A cluster of VVMs on one storage: at most one runs services per key at
//! every moment, and only while the stored record is its own, while leaders
//! are shut down, dropped or partitioned away and replaced. Paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use elections::RecordingKiller;
use elections_testsuite::FaultyStorage;
use storage_mem::MemStorage;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use ttl_storage::{Key, TtlStorage};
use vvm_orch::{LaunchedVvm, ServiceContext, ServicePipeline, Vvm, VvmConfig, service_fn};

const CLUSTER_SIZE: u32 = 2;
const STEP: Duration = Duration::from_millis(100);

/// Who runs services on which key, checked on every start.
#[derive(Default)]
struct Registry {
    state: Mutex<RegistryState>,
}

/// A running leader: node name, record bytes, fencing token.
type Running = (String, Vec<u8>, u64);

#[derive(Default)]
struct RegistryState {
    /// The running services of each key.
    running: HashMap<Key, Vec<Running>>,
    last_token: HashMap<Key, u64>,
    starts: Vec<(Key, String)>,
    violations: Vec<String>,
}

impl Registry {
    fn enter(&self, ctx: &ServiceContext, name: &str) {
        let mut state = self.state.lock().unwrap();
        let key = ctx.key().clone();
        let running = state.running.entry(key.clone()).or_default();
        if !running.is_empty() {
            let msg = format!("{name} started on {key} while {running:?} run");
            state.violations.push(msg);
        }
        let running = state.running.entry(key.clone()).or_default();
        running.push((
            name.to_owned(),
            ctx.record_value().to_vec(),
            ctx.fencing_token(),
        ));
        let last = state.last_token.insert(key.clone(), ctx.fencing_token());
        if last.is_some_and(|last| last >= ctx.fencing_token()) {
            let msg = format!("{name}: token {} after {last:?}", ctx.fencing_token());
            state.violations.push(msg);
        }
        state.starts.push((key, name.to_owned()));
    }

    fn leave(&self, ctx: &ServiceContext, name: &str) {
        let mut state = self.state.lock().unwrap();
        if let Some(running) = state.running.get_mut(ctx.key()) {
            running.retain(|(n, _, _)| n != name);
        }
    }

    /// Checks, at this instant, that each key has at most one running
    /// leader and that its record holds that leader's value.
    async fn check(&self, storage: &MemStorage) -> HashMap<Key, String> {
        let running: Vec<(Key, Vec<Running>)> = {
            let state = self.state.lock().unwrap();
            state
                .running
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let mut leaders = HashMap::new();
        for (key, leaders_of_key) in running {
            assert!(
                leaders_of_key.len() <= 1,
                "{key} has {leaders_of_key:?} leaders"
            );
            if let Some((name, record_value, _)) = leaders_of_key.first() {
                let record = storage.get(&key).await.unwrap();
                assert_eq!(
                    record.as_ref(),
                    Some(record_value),
                    "{name} runs on {key} but the record is not its own"
                );
                leaders.insert(key, name.clone());
            }
        }
        leaders
    }
}

fn pipeline(registry: Arc<Registry>, name: String) -> impl ServicePipeline {
    service_fn(move |ctx: ServiceContext| {
        let registry = registry.clone();
        let name = name.clone();
        async move {
            registry.enter(&ctx, &name);
            ctx.shutdown_requested().await;
            // Stopping takes a while, as real services do.
            tokio::time::sleep(Duration::from_millis(300)).await;
            registry.leave(&ctx, &name);
            Ok::<_, Infallible>(())
        }
    })
}

/// How the test takes a node down.
enum Kill {
    Shutdown,
    Drop,
}

/// One VVM and the host loop around it: shuts down on a problem or when told.
struct Node {
    name: String,
    faulty: Arc<FaultyStorage>,
    killer: Arc<RecordingKiller>,
    stop: CancellationToken,
    drop_it: CancellationToken,
    host: JoinHandle<Option<String>>,
}

fn start_node(name: &str, mem: &MemStorage, registry: &Arc<Registry>) -> Node {
    let faulty = FaultyStorage::new(Arc::new(mem.clone()));
    let mut config = VvmConfig::new(name);
    config.cluster_size = CLUSTER_SIZE;
    config.leadership_duration = Duration::from_secs(4);
    config.acquisition_duration = Duration::from_secs(3600);
    config.acquisition_retry_pause = Duration::from_millis(500);
    let killer = RecordingKiller::new();
    let vvm = Vvm::provide(
        config,
        faulty.clone(),
        pipeline(registry.clone(), name.to_owned()),
    )
    .unwrap()
    .with_killer(killer.clone());
    let (launched, problem) = vvm.launch();
    let stop = CancellationToken::new();
    let drop_it = CancellationToken::new();
    let host = tokio::spawn(host_loop(launched, problem, stop.clone(), drop_it.clone()));
    Node {
        name: name.to_owned(),
        faulty,
        killer,
        stop,
        drop_it,
        host,
    }
}

async fn host_loop(
    vvm: LaunchedVvm,
    problem: vvm_orch::ProblemSignal,
    stop: CancellationToken,
    drop_it: CancellationToken,
) -> Option<String> {
    tokio::select! {
        () = problem.raised() => {}
        () = stop.cancelled() => {}
        () = drop_it.cancelled() => {
            drop(vvm);
            return None;
        }
    }
    vvm.shutdown().await.err().map(|e| e.to_string())
}

/// Advances time step by step for `duration`, checking the invariant at every step.
async fn run_checked(
    duration: Duration,
    registry: &Registry,
    mem: &MemStorage,
) -> HashMap<Key, String> {
    let mut leaders = registry.check(mem).await;
    let steps = duration.as_millis() / STEP.as_millis();
    for _ in 0..steps {
        tokio::time::sleep(STEP).await;
        leaders = registry.check(mem).await;
    }
    leaders
}

/// Runs checked until every key has a leader other than `gone`; returns the
/// leaders and the time it took.
async fn until_all_led(
    registry: &Registry,
    mem: &MemStorage,
    gone: Option<&str>,
) -> (HashMap<Key, String>, Duration) {
    let started = tokio::time::Instant::now();
    loop {
        let leaders = registry.check(mem).await;
        if leaders.len() == CLUSTER_SIZE as usize && !leaders.values().any(|l| Some(&**l) == gone) {
            return (leaders, started.elapsed());
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no takeover");
        tokio::time::sleep(STEP).await;
    }
}

fn leader_of(leaders: &HashMap<Key, String>, index: u32) -> String {
    let key = Key::new(format!("vvm/leader/{index}")).unwrap();
    leaders[&key].clone()
}

#[tokio::test(start_paused = true)]
async fn one_leader_per_key_while_leaders_are_killed_and_replaced() {
    let mem = MemStorage::new();
    let registry = Arc::new(Registry::default());
    let mut nodes: HashMap<String, Node> = HashMap::new();
    for name in ["a", "b", "c"] {
        nodes.insert(name.to_owned(), start_node(name, &mem, &registry));
    }
    let (mut leaders, _) = until_all_led(&registry, &mem, None).await;
    run_checked(Duration::from_secs(10), &registry, &mem).await;

    let kills = [
        (1, Kill::Shutdown, "d"),
        (2, Kill::Drop, "e"),
        (1, Kill::Shutdown, "f"),
        (2, Kill::Drop, "g"),
    ];
    let mut retired = Vec::new();
    for (index, how, replacement) in kills {
        let victim = leader_of(&leaders, index);
        let node = nodes.remove(&victim).unwrap();
        match how {
            Kill::Shutdown => node.stop.cancel(),
            Kill::Drop => node.drop_it.cancel(),
        }
        let (now, _) = until_all_led(&registry, &mem, Some(&victim)).await;
        assert_ne!(leader_of(&now, index), victim);
        retired.push(node);
        nodes.insert(
            replacement.to_owned(),
            start_node(replacement, &mem, &registry),
        );
        leaders = run_checked(Duration::from_secs(10), &registry, &mem).await;
        assert_eq!(leaders.len(), CLUSTER_SIZE as usize);
    }

    // Partition a leader away: it loses leadership, its host shuts it down,
    // and the record expires before a standby takes the key.
    let victim = leader_of(&leaders, 1);
    let partitioned = nodes.remove(&victim).unwrap();
    partitioned.faulty.set_partitioned(true);
    let (now, takeover) = until_all_led(&registry, &mem, Some(&victim)).await;
    assert_ne!(leader_of(&now, 1), victim);
    // No takeover before the lease (4 s) ran out.
    assert!(
        takeover >= Duration::from_secs(2),
        "took over in {takeover:?}"
    );
    let problem = partitioned.host.await.unwrap();
    assert!(
        problem.as_deref().is_some_and(|p| p.contains("lost")),
        "{problem:?}"
    );
    assert!(partitioned.killer.kills().is_empty());
    run_checked(Duration::from_secs(10), &registry, &mem).await;

    for (_, node) in nodes.drain() {
        node.stop.cancel();
        assert_eq!(node.host.await.unwrap(), None, "{}", node.name);
        assert!(node.killer.kills().is_empty(), "{}", node.name);
    }
    for node in retired {
        let outcome = node.host.await.unwrap();
        assert_eq!(outcome, None, "{}", node.name);
        assert!(node.killer.kills().is_empty(), "{}", node.name);
    }
    // Let dropped VVMs finish their background shutdown.
    run_checked(Duration::from_secs(2), &registry, &mem).await;

    {
        let state = registry.state.lock().unwrap();
        assert!(state.violations.is_empty(), "{:?}", state.violations);
        // 2 first leaders, 4 replacements after kills, 1 after the partition.
        assert_eq!(state.starts.len(), 7, "{:?}", state.starts);
        assert!(state.running.values().all(Vec::is_empty));
    }
    for index in 1..=CLUSTER_SIZE {
        let key = Key::new(format!("vvm/leader/{index}")).unwrap();
        assert_eq!(mem.get(&key).await.unwrap(), None);
    }
}
