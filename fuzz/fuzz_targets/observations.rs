//! What the closed loop reads from outside (`--metrics` files, Prometheus answers): bad
//! input must be a one-line error, never a panic, and what is kept is a measurement.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stageplan_reconcile::observe::{Observations, Query, add_prometheus};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let read = match Query::ALL.get(usize::from(selector % 6)) {
        None => Observations::from_json(text),
        Some(&query) => {
            let mut seen = Observations::default();
            add_prometheus(query, text, &mut seen).map(|_| seen)
        }
    };
    match read {
        Err(e) => assert!(!e.contains('\n'), "{e}"),
        Ok(seen) => {
            let times = seen.utilization.values().chain(seen.steps.values()).chain(seen.token_s.values());
            for value in times {
                assert!(value.is_finite() && *value >= 0.0, "{value}");
            }
        }
    }
});
