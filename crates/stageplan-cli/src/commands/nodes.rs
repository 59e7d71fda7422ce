//! `stageplan nodes add`, `remove` and `list`: the machines the loop places stages on.

use std::path::Path;

use stageplan::scenario::NodeSpec;
use stageplan::units::Bytes;
use stageplan_reconcile::store::NODES;
use stageplan_reconcile::{Controller, Event, NoMetrics, Node, Snapshot};

use crate::cli::Format;
use crate::cluster::ClusterStatus;
use crate::outcome::{Failure, Outcome};
use crate::{render, store};

/// `stageplan nodes add`: with `--memory` and `--gpus`, or from `--node-file`.
pub(super) fn add(
    store: &str,
    name: &str,
    memory: Option<&str>,
    gpus: u32,
    file: Option<&Path>,
) -> Result<Outcome, Failure> {
    let node = match (memory, file) {
        (Some(memory), _) => node(name, memory, gpus)?,
        (None, Some(file)) => node_from_file(name, file)?,
        // clap requires one of them.
        (None, None) => return Err(Failure("give `--memory` or `--node-file`".to_owned())),
    };
    let (bytes, gpus) = (node.memory, node.gpus);
    let mut store = store::open(store)?;
    Controller::default().handle(&mut store, Event::NodeJoined(node), &NoMetrics)?;
    Ok(Outcome::ok(render::cluster::node_added(name, bytes, gpus)))
}

/// A node's record from `--memory` and `--gpus`, checked as the loop will read it.
pub(super) fn node(name: &str, memory: &str, gpus: u32) -> Result<Node, Failure> {
    let bytes = Bytes::parse(memory).map_err(|e| Failure(format!("`--memory`: {e}")))?;
    // The scenario's limit, with its words: past it the number would be stored clamped.
    if bytes.get() > 1e18 {
        return Err(Failure(format!("`--memory`: `{memory}` is over an exabyte; check the unit")));
    }
    let node = Node { name: name.to_owned(), memory: bytes.get() as u64, gpus };
    node.check().map_err(|e| Failure(format!("node {e}")))?;
    Ok(node)
}

/// A node's record from `--node-file`: one machine as a scenario's `nodes[]` entry, or what
/// `stageplan probe --format json` prints (its one node), checked as a scenario checks it;
/// `name` names it whatever the file calls it (a probe calls its node `this-cpu`).
pub(super) fn node_from_file(name: &str, path: &Path) -> Result<Node, Failure> {
    let at = |e: &dyn std::fmt::Display| Failure(format!("`--node-file` {}: {e}", path.display()));
    let text = crate::input::read_text(path)?;
    let spec = match probed_node(&text) {
        Some(node) => node.map_err(|e| at(&e))?,
        None => NodeSpec::from_json(&text).map_err(|e| at(&e))?,
    };
    let devices = stageplan::check::machine_nodes(&spec).map_err(|e| at(&e))?;
    let node = Node::offered(name, &devices);
    node.check().map_err(|e| at(&format!("node {e}")))?;
    Ok(node)
}

/// The one node of `stageplan probe --format json`'s output (an object with `nodes`), or
/// `None` for other text.
fn probed_node(text: &str) -> Option<Result<NodeSpec, String>> {
    let serde_json::Value::Object(output) = serde_json::from_str(text).ok()? else { return None };
    let serde_json::Value::Array(nodes) = output.get("nodes")? else { return None };
    Some(match nodes.as_slice() {
        [node] => NodeSpec::from_json(&node.to_string()).map_err(|e| format!("`nodes[0]`: {e}")),
        _ => Err(format!(
            "lists {} nodes; give one machine (several GPUs of one machine are its `gpus`: `{{\"name\": \"box\", \"gpus\": [{{\"device\": \"rtx-3090\", \"count\": 2}}]}}`)",
            nodes.len()
        )),
    })
}

/// `stageplan nodes remove`.
pub(super) fn remove(store: &str, name: &str) -> Result<Outcome, Failure> {
    store::must_exist(store)?;
    let mut store = store::open(store)?;
    let snapshot = Snapshot::load(&mut store)?;
    let quarantined = snapshot.quarantined.iter().any(|(key, _)| key.strip_prefix(NODES) == Some(name));
    if !snapshot.nodes.contains_key(name) && !quarantined {
        let known: Vec<&str> = snapshot.nodes.keys().map(String::as_str).collect();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(Failure(format!("node `{name}` is not registered; registered: {known}")));
    }
    Controller::default().handle(&mut store, Event::NodeLeft(name.to_owned()), &NoMetrics)?;
    Ok(Outcome::ok(render::cluster::node_removed(name)))
}

/// `stageplan nodes list`: each node's memory and GPUs, used and total.
pub(super) fn list(store: &str, format: Format) -> Result<Outcome, Failure> {
    let mut store = store::open_read_only(store)?;
    let snapshot = Snapshot::load(&mut store)?;
    let nodes = ClusterStatus::of(&snapshot, None).nodes;
    Ok(Outcome::ok(match format {
        Format::Json => serde_json::to_string_pretty(&nodes)? + "\n",
        Format::Table => render::cluster::nodes(&nodes),
    }))
}
