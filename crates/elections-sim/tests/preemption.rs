//! Priority seeds (issue 38): mixed priorities, flapping candidates and
//! preempted leaders pass every check; each preemption check catches the
//! bug it is there for (`SimConfig::preemption_bug`), and the seeds it
//! fails pass without the bug.
#![allow(clippy::unwrap_used, clippy::panic)]

use elections_sim::{ContenderKind, PreemptionBug, PreemptionVerdict, SimConfig, run_seed};

const SEEDS: std::ops::Range<u64> = 0..60;

#[test]
fn priority_seeds_preempt_and_pass() {
    let config = SimConfig::default();
    let (mut seeds, mut total) = (0, PreemptionVerdict::default());
    let mut vvm_preemptions = 0;
    for seed in SEEDS {
        let report = run_seed(seed, &config, false).unwrap();
        assert!(report.passed(), "seed {seed} failed: {report:#?}");
        seeds += usize::from(report.priorities);
        total.add(&report.preemption);
        vvm_preemptions += report.requests.preemptions;
    }
    assert!((10..=45).contains(&seeds), "{seeds} priority seeds of 60");
    assert!(total.preemptions > 5, "{total:?}");
    assert!(total.liveness_checked > 20, "{total:?}");
    // VVMs' monitors preempted too; their markers, asked for by nobody,
    // kept the rules.
    assert!(vvm_preemptions >= 3, "{vvm_preemptions} VVM preemptions");
}

/// Runs `SEEDS` with `bug` until `finding` picks something from a
/// verdict; returns that seed and finding, after checking that the same
/// seed passes without the bug.
fn caught(bug: PreemptionBug, finding: fn(&PreemptionVerdict) -> Option<String>) -> (u64, String) {
    let buggy = SimConfig {
        preemption_bug: Some(bug),
        ..SimConfig::default()
    };
    for seed in SEEDS {
        let report = run_seed(seed, &buggy, false).unwrap();
        if let Some(found) = finding(&report.preemption) {
            let fixed = run_seed(seed, &SimConfig::default(), false).unwrap();
            assert!(fixed.passed(), "{bug:?}: seed {seed} fails without the bug");
            return (seed, found);
        }
    }
    panic!("{bug:?} went unnoticed in seeds {SEEDS:?}");
}

/// (b) At most one preemption per tenure: with the minimum tenure dropped,
/// a leader named by a hand-over while a higher candidate had long stood
/// is preempted as soon as its own hold-down count ends.
#[test]
fn checker_catches_a_preemption_within_the_minimum_tenure() {
    let (_, found) = caught(PreemptionBug::NoMinTenure, |v| {
        v.within_tenure.first().cloned()
    });
    assert!(found.contains("within its minimum tenure"), "{found}");
}

/// (c) Liveness: a leader that never preempts keeps a steady
/// higher-priority candidate waiting past the hold-down and a lease.
#[test]
fn checker_catches_a_leader_that_never_preempts() {
    let (_, found) = caught(PreemptionBug::NeverPreempt, |v| v.too_slow.first().cloned());
    assert!(
        found.contains("nobody of its priority or higher led"),
        "{found}"
    );
}

/// (d) With no hold-down, leaders hand over to candidacies that stood a
/// moment, flappers' among them.
#[test]
fn checker_catches_a_preemption_without_the_hold_down() {
    let (_, found) = caught(PreemptionBug::NoHoldDown, |v| {
        v.without_hold_down
            .iter()
            .find(|f| f.contains("a flapper"))
            .cloned()
    });
    assert!(found.contains("hold-down"), "{found}");
}

/// (e) A leader that counts its own priority one lower preempts for equals.
#[test]
fn checker_catches_equal_priorities_preempting() {
    let (_, found) = caught(PreemptionBug::EqualsPreempt, |v| {
        v.not_higher.first().cloned()
    });
    assert!(found.contains("is not above"), "{found}");
}

/// VVM seeds: a VVM that preempts before the hold-down, or within its
/// minimum tenure, writes a marker nobody asked for that breaks the rules;
/// the request checker reports it.
#[test]
fn request_checker_catches_vvm_preemptions_that_break_the_rules() {
    for (bug, says) in [
        (PreemptionBug::NoHoldDown, "within the hold-down"),
        (PreemptionBug::NoMinTenure, "within the minimum tenure"),
    ] {
        let buggy = SimConfig {
            preemption_bug: Some(bug),
            ..SimConfig::default()
        };
        let caught = SEEDS.into_iter().find_map(|seed| {
            let report = run_seed(seed, &buggy, false).unwrap();
            (report.kind == ContenderKind::Vvm)
                .then(|| {
                    report
                        .request_violations
                        .into_iter()
                        .find(|v| v.contains(says))
                })
                .flatten()
                .map(|v| (seed, v))
        });
        let (seed, violation) = caught.unwrap_or_else(|| panic!("{bug:?} went unnoticed"));
        let fixed = run_seed(seed, &SimConfig::default(), false).unwrap();
        assert!(
            fixed.passed(),
            "{bug:?}: seed {seed} fails without the bug: {violation}"
        );
    }
}
