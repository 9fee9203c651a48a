//! The simulation's own tests: a fixed sample of seeds must pass, any seed
//! must replay exactly, and the checker must catch a broken store.

use elections_sim::{Anchor, ContenderKind, SimConfig, run_seed};

/// A fixed sample; `cargo xtask sim` runs 10 000.
#[test]
fn fixed_sample_of_seeds_passes() {
    let config = SimConfig::default();
    let (mut faults, mut vvm_runs) = (0, 0);
    let mut late = elections_sim::LateWrites::default();
    for seed in 0..60 {
        let report = run_seed(seed, &config, false).unwrap();
        assert!(report.passed(), "seed {seed} failed: {:#?}", report.verdict);
        assert!(report.intervals > 0, "seed {seed}: nobody ever led");
        assert_eq!(report.anchor, Anchor::for_seed(seed));
        faults += report.faults.total();
        vvm_runs += usize::from(report.kind == ContenderKind::Vvm);
        late.add(&report.late);
    }
    // The etcd and DynamoDB seeds had late writes land on later ones, and
    // the drivers' guards refused them.
    assert!(late.refused > 10, "{late:?}");
    assert_eq!(late.renewals_shortened, 0, "{late:?}");
    assert!(faults > 1000, "only {faults} faults injected");
    assert!(
        (10..=50).contains(&vvm_runs),
        "{vvm_runs} of 60 runs used whole VVMs"
    );
}

/// The same seed gives the same history, whatever ran before it in the process.
#[test]
fn seeds_replay_exactly() {
    let config = SimConfig::default();
    let a = run_seed(11, &config, true).unwrap();
    let _other = run_seed(12, &config, false).unwrap();
    let b = run_seed(11, &config, true).unwrap();
    assert_eq!(a.log, b.log);
    assert_eq!(a.log_hash, b.log_hash);
    let c = run_seed(13, &config, false).unwrap();
    assert_ne!(a.log_hash, c.log_hash);
}

/// With a store whose insert overwrites live records, the checker reports
/// overlapping leaderships: it can fail.
#[test]
fn checker_catches_a_broken_store() {
    let config = SimConfig {
        broken_store: true,
        ..SimConfig::default()
    };
    let overlaps: usize = (0..10)
        .map(|seed| {
            run_seed(seed, &config, false)
                .unwrap()
                .verdict
                .overlaps
                .len()
        })
        .sum();
    assert!(overlaps > 0, "a broken store went unnoticed");
}

/// Issue 34, case 7: with the send-anchored drivers' late-write guards
/// dropped (etcd and DynamoDB on afc8b88), renewals applied late shorten
/// leases and the checker reports overlapping leaderships; with the guards,
/// the same seeds pass.
#[test]
fn checker_catches_late_renewals_anchored_at_send() {
    for anchor in [Anchor::EtcdGrant, Anchor::DynamoClient] {
        let unguarded = SimConfig {
            anchor: Some(anchor),
            unguarded_late_writes: true,
            ..SimConfig::default()
        };
        let guarded = SimConfig {
            unguarded_late_writes: false,
            ..unguarded.clone()
        };
        let (mut overlaps, mut shortened) = (0, 0);
        for seed in 0..40 {
            let report = run_seed(seed, &unguarded, false).unwrap();
            overlaps += report.verdict.overlaps.len();
            shortened += report.late.renewals_shortened;
            if !report.verdict.overlaps.is_empty() {
                let fixed = run_seed(seed, &guarded, false).unwrap();
                assert!(
                    fixed.passed(),
                    "{anchor:?} seed {seed} failed with the guard"
                );
            }
        }
        assert!(
            shortened > 0,
            "{anchor:?}: no late renewal shortened a lease"
        );
        assert!(
            overlaps > 0,
            "{anchor:?}: unguarded late renewals went unnoticed"
        );
    }
}
