//! A share link's JSON read into the page's state by hand. A derived `Deserialize` for
//! [`AppState`] cost every first plan 8.6 KB gzip of the page's wasm (BENCHMARKS.md, issue
//! #45 item 7) for a link opened now and then; the page reads JSON into a
//! [`serde_json::Value`] anyway. The rules are the derive's: a field left out keeps the
//! default's value, a field the state does not have is refused, each has its type.

use serde_json::{Map, Value};
use stageplan::Objective;

use super::{AppState, ModelDraft, ModelSource, NodeDraft, PairDraft};

/// The state in `value`, or what is wrong with it (a field, by its path).
pub(crate) fn app_state(value: &Value) -> Result<AppState, String> {
    let mut state = AppState::default();
    let o = Fields::of(value, "the plan", &STATE)?;
    if let Some(model) = o.get("model") {
        state.model = model_draft(model)?;
    }
    o.text("context", &mut state.context)?;
    o.text("batch", &mut state.batch)?;
    o.text("kv", &mut state.kv)?;
    o.text("kv_v", &mut state.kv_v)?;
    o.text("link_bandwidth", &mut state.link_bandwidth)?;
    o.text("link_latency", &mut state.link_latency)?;
    if let Some(nodes) = o.get("nodes") {
        state.nodes =
            list(nodes, "nodes")?.iter().enumerate().map(|(i, n)| node_draft(n, i)).collect::<Result<_, _>>()?;
    }
    if let Some(pairs) = o.get("pairs") {
        state.pairs =
            list(pairs, "pairs")?.iter().enumerate().map(|(i, p)| pair_draft(p, i)).collect::<Result<_, _>>()?;
    }
    if let Some(objective) = o.get("objective") {
        state.objective = match objective.as_str() {
            Some("throughput") => Objective::Throughput,
            Some("latency") => Objective::Latency,
            _ => return Err(format!("`objective` is {}, not \"throughput\" or \"latency\"", kind(objective))),
        };
    }
    Ok(state)
}

const STATE: [&str; 10] =
    ["model", "context", "batch", "kv", "kv_v", "nodes", "link_bandwidth", "link_latency", "pairs", "objective"];

fn model_draft(value: &Value) -> Result<ModelDraft, String> {
    let mut model = ModelDraft::default();
    let o = Fields::of(value, "model", &["source", "preset", "weights", "config", "file", "draft", "mmproj"])?;
    if let Some(source) = o.get("source") {
        model.source = match source.as_str() {
            Some("preset") => ModelSource::Preset,
            Some("config") => ModelSource::Config,
            Some("file") => ModelSource::File,
            _ => return Err(format!("`model.source` is {}, not \"preset\", \"config\" or \"file\"", kind(source))),
        };
    }
    for (key, field) in [
        ("preset", &mut model.preset),
        ("weights", &mut model.weights),
        ("config", &mut model.config),
        ("file", &mut model.file),
        ("draft", &mut model.draft),
        ("mmproj", &mut model.mmproj),
    ] {
        o.text(key, field)?;
    }
    Ok(model)
}

fn node_draft(value: &Value, i: usize) -> Result<NodeDraft, String> {
    const KEYS: [&str; 14] = [
        "id",
        "name",
        "device",
        "kind",
        "memory",
        "bandwidth",
        "compute",
        "reserve",
        "ram",
        "ram_memory",
        "gpus",
        "gpu_link",
        "enabled",
        "fit",
    ];
    let at = format!("nodes[{i}]");
    let o = Fields::of(value, &at, &KEYS)?;
    let mut node = NodeDraft::default();
    if let Some(id) = o.get("id") {
        node.id = id.as_u64().ok_or_else(|| format!("`{at}.id` is {}, not a whole number", kind(id)))?;
    }
    if let Some(enabled) = o.get("enabled") {
        node.enabled =
            enabled.as_bool().ok_or_else(|| format!("`{at}.enabled` is {}, not true or false", kind(enabled)))?;
    }
    for (key, field) in [
        ("name", &mut node.name),
        ("device", &mut node.device),
        ("kind", &mut node.kind),
        ("memory", &mut node.memory),
        ("bandwidth", &mut node.bandwidth),
        ("compute", &mut node.compute),
        ("reserve", &mut node.reserve),
        ("ram", &mut node.ram),
        ("ram_memory", &mut node.ram_memory),
        ("gpus", &mut node.gpus),
        ("gpu_link", &mut node.gpu_link),
        ("fit", &mut node.fit),
    ] {
        o.text(key, field)?;
    }
    Ok(node)
}

