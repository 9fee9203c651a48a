//! One seeded run: contenders, the chaos driver, and the verdict.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    sync::Arc,
    time::Duration,
};

use tokio::time::{Instant, sleep};

use crate::{
    anchor::{Anchor, LateWrites},
    contender::{self, contender, observer},
    groups::{self, Plan},
    history::{self, EndCause, History, Interval, Verdict, Who},
    preemptions::{self, PreemptionBug, PreemptionVerdict, PrioritySpec},
    priority::priority_contender,
    requests::{self, RequestCounts},
    rng::SimRng,
    vvm::vvm_host,
    world::{FaultCounts, OpCounts, State, World},
};

/// The keys of bare-elections seeds.
const KEY_PREFIX: &str = "vvm/leader/";

/// Parameters of a run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Leadership duration `d` (the design's default, 20 s; time is simulated).
    pub lease: Duration,
    /// How long faults are injected, in leases.
    pub fault_leases: u32,
    /// How long the run goes on after the faults stop, in leases.
    pub calm_leases: u32,
    /// Make inserts overwrite live records: a broken store, to show the
    /// checker catches what it should. Never set outside that test.
    pub broken_store: bool,
    /// The expiry anchor every seed uses; `None`: seed `n` uses
    /// [`Anchor::for_seed`] (apply, etcd, DynamoDB in turn).
    pub anchor: Option<Anchor>,
    /// Drop the send-anchored drivers' late-write guards (their behaviour on
    /// afc8b88, before issue 34's fix), to show the checker catches it.
    pub unguarded_late_writes: bool,
    /// A deliberate bug in the priority seeds' preemption, to show the
    /// checks catch it. Never set outside those tests.
    pub preemption_bug: Option<PreemptionBug>,
    /// The observers poll instead of following the store's writes (as
    /// before issue 37's fix), to show the missed-leadership check catches
    /// it. Never set outside that test.
    pub observers_poll: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            lease: Duration::from_secs(20),
            fault_leases: 30,
            calm_leases: 4,
            broken_store: false,
            anchor: None,
            unguarded_late_writes: false,
            preemption_bug: None,
            observers_poll: false,
        }
    }
}

/// What the contenders are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContenderKind {
    /// Bare `elections::Elections` instances with a work loop.
    Elections,
    /// Whole `vvm_orch` VVMs: Launcher, LeadershipMonitor, a service
    /// pipeline that acts while it runs, ordered Shutdown.
    Vvm,
}

/// What one run did and what the checker found.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// What the contenders were.
    pub kind: ContenderKind,
    /// Where the store counted expiries from.
    pub anchor: Anchor,
    /// What became of writes that arrived after a later write.
    pub late: LateWrites,
    /// Contenders in the run.
    pub contenders: usize,
    /// Keys contended for.
    pub keys: usize,
    /// VVM seeds: locks (names sharing prefixes) in the run.
    pub locks: usize,
    /// VVM seeds: some lock's nodes were started with different cluster sizes.
    pub mixed_sizes: bool,
    /// Leaderships of one lock started with different cluster sizes that
    /// overlapped in time (must be empty).
    pub size_overlaps: Vec<(Interval, Interval)>,
    /// VVM seeds: hand-over requests under faults.
    pub requests: RequestCounts,
    /// Answers that were not what happened (must be empty; see
    /// `requests.rs`).
    pub request_violations: Vec<String>,
    /// Leadership intervals recorded.
    pub intervals: usize,
    /// Faults injected.
    pub faults: FaultCounts,
    /// Campaigns, hand-overs and observations.
    pub ops: OpCounts,
    /// The checker's verdict.
    pub verdict: Verdict,
    /// Seeds with priorities: bare elections (stands, flappers, the
    /// preemption checks) or VVMs (their monitors preempt; the request
    /// checker holds the markers to the rules).
    pub priorities: bool,
    /// The preemption checks' verdict (empty unless `priorities`).
    pub preemption: PreemptionVerdict,
    /// Recovery bound the run was held to: `d + d/20` (TTL plus one retry interval).
    pub recovery_bound: Duration,
    /// Hash of the event log: equal hashes mean an exact replay.
    pub log_hash: u64,
    /// The event log (kept only when asked for).
    pub log: Vec<String>,
}

