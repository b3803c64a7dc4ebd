//! Running the exhaustive check and reading its result.

use std::time::{Duration, Instant};

use stateright::{Checker, Model};

use crate::bounds::Bounds;
use crate::layers::Layers;
use crate::model::{Action, PaymentModel};
use crate::properties::INVARIANTS;
use crate::state::State;

/// What one exhaustive check found.
#[derive(Debug)]
pub struct Report {
    /// The layers that were on.
    pub layers: Layers,
    /// The bounds.
    pub bounds: Bounds,
    /// Distinct states explored.
    pub unique_states: usize,
    /// States generated, repeats included.
    pub states: usize,
    /// The longest path explored.
    pub max_depth: usize,
    /// Whether every reachable state was explored (a check that stopped at its first
    /// counterexample is not).
    pub complete: bool,
    /// The invariants that failed, each with a counterexample: the actions from the
    /// initial state and the state they lead to.
    pub counterexamples: Vec<Counterexample>,
    /// The examples found (`sometimes` properties).
    pub examples: Vec<&'static str>,
    /// How long it took.
    pub elapsed: Duration,
}

/// An invariant that failed, and how.
#[derive(Debug)]
pub struct Counterexample {
    /// The invariant.
    pub invariant: &'static str,
    /// The actions that break it, from the initial state.
    pub actions: Vec<Action>,
    /// The state in which it fails.
    pub state: State,
}

impl Report {
    /// Whether `invariant` failed.
    pub fn violated(&self, invariant: &str) -> bool {
        self.counterexamples
            .iter()
            .any(|found| found.invariant == invariant)
    }

    /// The names of the invariants that failed.
    pub fn violations(&self) -> Vec<&'static str> {
        self.counterexamples
            .iter()
            .map(|found| found.invariant)
            .collect()
    }

    /// One line: what was checked and what came out.
    pub fn summary(&self) -> String {
        let outcome = if self.counterexamples.is_empty() {
            "no counterexample".to_owned()
        } else {
            format!("violated: {}", self.violations().join("; "))
        };
        format!(
            "{} — {} unique states ({} generated, depth {}), {}, {:.2} s: {outcome}",
            self.layers,
            self.unique_states,
            self.states,
            self.max_depth,
            if self.complete {
                "complete"
            } else {
                "stopped early"
            },
            self.elapsed.as_secs_f64(),
        )
    }
}

/// How far a check goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Every reachable state, every invariant.
    Exhausted,
    /// Until each of these invariants has failed (or every state is explored): the check
    /// stops early, so the report is not complete when they did.
    Violated(&'static [&'static str]),
}

/// Checks the model of the service with `layers` within `bounds`, breadth first, on `threads`
/// threads. A counterexample is one path to a failing state, short but not always the
/// shortest: the checker keeps the last failing state it met, and threads race.
pub fn check(layers: Layers, bounds: Bounds, until: Until, threads: usize) -> Report {
    let started = Instant::now();
    let model = PaymentModel::new(layers, bounds);
    let mut builder = model.checker().threads(threads.max(1));
    if let Until::Violated(invariants) = until {
        builder = builder.finish_when(stateright::HasDiscoveries::AllOf(
            invariants.iter().copied().collect(),
        ));
    }
    let checker = builder.spawn_bfs().join();
    let discoveries = checker.discoveries();
    let counterexamples: Vec<Counterexample> = INVARIANTS
        .iter()
        .filter_map(|invariant| {
            discoveries.get(invariant).map(|path| Counterexample {
                invariant,
                actions: path.clone().into_actions(),
                state: path.last_state().clone(),
            })
        })
        .collect();
    let mut examples: Vec<&'static str> = discoveries
        .keys()
        .filter(|name| !INVARIANTS.contains(name))
        .copied()
        .collect();
    examples.sort_unstable();
    // Exhausted: the checker is done, and not because an early finish matched.
    let stopped_early = match until {
        Until::Exhausted => discoveries.len() == model_properties_count(),
        Until::Violated(invariants) => invariants
            .iter()
            .all(|invariant| discoveries.contains_key(invariant)),
    };
    let complete = checker.is_done() && !stopped_early;
    Report {
        layers,
        bounds,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        complete,
        counterexamples,
        examples,
        elapsed: started.elapsed(),
    }
}

fn model_properties_count() -> usize {
    crate::properties::properties().len()
}
