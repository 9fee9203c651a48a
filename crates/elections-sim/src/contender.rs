//! The bare-elections contender and the observer of a run.
//!
//! A contender campaigns (a visible candidate) or tries once, runs its work
//! as a task tracked by the leadership ([`elections::Leadership::spawn`]),
//! and steps down by a release or a hand-over (to a candidate it names, or
//! refused when nobody waits). The observer watches each key through
//! [`elections::observe`] on the store itself (no faults), and counts what
//! it reports: a repeated report of the same leadership, or any write, is a
//! failure.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use elections::{Elections, HandOverError, Observation};
use tokio::time::sleep;
use ttl_storage::{Entry, Key, Result, Ttl, TtlStorage};

use crate::{
    history::{EndCause, Who},
    world::{SimKiller, SimStorage, World},
};

/// A contender process: tries the keys in turn; while leading its work runs
/// as a tracked task until the handle fires; it steps down by a release or
/// a hand-over after a while.
pub(crate) async fn contender(world: Arc<World>, keys: Arc<Vec<String>>, who: Who) {
    let d = world.lease;
    let elections = elections_of(&world, who);
    let value = format!("c{}-i{}", who.contender, who.incarnation);
    loop {
        for key in keys.iter() {
            world.wait_runnable(who.contender, false).await;
            let Ok(k) = Key::new(key.clone()) else { return };
            let campaign = world.lock().rng.chance(0.5);
            let acquired = if campaign {
                // With one key a campaign waits up to half a lease (long
                // enough to be handed the key); with more, one poll, so the
                // contender still tries every key every d/20 or so (the
                // recovery bound assumes it).
                let wait = if keys.len() == 1 { d / 2 } else { d / 20 };
                match tokio::time::timeout(wait, elections.campaign(&k, &value, d)).await {
                    Ok(Ok(leadership)) => Some(leadership),
                    _ => None,
                }
            } else {
                elections
                    .acquire_leadership(&k, &value, d)
                    .await
                    .ok()
                    .flatten()
            };
            let Some(leadership) = acquired else {
                continue;
            };
            world.begin_interval(who, key, leadership.fencing_token(), None);
            if campaign {
                world.update(|s| s.ops.campaigns += 1);
            }
            spawn_work(&world, &leadership, who, d);
            // One leadership in five is a blink: released within d/40 (a
            // job that finds nothing to do), shorter than the observers'
            // poll, so only a follower of the store's writes reports it.
            let blink = world.lock().rng.chance(0.2);
            loop {
                let hold = if blink {
                    world.lock().rng.between(Duration::ZERO, d / 40)
                } else {
                    world.lock().rng.between(d, d * 8)
                };
                tokio::select! {
                    biased;
                    _ = leadership.ended() => break,
                    () = sleep(hold) => {}
                }
                world.wait_runnable(who.contender, false).await;
                if blink {
                    break;
                }
                let hand_over = world.lock().rng.chance(0.5);
                if !hand_over {
                    break;
                }
                if step_down_by_hand_over(&world, &leadership).await {
                    break;
                }
            }
            // A no-op after a hand-over; otherwise ends the work, waits for it, releases.
            elections.release_leadership(&k).await;
        }
        sleep(d / 20).await;
    }
}

/// One hand-over attempt; false when refused (still leading).
/// The elections instance of contender `who`: the simulated store and
/// killer, and a deterministic instance id (the run stays reproducible).
pub(crate) fn elections_of(world: &Arc<World>, who: Who) -> Elections {
    let storage = SimStorage {
        world: world.clone(),
        who,
    };
    let killer = Arc::new(SimKiller {
        world: world.clone(),
        who,
    });
    let instance = (who.contender as u64) << 32 | u64::from(who.incarnation);
    Elections::builder(storage)
        .killer(killer)
        .instance_id(instance)
        .build()
}

/// The work of a leadership: runs until the handle fires; stopping takes a
/// while (up to 0.3 d, and may be paused). Tracked, so a release or
/// hand-over waits for it.
pub(crate) fn spawn_work(
    world: &Arc<World>,
    leadership: &elections::Leadership,
    who: Who,
    d: Duration,
) {
    let stop = world.lock().rng.between(Duration::ZERO, d * 3 / 10);
    let token = leadership.cancellation_token();
    let w = world.clone();
    leadership.spawn(async move {
        token.cancelled().await;
        w.wait_runnable(who.contender, false).await;
        sleep(stop).await;
        w.end_interval(who, EndCause::Stopped);
    });
}

async fn step_down_by_hand_over(world: &Arc<World>, leadership: &elections::Leadership) -> bool {
    let mut candidates = leadership.candidates().await.unwrap_or_default();
    // Sorted by value and id (not by wall-clock `since`: an abandoned
    // candidacy of the same contender may still be listed beside its new
    // one) for a reproducible choice.
    candidates.sort_by_key(|c| (c.value.clone(), c.id.to_string()));
    // Always named: the library's unnamed choice (the longest-waiting, by
    // the candidates' wall clocks) would not replay. Nobody listed: keep
    // leading without asking (the library's refusal is a suite case).
    let named = {
        let mut s = world.lock();
        let i = s.rng.below(candidates.len().max(1) as u64) as usize;
        candidates.get(i).cloned()
    };
    let Some(named) = named else {
        world.update(|s| s.ops.handover_skipped += 1);
        return false;
    };
    let result = leadership.hand_over(Some(&named)).await;
    let line = match &result {
        Ok(to) => format!(
            "handover {} -> {}",
            leadership.key(),
            String::from_utf8_lossy(&to.value)
        ),
        Err(err) => format!("handover {} refused: {err}", leadership.key()),
    };
    world.update(|s| {
        s.history.note(tokio::time::Instant::now(), line);
        match &result {
            Ok(_) => s.ops.handovers += 1,
            Err(HandOverError::NoCandidate | HandOverError::NoSuchCandidate(_)) => {
                s.ops.handover_refusals += 1;
            }
            Err(_) => s.ops.handover_failures += 1,
        }
    });
    !matches!(
        result,
        Err(HandOverError::NoCandidate | HandOverError::NoSuchCandidate(_))
    )
}

