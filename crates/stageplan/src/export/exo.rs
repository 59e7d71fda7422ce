//! exo: each node's layer range as exo describes a pipeline shard — `start_layer`,
//! `end_layer` (exclusive, as current exo's `PipelineShardMetadata`) of `n_layers` — in
//! pipeline order.

use serde_json::json;

use super::Layout;

pub(super) fn export(layout: &Layout<'_>) -> (String, Vec<String>) {
    let model =
        layout.options.model.clone().unwrap_or_else(|| {
            layout.preset().map_or_else(|| layout.plan.model.name.clone(), |p| p.hf_id().to_owned())
        });
    let partitions: Vec<serde_json::Value> = layout
        .stages
        .iter()
        .map(|&(node, start, end)| {
            json!({
                "node_id": node,
                "start_layer": start,
                "end_layer": end,
                "layers": end - start,
            })
        })
        .collect();
    let document = json!({
        "generator": "stageplan",
        "model_id": model,
        "n_layers": layout.layers,
        "partitions": partitions,
    });
    // serde_json leaves DEL and C1 controls raw; a name from a file's header may hold them.
    let text = crate::quote::terminal(&serde_json::to_string_pretty(&document).unwrap_or_default()).into_owned() + "\n";
    let notes = vec![
        "exo splits by memory and has no flag for layer counts: put these ranges into the shard assignments of an instance (exo's `/instance` API) to run the plan's split instead.".to_owned(),
        "`end_layer` is exclusive, as in current exo; the older Python exo's `Shard` counts it inclusively (subtract one).".to_owned(),
    ];
    (text, notes)
}