impl RunReport {
    /// True when no overlap (of one key, or of two cluster sizes of one
    /// lock), no fencing violation, every request answered truthfully, every
    /// key recovered in time, and the observers wrote nothing and ended on
    /// the true leaders.
    pub fn passed(&self) -> bool {
        self.verdict.overlaps.is_empty()
            && self.verdict.fencing_violations.is_empty()
            && self.size_overlaps.is_empty()
            && self.request_violations.is_empty()
            && self.liveness_failures().is_empty()
            && self.ops.observe_stale == 0
            && self.ops.observe_missed == 0
            && self.ops.observer_writes == 0
            && self.preemption.passed()
    }

    /// Keys that had no leader within the recovery bound after the faults stopped.
    pub fn liveness_failures(&self) -> Vec<String> {
        self.verdict
            .recovery
            .iter()
            .filter(|(_, r)| r.is_none_or(|r| r > self.recovery_bound))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Worst recovery time after the faults stopped, over all keys.
    pub fn worst_recovery(&self) -> Duration {
        self.verdict
            .recovery
            .values()
            .map(|r| r.unwrap_or(Duration::MAX))
            .max()
            .unwrap_or_default()
    }
}

/// Runs seed `seed` on a fresh single-threaded runtime with paused time.
pub fn run_seed(seed: u64, config: &SimConfig, keep_log: bool) -> std::io::Result<RunReport> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    Ok(runtime.block_on(run(seed, config.clone(), keep_log)))
}

