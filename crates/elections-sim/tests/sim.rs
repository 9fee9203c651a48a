//! The simulation's own tests: a fixed sample of seeds must pass, any seed
//! must replay exactly, and the checker must catch a broken store.

use elections_sim::{ContenderKind, SimConfig, run_seed};

/// A fixed sample; `cargo xtask sim` runs 10 000.
#[test]
fn fixed_sample_of_seeds_passes() {
    let config = SimConfig::default();
    let (mut faults, mut vvm_runs) = (0, 0);
    for seed in 0..60 {
        let report = run_seed(seed, &config, false).unwrap();
        assert!(report.passed(), "seed {seed} failed: {:#?}", report.verdict);
        assert!(report.intervals > 0, "seed {seed}: nobody ever led");
        faults += report.faults.total();
        vvm_runs += usize::from(report.kind == ContenderKind::Vvm);
    }
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
