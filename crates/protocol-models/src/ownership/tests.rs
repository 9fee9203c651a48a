use stateright::{Checker, Model};

use super::*;
use crate::run;

#[test]
fn the_fixed_protocol_keeps_one_owner_and_reaches_every_interleaving_it_names() {
    let model = Ownership::new(Config::SMALL, None);
    let checker = model.checker().threads(2).spawn_bfs().join();
    assert!(
        checker.discovery(ONE_OWNER).is_none(),
        "{:?}",
        checker.discovery(ONE_OWNER).map(|p| p.into_actions())
    );
    for property in checker.model().properties() {
        if property.name != ONE_OWNER {
            assert!(
                checker.discovery(property.name).is_some(),
                "never reached: {}",
                property.name
            );
        }
    }
    assert!(checker.unique_state_count() > 1_000);
}

#[test]
fn every_seeded_bug_is_refuted_with_a_trace() {
    for bug in Bug::ALL {
        let config = bug.bounds().unwrap_or(Config::SMALL);
        let outcome = run::check(bug.name(), Ownership::new(config, Some(bug)), 2);
        let violation = outcome
            .violations
            .iter()
            .find(|v| v.property == ONE_OWNER)
            .unwrap_or_else(|| panic!("{} was not refuted: {}", bug.name(), outcome.summary()));
        assert!(!violation.trace.is_empty());
    }
}

#[test]
fn bugs_are_named_on_the_command_line() {
    for bug in Bug::ALL {
        assert_eq!(Bug::named(bug.name()), Some(bug));
    }
    assert_eq!(Bug::named("nope"), None);
}