async fn run(seed: u64, config: SimConfig, keep_log: bool) -> RunReport {
    let d = config.lease;
    let origin = Instant::now();
    let mut rng = SimRng::new(seed);
    let contenders = 2 + rng.below(4) as usize; // 2..=5
    let kind = if rng.chance(0.5) {
        ContenderKind::Vvm
    } else {
        ContenderKind::Elections
    };
    let mut key_count = 1 + rng.below(contenders as u64 - 1).min(1) as u32;
    // Half the bare-elections seeds: priorities, flappers, preemption, on one key.
    let priority = (kind == ContenderKind::Elections && rng.chance(0.5))
        .then(|| Arc::new(PrioritySpec::draw(&mut rng, contenders, d)));
    if priority.is_some() {
        key_count = 1;
    }
    // VVM seeds: one or two locks sharing a prefix, mixed cluster sizes.
    let plan = (kind == ContenderKind::Vvm).then(|| Arc::new(Plan::draw(&mut rng, contenders)));
    // Half the VVM seeds: priorities; their monitors preempt (the request
    // checker holds the markers nobody asked for to the rules).
    let vvm_priority = (kind == ContenderKind::Vvm && rng.chance(0.5))
        .then(|| Arc::new(PrioritySpec::draw_distinct(&mut rng, contenders, d)));
    let keys: Vec<String> = match &plan {
        Some(plan) => plan.keys(),
        None => (1..=key_count)
            .map(|k| format!("{KEY_PREFIX}{k}"))
            .collect(),
    };
    let liveness = plan.as_ref().map_or_else(
        || keys.iter().map(|key| vec![key.clone()]).collect(),
        |p| p.liveness(),
    );
    // One more process slot than contenders: the hand-over requester.
    let slots = contenders + 1;
    let op_fault_p = rng.unit() * 0.08;
    let heal_at = origin + d * config.fault_leases;
    let anchor = config.anchor.unwrap_or_else(|| Anchor::for_seed(seed));
    let world = World::new(
        State {
            rng,
            history: History::new(origin),
            faults: FaultCounts::default(),
            op_fault_p,
            injecting: true,
            heal_at,
            stalled: false,
            paused: vec![false; slots],
            partitioned: vec![false; slots],
            alive: vec![None; slots],
            tasks: vec![None; slots],
            open: vec![None; slots],
            broken_insert: config.broken_store,
            ops: OpCounts::default(),
            observed: std::collections::BTreeMap::new(),
            observed_leaders: std::collections::BTreeMap::new(),
            requests: requests::Ledger::new(vvm_priority.as_ref().map(|s| s.marker_rules())),
            requests_busy: 0,
            priorities: preemptions::PriorityLog::default(),
        },
        d,
        anchor,
        !config.unguarded_late_writes,
    );
    let cast = Cast {
        keys: Arc::new(keys),
        plan: plan.clone(),
        priority: priority.clone().or_else(|| vvm_priority.clone()),
        bug: config.preemption_bug,
    };
    let keys = cast.keys.clone();
    // The observers first: each follows its key from before any write.
    let observers: Vec<_> = keys
        .iter()
        .map(|key| tokio::spawn(observer(world.clone(), key.clone(), !config.observers_poll)))
        .collect();
    tokio::task::yield_now().await;
    let mut incarnations = vec![0u32; contenders];
    for c in 0..contenders {
        start_contender(&world, &cast, c, &mut incarnations);
    }
    let requester = plan.clone().map(|plan| {
        let who = Who {
            contender: contenders,
            incarnation: 0,
        };
        world.lock().alive[contenders] = Some(0);
        tokio::spawn(requests::requester(world.clone(), plan, who, contenders))
    });

    // The fault phase: a chaos action every d/4..2d.
    let mut restart_at: Vec<Option<Instant>> = vec![None; contenders];
    loop {
        let gap = world.lock().rng.between(d / 4, d * 2);
        let next = Instant::now() + gap;
        // Restart dead contenders whose downtime is over, until `next`.
        while Instant::now() < next.min(heal_at) {
            sleep((d / 20).min(next.min(heal_at) - Instant::now())).await;
            for (c, restart) in restart_at.iter_mut().enumerate() {
                let dead = world.lock().alive[c].is_none();
                match (dead, *restart) {
                    (true, None) => {
                        let downtime = world.lock().rng.between(Duration::ZERO, d * 2);
                        *restart = Some(Instant::now() + downtime);
                    }
                    (true, Some(at)) if Instant::now() >= at => {
                        *restart = None;
                        start_contender(&world, &cast, c, &mut incarnations);
                    }
                    _ => {}
                }
            }
        }
        if Instant::now() >= heal_at {
            break;
        }
        chaos_action(&world, contenders, heal_at).await;
    }

    // Heal: no more faults; every dead contender restarts now.
    world.update(|s| {
        s.injecting = false;
        s.stalled = false;
        s.paused.iter_mut().for_each(|p| *p = false);
        s.partitioned.iter_mut().for_each(|p| *p = false);
        s.history.note(Instant::now(), "heal");
    });
    for c in 0..contenders {
        if world.lock().alive[c].is_none() {
            start_contender(&world, &cast, c, &mut incarnations);
        }
    }
    // A contender whose killer fires in the calm phase (its lease lapsed
    // during the last fault) is restarted as a supervisor would.
    // Priority seeds: four leases more, so steady stands are held to the
    // liveness bound (hold-down + a lease, or a lower leader's tenure).
    let calm_leases = config.calm_leases + if priority.is_some() { 4 } else { 0 };
    let calm_end = Instant::now() + d * calm_leases;
    while Instant::now() < calm_end {
        sleep(d / 20).await;
        for c in 0..contenders {
            if world.lock().alive[c].is_none() {
                start_contender(&world, &cast, c, &mut incarnations);
            }
        }
    }

    for observer in observers {
        observer.abort();
    }
    if let Some(requester) = requester {
        requester.abort();
    }
    let (
        intervals,
        log,
        faults,
        mut ops,
        observed,
        observed_leaders,
        request_counts,
        request_violations,
    ) = {
        let mut state = world.lock();
        state.history.close_all(Instant::now());
        (
            state.history.intervals().to_vec(),
            std::mem::take(&mut state.history.log),
            state.faults,
            state.ops,
            std::mem::take(&mut state.observed),
            std::mem::take(&mut state.observed_leaders),
            state.requests.counts(state.requests_busy),
            // Bare elections hand over without requests.
            if kind == ContenderKind::Vvm {
                state.requests.violations()
            } else {
                Vec::new()
            },
        )
    };
    // Bare contenders lead with the value `c<N>-i<M>`; VVMs store more.
    if kind == ContenderKind::Elections {
        ops.observe_stale = contender::stale_observations(
            &intervals,
            &observed,
            Instant::now() - origin,
            d / 20 * 3,
        );
        ops.observe_missed = contender::missed_leaderships(
            &intervals,
            &observed_leaders,
            Instant::now() - origin,
            d / 20 * 3,
        );
    }
    for c in 0..contenders {
        if let Some(task) = world.lock().tasks[c].take() {
            task.abort();
        }
    }
    let mut verdict = history::check(&intervals, &keys, heal_at - origin);
    let preemption = priority
        .as_ref()
        .map_or_else(PreemptionVerdict::default, |spec| {
            preemptions::check(
                &world.lock().priorities,
                spec,
                &intervals,
                heal_at - origin,
                Instant::now() - origin,
                d,
            )
        });
    // Recovery per set of keys one of which must have a leader again.
    verdict.recovery = liveness
        .iter()
        .map(|set| {
            let recovered = set
                .iter()
                .filter_map(|key| verdict.recovery.get(key).copied().flatten())
                .min();
            (set.join(" or "), recovered)
        })
        .collect();
    let mut hasher = DefaultHasher::new();
    log.hash(&mut hasher);
    RunReport {
        seed,
        kind,
        anchor,
        late: world.store.late_writes(),
        contenders,
        keys: keys.len(),
        locks: plan.as_ref().map_or(0, |p| p.locks.len()),
        mixed_sizes: plan.as_ref().is_some_and(|p| p.mixed()),
        size_overlaps: groups::size_overlaps(&intervals),
        requests: request_counts,
        request_violations,
        intervals: intervals.len(),
        faults,
        ops,
        verdict,
        priorities: priority.is_some() || vvm_priority.is_some(),
        preemption,
        recovery_bound: d + d / 20,
        log_hash: hasher.finish(),
        log: if keep_log { log } else { Vec::new() },
    }
}