fn pair_draft(value: &Value, i: usize) -> Result<PairDraft, String> {
    let o = Fields::of(value, &format!("pairs[{i}]"), &["a", "b", "bandwidth", "latency"])?;
    let mut pair = PairDraft::default();
    for (key, field) in
        [("a", &mut pair.a), ("b", &mut pair.b), ("bandwidth", &mut pair.bandwidth), ("latency", &mut pair.latency)]
    {
        o.text(key, field)?;
    }
    Ok(pair)
}

/// What a value is, in words: a message never repeats the link's text, which may be long or
/// hostile.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "other text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn list<'a>(value: &'a Value, at: &str) -> Result<&'a Vec<Value>, String> {
    value.as_array().ok_or_else(|| format!("`{at}` is not a list"))
}

/// An object's fields, every one of them known.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    at: String,
}

impl<'a> Fields<'a> {
    fn of(value: &'a Value, at: &str, known: &[&str]) -> Result<Fields<'a>, String> {
        let object = value.as_object().ok_or_else(|| format!("{at} is not an object"))?;
        if let Some(unknown) = object.keys().find(|k| !known.contains(&k.as_str())) {
            let named =
                if unknown.chars().count() <= 40 { format!("{unknown:?}") } else { "with a long name".to_owned() };
            return Err(format!("{at} has a field it does not know, {named}"));
        }
        Ok(Fields { object, at: at.to_owned() })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.object.get(key)
    }

    /// Sets `field` to the text at `key`, if the object has it.
    fn text(&self, key: &str, field: &mut String) -> Result<(), String> {
        match self.object.get(key) {
            None => Ok(()),
            Some(Value::String(text)) => {
                text.clone_into(field);
                Ok(())
            }
            Some(other) => Err(format!("`{}.{key}` is {}, not text", self.at, kind(other))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_state_reads_back_and_what_is_left_out_keeps_the_default() {
        let mut state = AppState::default();
        state.nodes[1].enabled = false;
        state.nodes[0].fit = r#"{"backend": "cuda"}"#.into();
        state.pairs.push(PairDraft {
            a: "desk".into(),
            b: "mac".into(),
            bandwidth: "1 GB/s".into(),
            latency: "1 ms".into(),
        });
        state.objective = Objective::Latency;
        state.kv_v = "f16".into();
        state.model.source = ModelSource::Config;
        assert_eq!(app_state(&serde_json::to_value(&state).unwrap()).unwrap(), state);
        let partial = app_state(&json!({"context": "4096", "model": {"weights": "q8_0"}})).unwrap();
        let expected = AppState {
            context: "4096".into(),
            model: ModelDraft { weights: "q8_0".into(), ..ModelDraft::default() },
            ..AppState::default()
        };
        assert_eq!(partial, expected);
    }

    #[test]
    fn what_the_state_does_not_have_is_refused_at_its_path() {
        let cases = [
            (json!({"extra": 1}), "the plan has a field it does not know, \"extra\""),
            (json!({"nodes": [{"name": 3}]}), "`nodes[0].name` is a number, not text"),
            (json!({"nodes": [{"id": -1}]}), "`nodes[0].id` is a number, not a whole number"),
            (json!({"nodes": [{"enabled": "yes"}]}), "`nodes[0].enabled` is other text, not true or false"),
            (json!({"pairs": [{"a": "x", "c": "y"}]}), "pairs[0] has a field it does not know, \"c\""),
            (json!({"objective": "fastest"}), "`objective` is other text"),
            (json!({"model": {"source": null}}), "`model.source` is null"),
            (json!({"nodes": 5}), "`nodes` is not a list"),
            (json!([]), "the plan is not an object"),
            (json!({"x".repeat(1000): 1}), "a field it does not know, with a long name"),
            (json!({"\u{202e}": 1}), "\"\\u{202e}\""),
        ];
        for (value, expected) in cases {
            let error = app_state(&value).unwrap_err();
            assert!(error.contains(expected), "{value:.40}: {error}");
        }
    }
}
