//! A machine's llama-bench results fitted (`calibrate`): each test measured against
//! predicted, then the node to paste into a scenario.

use stageplan::fit::bench::NodeFit;
use stageplan::units::sig3;

/// The fit's summary, its tests, and `ready`, the node that predicts them.
pub(crate) fn fit(fit: &NodeFit, ready: &serde_json::Value) -> String {
    let mut out = format!(
        "{}:\n\n  model            weights   measured   predicted (fitted terms)   with this node\n",
        fit.summary()
    );
    for t in &fit.tests {
        out.push_str(&format!(
            "  {:<16} {:<9} {:>8} {:>12} ({:+.0}%) {:>16}\n",
            t.model,
            t.weights,
            sig3(t.measured),
            sig3(t.fitted),
            (t.fitted / t.measured - 1.0) * 100.0,
            sig3(t.with_node)
        ));
    }
    format!("{out}\nthe node, for a scenario's `nodes`:\n{ready}\n")
}
