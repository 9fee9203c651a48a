//! The priority contender of a priority seed (issue 38): it stands for
//! its key with its priority ([`elections::Standby::with_priority`]) for a
//! while, vanishes and comes back (a flapper's stands are short, a steady
//! one's long); while leading, it runs its work as a tracked task and
//! scans the candidates every quarter lease with
//! [`elections::Preemption`], handing over by the ordinary graceful path
//! to a higher-priority candidate once it is due (a preemption, recorded
//! with its cause), or steps down by choice after a while (a release, or
//! a hand-over to a candidate it names: not a preemption).

use std::{sync::Arc, time::Duration};

use elections::{Candidate, HandOverError, Leadership, Preemption};
use tokio::time::{Instant, sleep};
use ttl_storage::Key;

use crate::{
    contender,
    history::Who,
    preemptions::{Preempted, PreemptionBug, PrioritySpec, Stand},
    world::World,
};

/// A priority contender process for `key`.
pub(crate) async fn priority_contender(
    world: Arc<World>,
    key: String,
    who: Who,
    spec: Arc<PrioritySpec>,
    bug: Option<PreemptionBug>,
) {
    let d = world.lease;
    let c = who.contender;
    let priority = spec.priorities[c];
    let elections = contender::elections_of(&world, who);
    let value = format!("c{c}-i{}", who.incarnation);
    let Ok(k) = Key::new(key) else { return };
    loop {
        world.wait_runnable(c, false).await;
        let Ok(standby) = elections.stand_by(&k, &value, d) else {
            return;
        };
        let mut standby = standby.with_priority(priority);
        let length = spec.stand_length(&mut world.lock().rng, c, d);
        world.update(|s| {
            let start = s.history.offset(Instant::now());
            s.history.note(
                Instant::now(),
                format_args!("stand c{c}/i{} priority {priority}", who.incarnation),
            );
            s.priorities.begin(Stand {
                who,
                id: standby.id().to_string(),
                priority,
                flapper: spec.flappers[c],
                start,
                end: None,
                acquired: false,
            });
        });
        let until = Instant::now() + length;
        let mut leading = None;
        while Instant::now() < until {
            match standby.try_acquire().await {
                Ok(Some(leadership)) => {
                    leading = Some(leadership);
                    break;
                }
                Ok(None) => {
                    let left = until.saturating_duration_since(Instant::now());
                    standby.changed((d / 20).min(left)).await;
                }
                Err(_) => sleep(d / 20).await,
            }
        }
        let acquired = leading.is_some();
        world.update(|s| {
            let at = s.history.offset(Instant::now());
            s.priorities.end(c, at, acquired);
        });
        drop(standby);
        match leading {
            Some(leadership) => {
                lead(&world, &leadership, who, &spec, bug).await;
                elections.release_leadership(&k).await;
            }
            // Gone for a while: a flapper comes back soon.
            None => {
                let away = world.lock().rng.between(d / 4, d);
                sleep(away).await;
            }
        }
    }
}

/// Leads until the leadership ends, a preemption is due, or the contender
/// steps down by choice.
async fn lead(
    world: &Arc<World>,
    leadership: &Leadership,
    who: Who,
    spec: &PrioritySpec,
    bug: Option<PreemptionBug>,
) {
    let d = world.lease;
    let c = who.contender;
    let priority = spec.priorities[c];
    world.begin_interval(
        who,
        leadership.key().as_str(),
        leadership.fencing_token(),
        None,
    );
    contender::spawn_work(world, leadership, who, d);
    let (own, hold_down, min_tenure) = match bug {
        Some(PreemptionBug::NoHoldDown) => (priority, Duration::ZERO, spec.min_tenure),
        Some(PreemptionBug::NoMinTenure) => (priority, spec.hold_down, Duration::ZERO),
        Some(PreemptionBug::EqualsPreempt) => (priority - 1, spec.hold_down, spec.min_tenure),
        _ => (priority, spec.hold_down, spec.min_tenure),
    };
    let mut preemption = Preemption::new(own, hold_down, min_tenure);
    let step_down_at = Instant::now() + world.lock().rng.between(d, d * 8);
    loop {
        tokio::select! {
            biased;
            _ = leadership.ended() => return,
            () = sleep(d / 4) => {}
        }
        world.wait_runnable(c, false).await;
        if Instant::now() >= step_down_at {
            step_down(world, leadership).await;
            return;
        }
        if bug == Some(PreemptionBug::NeverPreempt) {
            continue;
        }
        let Ok(mut listed) = leadership.candidates().await else {
            preemption.forget();
            continue;
        };
        // The library lists by priority, then by the candidates' wall
        // clocks (`since`), which would not replay: by priority, then id.
        listed.sort_by_key(|c| (std::cmp::Reverse(c.priority), c.id.to_string()));
        let Some(due) = preemption.observe(&listed) else {
            continue;
        };
        // The decision, and the tenure it ends (as the history has it).
        let at = Instant::now();
        let tenure_start = world.lock().tenure_start(who);
        let result = leadership.hand_over(Some(&due)).await;
        let decided = (at, tenure_start);
        record_preemption(world, leadership, (who, priority), &due, decided, &result);
        if !matches!(
            result,
            Err(HandOverError::NoCandidate | HandOverError::NoSuchCandidate(_))
        ) {
            return;
        }
    }
}

/// Notes a preemption attempt; a successful one is recorded for the checker.
fn record_preemption(
    world: &World,
    leadership: &Leadership,
    (who, priority): (Who, i32),
    due: &Candidate,
    (at, tenure_start): (Instant, Option<Duration>),
    result: &Result<Candidate, HandOverError>,
) {
    let key = leadership.key().as_str().to_owned();
    world.update(|s| {
        let line = match result {
            Ok(_) => format!(
                "preempt {key} c{}/i{} -> {} (priority {} over {priority})",
                who.contender,
                who.incarnation,
                String::from_utf8_lossy(&due.value),
                due.priority
            ),
            Err(err) => format!("preempt {key} failed: {err}"),
        };
        s.history.note(Instant::now(), line);
        if let (Ok(_), Some(tenure_start)) = (result, tenure_start) {
            let at = s.history.offset(at);
            s.priorities.preemptions.push(Preempted {
                key,
                from: who,
                from_priority: priority,
                tenure_start,
                to: due.id.to_string(),
                at,
            });
        }
    });
}

/// Steps down by choice: a release, or a hand-over to a candidate it names
/// (any of those listed, as an operator's `--to` would: a lower one too,
/// whose tenure then protects it from a higher one already due). Not a
/// preemption.
async fn step_down(world: &World, leadership: &Leadership) {
    if world.lock().rng.chance(0.5) {
        return; // the caller releases
    }
    let Ok(mut listed) = leadership.candidates().await else {
        return;
    };
    listed.sort_by_key(|c| (std::cmp::Reverse(c.priority), c.id.to_string()));
    let pick = world.lock().rng.below(listed.len().max(1) as u64) as usize;
    let Some(to) = listed.get(pick) else {
        world.update(|s| s.ops.handover_skipped += 1);
        return;
    };
    let result = leadership.hand_over(Some(to)).await;
    world.update(|s| match result {
        Ok(_) => s.ops.handovers += 1,
        Err(HandOverError::NoCandidate | HandOverError::NoSuchCandidate(_)) => {
            s.ops.handover_refusals += 1;
        }
        Err(_) => s.ops.handover_failures += 1,
    });
}