/// One random fault: pause, stall, crash, partition, or a burst of call faults.
async fn chaos_action(world: &Arc<World>, contenders: usize, heal_at: Instant) {
    let d = world.lease;
    let (action, victim, length) = {
        let mut s = world.lock();
        let action = s.rng.below(5);
        let victim = s.rng.below(contenders as u64) as usize;
        let length = s.rng.between(d / 10, d * 3);
        (action, victim, length)
    };
    let until = (Instant::now() + length).min(heal_at);
    let world2 = world.clone();
    match action {
        0 => {
            world.update(|s| {
                s.paused[victim] = true;
                s.faults.pauses += 1;
                s.history
                    .note(Instant::now(), format_args!("pause c{victim} {length:?}"));
            });
            tokio::spawn(async move {
                tokio::time::sleep_until(until).await;
                world2.update(|s| s.paused[victim] = false);
            });
        }
        1 => {
            world.update(|s| {
                s.stalled = true;
                s.faults.stalls += 1;
                s.history
                    .note(Instant::now(), format_args!("stall {length:?}"));
            });
            tokio::spawn(async move {
                tokio::time::sleep_until(until).await;
                world2.update(|s| s.stalled = false);
            });
        }
        2 => {
            let who = world.lock().alive[victim].map(|i| Who {
                contender: victim,
                incarnation: i,
            });
            if let Some(who) = who {
                world.die(who, EndCause::Crashed);
            }
        }
        3 => {
            world.update(|s| {
                s.partitioned[victim] = true;
                s.faults.partitions += 1;
                s.history.note(
                    Instant::now(),
                    format_args!("partition c{victim} {length:?}"),
                );
            });
            tokio::spawn(async move {
                tokio::time::sleep_until(until).await;
                world2.update(|s| s.partitioned[victim] = false);
            });
        }
        _ => {
            let before = world.lock().op_fault_p;
            world.update(|s| s.op_fault_p = 0.3);
            tokio::spawn(async move {
                tokio::time::sleep_until(until).await;
                world2.update(|s| s.op_fault_p = before);
            });
        }
    }
}

/// What the contenders of a run are given.
struct Cast {
    keys: Arc<Vec<String>>,
    /// VVM seeds: the locks and groups.
    plan: Option<Arc<Plan>>,
    /// Priority seeds: the priorities and flappers.
    priority: Option<Arc<PrioritySpec>>,
    bug: Option<PreemptionBug>,
}

fn start_contender(world: &Arc<World>, cast: &Cast, c: usize, incarnations: &mut [u32]) {
    let who = Who {
        contender: c,
        incarnation: incarnations[c],
    };
    incarnations[c] += 1;
    // Mark it alive first: its storage view refuses calls of dead incarnations.
    world.lock().alive[c] = Some(who.incarnation);
    let task = match (&cast.plan, &cast.priority) {
        (None, Some(spec)) => tokio::spawn(priority_contender(
            world.clone(),
            cast.keys[0].clone(),
            who,
            spec.clone(),
            cast.bug,
        )),
        (None, None) => tokio::spawn(contender(world.clone(), cast.keys.clone(), who)),
        (Some(plan), spec) => {
            let group = plan.groups[c];
            let prefix = plan.locks[group.lock].prefix.clone();
            let priority = spec.as_ref().map(|s| (s.priorities[c], s.min_tenure));
            tokio::spawn(vvm_host(
                world.clone(),
                prefix,
                group,
                who,
                priority,
                cast.bug,
            ))
        }
    };
    let mut s = world.lock();
    s.alive[c] = Some(who.incarnation);
    s.tasks[c] = Some(task.abort_handle());
    s.history.note(
        Instant::now(),
        format_args!("start c{c}/i{}", who.incarnation),
    );
}