/// Observes `key` on the store itself until the run ends, counting reports
/// and writes, and keeping the last report for the final check
/// ([`stale_observations`]).
pub(crate) async fn observer(world: Arc<World>, key: String, follows: bool) {
    let Ok(k) = Key::new(key) else { return };
    let storage = Arc::new(ReadOnly {
        world: world.clone(),
        follows,
    });
    let mut observations = elections::observe(storage, &k, world.lease / 20);
    let mut last: Option<Observation> = None;
    while let Some(observation) = observations.next().await {
        // The same report twice in a row (time left included: a new
        // leadership is read at another moment, so it differs).
        let duplicate = last.as_ref() == Some(&observation);
        world.update(|s| {
            s.observed
                .insert(k.as_str().to_owned(), observation.clone());
            if let Observation::Leader { value, .. } = &observation {
                s.observed_leaders
                    .entry(k.as_str().to_owned())
                    .or_default()
                    .push(value.clone());
            }
            s.ops.observations += 1;
            if duplicate {
                s.ops.observe_duplicates += 1;
                // Not the value: a VVM's carries its process id (the log must replay).
                s.history.note(
                    tokio::time::Instant::now(),
                    format_args!("observe identical report on {}", k.as_str()),
                );
            }
        });
        last = Some(observation);
    }
}

/// The store as the observer sees it: reads pass, writes are counted (and
/// refused).
struct ReadOnly {
    world: Arc<World>,
    /// Offers the store's feed of writes (else the observer polls: the
    /// negative control [`crate::SimConfig::observers_poll`]).
    follows: bool,
}

impl ReadOnly {
    fn write(&self) -> Result<bool> {
        self.world.update(|s| s.ops.observer_writes += 1);
        Err(ttl_storage::StorageError::permanent(
            "the observer must not write",
        ))
    }
}

#[async_trait]
impl TtlStorage for ReadOnly {
    async fn insert_if_not_exists(&self, _: &Key, _: &[u8], _: Ttl) -> Result<bool> {
        self.write()
    }
    async fn compare_and_swap(&self, _: &Key, _: &[u8], _: &[u8], _: Ttl) -> Result<bool> {
        self.write()
    }
    async fn compare_and_delete(&self, _: &Key, _: &[u8]) -> Result<bool> {
        self.write()
    }
    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.world.store.map.get(key).await
    }
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        self.world.store.map.get_entry(key).await
    }
    /// The store's feed of writes: the observer follows it, as it does on
    /// etcd, Valkey and PostgreSQL.
    fn changes(
        &self,
        key: &Key,
        counter: Option<&Key>,
    ) -> std::result::Result<ttl_storage::Changes, ttl_storage::ChangesUnsupported> {
        if !self.follows {
            return Err(ttl_storage::ChangesUnsupported);
        }
        self.world.store.map.changes(key, counter)
    }
}

/// Leaderships the observer never reported: per key, the leaders of the
/// intervals (bare elections: `c<N>-i<M>`) in the order they began must
/// appear, in that order, among the leaders the observer reported (which
/// may hold more: a record written by an acquisition whose answer was
/// lost, a leadership the history could not name). Each interval left
/// out of that match counts; those begun within `settle` of the run's
/// `end` are not held to it (the observer was stopped then).
pub(crate) fn missed_leaderships(
    intervals: &[crate::history::Interval],
    reported: &std::collections::BTreeMap<String, Vec<Vec<u8>>>,
    end: Duration,
    settle: Duration,
) -> u64 {
    let mut by_key: std::collections::BTreeMap<&str, Vec<&crate::history::Interval>> =
        std::collections::BTreeMap::new();
    for iv in intervals {
        if iv.start + settle <= end {
            by_key.entry(iv.key.as_str()).or_default().push(iv);
        }
    }
    let mut missed = 0;
    for (key, mut ivs) in by_key {
        ivs.sort_by_key(|iv| iv.start);
        let seen = reported.get(key).map(Vec::as_slice).unwrap_or_default();
        let mut at = 0;
        for iv in ivs {
            let expected = format!("c{}-i{}", iv.who.contender, iv.who.incarnation);
            match seen[at..].iter().position(|v| *v == expected.as_bytes()) {
                Some(found) => at += found + 1,
                None => missed += 1,
            }
        }
    }
    missed
}

/// Keys whose leader at the end of the run (an interval still open, begun at
/// least `settle` before) is not what the observer last reported.
pub(crate) fn stale_observations(
    intervals: &[crate::history::Interval],
    observed: &std::collections::BTreeMap<String, Observation>,
    end: Duration,
    settle: Duration,
) -> u64 {
    let mut stale = 0;
    for iv in intervals {
        if iv.cause != Some(EndCause::RunEnded) || iv.start + settle > end {
            continue;
        }
        let expected = format!("c{}-i{}", iv.who.contender, iv.who.incarnation);
        let ok = matches!(
            observed.get(&iv.key),
            Some(Observation::Leader { value, .. }) if *value == expected.as_bytes()
        );
        if !ok {
            stale += 1;
        }
    }
    stale
}
