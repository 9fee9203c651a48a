//! Running a model to completion and reporting what was explored.

use std::{fmt::Debug, hash::Hash, time::Instant};

use stateright::{Checker, Model};

/// What one exhaustive check found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The model's name (for the report line).
    pub model: String,
    /// States generated, duplicates included.
    pub states: usize,
    /// Distinct states explored.
    pub unique_states: usize,
    /// The longest path explored.
    pub max_depth: usize,
    /// Wall-clock time of the check, in milliseconds.
    pub millis: u128,
    /// Every `always` property that has a counterexample, with the trace
    /// that breaks it (one action per line).
    pub violations: Vec<Violation>,
}

/// A property the checker refuted, and how.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The property's name.
    pub property: String,
    /// The actions from an initial state to the violating state.
    pub trace: Vec<String>,
}

impl Outcome {
    /// One summary line: `model: N states (M unique, depth D) in T ms, V violations`.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{}: {} states ({} unique, depth {}) in {} ms, {} violations",
            self.model,
            self.states,
            self.unique_states,
            self.max_depth,
            self.millis,
            self.violations.len()
        )
    }
}

/// Explores every reachable state of `model` breadth-first (on `threads`
/// threads) and reports every refuted `always` property with its trace.
pub fn check<M>(name: &str, model: M, threads: usize) -> Outcome
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Send + Sync + Clone + PartialEq,
    M::Action: Debug + Send + Sync + Clone + PartialEq,
{
    let started = Instant::now();
    let checker = model.checker().threads(threads.max(1)).spawn_bfs().join();
    let mut violations: Vec<Violation> = checker
        .discoveries()
        .into_iter()
        .filter(|(property, _)| {
            checker.model().properties().iter().any(|p| {
                p.name == *property && matches!(p.expectation, stateright::Expectation::Always)
            })
        })
        .map(|(property, path)| Violation {
            property: property.to_string(),
            trace: path
                .into_actions()
                .iter()
                .map(|action| format!("{action:?}"))
                .collect(),
        })
        .collect();
    violations.sort_by(|a, b| a.property.cmp(&b.property));
    Outcome {
        model: name.to_string(),
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        millis: started.elapsed().as_millis(),
        violations,
    }
}
