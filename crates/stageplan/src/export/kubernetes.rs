//! Kubernetes: one Deployment per stage pinned to its machine (`kubernetes.io/hostname`),
//! a GPU requested where the machine has one (a tensor-parallel stage's GPUs, a machine with
//! several GPUs giving one to each of its stages), the stage's layers and its neighbours in
//! the environment, a Service per stage for the hop into it, and the plan in a ConfigMap.
//!
//! The YAML is written by a small emitter over JSON values: block style, strings in double
//! quotes when YAML could read them as something else (JSON's escaping is valid YAML).

use std::fmt::Write;

use serde_json::{Value, json};

use super::{DeviceKind, Layout};

/// The port each stage listens on.
const PORT: u16 = 50052;

pub(super) fn export(layout: &Layout<'_>) -> (String, Vec<String>) {
    let plan = layout.plan;
    let app = dns_label(if plan.model.name.is_empty() { "stageplan" } else { &plan.model.name });
    let image = layout.options.image.clone().unwrap_or_else(|| "stageplan/stage:latest".to_owned());
    let model = layout.options.model.clone().unwrap_or_else(|| plan.model.name.clone());
    let mut notes = vec![format!(
        "Each pod runs one stage from its STAGEPLAN_* environment; the image must do that (`{image}` is a placeholder: give yours with `--image`)."
    )];
    notes.push(
        "Pods are pinned by `kubernetes.io/hostname`: the plan's node names (or the `--host` given) must be the cluster's node names.".to_owned(),
    );
    let service = |k: usize| format!("{app}-stage-{k}");
    let peers: Vec<String> = (0..layout.stages.len()).map(|k| format!("{}:{PORT}", service(k))).collect();
    // The split, readable in the cluster: what ran where, and what the plan expects.
    let summary = json!({
        "model": plan.model,
        "workload": plan.workload,
        // Three significant figures, as the CLI prints it: a prediction, not a measurement.
        // (Also what lets the web page's worker, which receives plans as JSON whose floats
        // may come back one bit off, print exactly what the CLI prints.)
        "tokens_per_s": three_figures(plan.tokens_per_s),
        "stages": plan.stages.iter().map(|s| json!({"node": s.node, "layers": s.layers, "memory_bytes": s.memory.total})).collect::<Vec<_>>(),
    });
    // JSON with every control escaped (serde_json leaves DEL and C1 raw), so it stays a
    // literal block whatever the names hold.
    let plan_json =
        crate::quote::terminal(&serde_json::to_string_pretty(&summary).unwrap_or_default()).into_owned() + "\n";
    let mut documents = vec![json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("{app}-plan"), "labels": labels(&app, None)},
        "data": {"plan.json": plan_json},
    })];
    let count = layout.stages.len();
    for (k, &(node, start, end)) in layout.stages.iter().enumerate() {
        let stage = &plan.stages[k];
        let mut env = vec![
            json!({"name": "STAGEPLAN_MODEL", "value": model}),
            json!({"name": "STAGEPLAN_STAGE", "value": k.to_string()}),
            json!({"name": "STAGEPLAN_STAGES", "value": count.to_string()}),
            json!({"name": "STAGEPLAN_LAYERS", "value": format!("{start}-{end}")}),
            json!({"name": "STAGEPLAN_PEERS", "value": peers.join(",")}),
        ];
        if k > 0 {
            env.push(json!({"name": "STAGEPLAN_PREV", "value": peers[k - 1]}));
        }
        if k + 1 < count {
            env.push(json!({"name": "STAGEPLAN_NEXT", "value": peers[k + 1]}));
        }
        env.push(json!({"name": "STAGEPLAN_EMBEDDING", "value": stage.embedding.to_string()}));
        env.push(json!({"name": "STAGEPLAN_HEAD", "value": stage.head.to_string()}));
        // The stage's GPUs, as the plan numbers them on its machine; more than one is a
        // tensor-parallel group.
        let gpus = stage.tensor_parallel.len().max(1);
        if gpus > 1 {
            env.push(json!({"name": "STAGEPLAN_TENSOR_PARALLEL", "value": gpus.to_string()}));
        }
        let mebibytes = stage.memory.total.div_ceil(1 << 20);
        let resources = match layout.kind(node) {
            DeviceKind::Gpu => json!({"limits": {"nvidia.com/gpu": gpus}}),
            // Unified memory and CPU boxes hold the stage in RAM: request what the plan counts.
            DeviceKind::Unified | DeviceKind::Cpu => {
                json!({"requests": {"memory": format!("{mebibytes}Mi")}, "limits": {"memory": format!("{mebibytes}Mi")}})
            }
        };
        let labels = labels(&app, Some(k));
        documents.push(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": service(k), "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": layout.host(node)},
                        "containers": [{
                            "name": "stage",
                            "image": image,
                            "ports": [{"name": "pipeline", "containerPort": PORT}],
                            "env": env,
                            "resources": resources,
                            "volumeMounts": [{"name": "plan", "mountPath": "/etc/stageplan", "readOnly": true}],
                        }],
                        "volumes": [{"name": "plan", "configMap": {"name": format!("{app}-plan")}}],
                    },
                },
            },
        }));
        documents.push(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service(k), "labels": labels},
            "spec": {
                "selector": labels,
                "ports": [{"name": "pipeline", "port": PORT, "targetPort": PORT}],
            },
        }));
    }
    // The device plugin hands a pod any free GPU of its node, whichever the plan named.
    let mixed: Vec<&str> = plan
        .stages
        .iter()
        .filter_map(|s| s.gpu_of.as_ref().map(|g| (g.machine.as_str(), s.memory.budget)))
        .fold(Vec::new(), |mut mixed: Vec<(&str, u64, bool)>, (machine, budget)| {
            match mixed.iter_mut().find(|(m, _, _)| *m == machine) {
                Some(seen) => seen.2 |= seen.1 != budget,
                None => mixed.push((machine, budget, false)),
            }
            mixed
        })
        .into_iter()
        .filter(|&(_, _, differ)| differ)
        .map(|(machine, _, _)| machine)
        .collect();
    if !mixed.is_empty() {
        notes.push(format!(
            "Kubernetes gives a pod any free GPU of its node: on {}, whose GPUs differ, a stage may land on another GPU than the plan's; expose each kind as its own resource (the device plugin's config) to pin them.",
            mixed.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    let mut out = format!("# stageplan · {}\n", layout.summary());
    for document in &documents {
        out.push_str("---\n");
        emit(&mut out, document, 0);
    }
    (out, notes)
}

fn labels(app: &str, stage: Option<usize>) -> Value {
    let mut labels = json!({"app.kubernetes.io/name": "stageplan", "app.kubernetes.io/instance": app});
    if let Some(k) = stage {
        labels["stageplan.dev/stage"] = json!(k.to_string());
    }
    labels
}

/// A DNS-1035 label (what a Service name must be): lowercase letters, digits and `-`,
/// starting with a letter, at most 40 characters (room for `-stage-N` and `-plan`).
fn dns_label(name: &str) -> String {
    let mut label: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    while label.contains("--") {
        label = label.replace("--", "-");
    }
    let mut label = label.trim_matches('-').to_owned();
    if label.starts_with(|c: char| c.is_ascii_digit()) {
        label.insert_str(0, "m-");
    }
    let label: String = label.chars().take(40).collect();
    let label = label.trim_end_matches('-').to_owned();
    if label.is_empty() { "stageplan".to_owned() } else { label }
}

/// Whether `text` can be a literal block as it is: no carriage returns or characters YAML
/// must escape, a first line that does not start with a space (which would need an
/// indentation indicator), and at most one final newline (kept by `|`, none by `|-`).
///
/// Its first line must start the text (not a line break or a space): YAML takes a block's
/// indentation from its first non-empty line, so a text starting `"\n L"` would shift it (the
/// fuzzer found that one). No line may end in spaces or be only spaces, which YAML may strip.
fn literal_block(text: &str) -> bool {
    !text.starts_with([' ', '\n'])
        && !text.trim_end_matches('\n').is_empty()
        && !text.ends_with("\n\n")
        && text.chars().all(|c| c == '\n' || !needs_escape(c))
        && text.lines().all(|line| !line.ends_with(' '))
}

/// Characters a YAML double-quoted scalar must escape beyond what JSON escapes, and what a
/// literal block cannot hold.
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\t') || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Writes `value` as block YAML at `indent` spaces.
fn emit(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                let key = scalar(&Value::String(key.clone()));
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        let _ = writeln!(out, "{pad}{key}:");
                        emit(out, item, indent + 2);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let _ = writeln!(out, "{pad}{key}:");
                        emit(out, item, indent);
                    }
                    Value::String(text) if text.contains('\n') && literal_block(text) => {
                        // A literal block: the text as it is, one more level in.
                        let chomp = if text.ends_with('\n') { "|" } else { "|-" };
                        let _ = writeln!(out, "{pad}{key}: {chomp}");
                        for line in text.lines() {
                            if line.is_empty() {
                                out.push('\n');
                            } else {
                                let _ = writeln!(out, "{pad}  {line}");
                            }
                        }
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}{key}: {}", scalar(item));
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        // The first key on the dash's line, the rest under it.
                        let mut nested = String::new();
                        emit(&mut nested, item, indent + 2);
                        let _ = write!(out, "{pad}- {}", &nested[indent + 2..]);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let _ = writeln!(out, "{pad}-");
                        emit(out, item, indent + 2);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}- {}", scalar(item));
                    }
                }
            }
        }
        scalar_value => {
            let _ = writeln!(out, "{pad}{}", scalar(scalar_value));
        }
    }
}

/// A scalar as YAML: strings by [`crate::quote::yaml`], which reads back as the same string.
fn scalar(value: &Value) -> String {
    match value {
        Value::Object(_) => "{}".to_owned(),
        Value::Array(_) => "[]".to_owned(),
        Value::String(s) => crate::quote::yaml(s).into_owned(),
        other => other.to_string(),
    }
}

/// `x` to three significant figures, as a number (`51.68486…` → `51.7`).
fn three_figures(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let scale = 10f64.powi(2 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        assert_eq!(dns_label("Llama-3.1-70B"), "llama-3-1-70b");
        assert_eq!(dns_label("__"), "stageplan");
        assert!(dns_label(&"x".repeat(90)).len() <= 40);
        assert_eq!(dns_label("01-ai/Yi-34B"), "m-01-ai-yi-34b");
    }

    #[test]
    fn scalars_that_yaml_would_misread_are_quoted() {
        for (value, yaml) in [
            (json!("desk"), "desk"),
            (json!("true"), "\"true\""),
            (json!("no"), "\"no\""),
            (json!("0"), "\"0\""),
            (json!("a: b"), "\"a: b\""),
            (json!("12-40"), "\"12-40\""),
            (json!(3), "3"),
            (json!(true), "true"),
            (json!(""), "\"\""),
            (json!("a\u{2028}b\u{7f}"), "\"a\\u2028b\\u007F\""),
            (json!("yes\r\nno"), "\"yes\\r\\nno\""),
        ] {
            assert_eq!(scalar(&value), yaml, "{value}");
        }
    }

    proptest::proptest! {
        /// Any string, as any value of a manifest, reads back as itself.
        #[test]
        fn any_string_reads_back(text in "(\\PC|[ \n\t#:-]){0,24}") {
            let mut out = String::new();
            emit(&mut out, &json!({"k": text, "list": [text]}), 0);
            let parsed = &yaml_rust2::YamlLoader::load_from_str(&out).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{e}: {out}")))?[0];
            proptest::prop_assert_eq!(parsed["k"].as_str(), Some(text.as_str()), "{}", out);
            proptest::prop_assert_eq!(parsed["list"][0].as_str(), Some(text.as_str()), "{}", out);
        }
    }

    #[test]
    fn figures_are_rounded_to_three_significant_digits() {
        let shown = |x: f64| serde_json::to_string(&three_figures(x)).unwrap();
        assert_eq!(shown(51.684_865_851_933_96), "51.7");
        assert_eq!(shown(510.758_583_915_180_17), "511.0");
        assert_eq!(shown(0.012_345), "0.0123");
        assert_eq!(shown(1234.5), "1230.0");
        assert_eq!(shown(0.0), "0.0");
    }

    #[test]
    fn nested_lists_of_maps_indent_under_their_dash() {
        let mut out = String::new();
        emit(&mut out, &json!({"a": [{"b": 1, "c": [{"d": "x"}]}], "e": {}}), 0);
        assert_eq!(out, "a:\n- b: 1\n  c:\n  - d: x\ne: {}\n");
        let mut block = String::new();
        emit(&mut block, &json!({"data": {"plan.json": "{\n  \"a\": 1\n}\n"}}), 0);
        assert_eq!(block, "data:\n  plan.json: |\n    {\n      \"a\": 1\n    }\n");
        // Text a literal block would change is double-quoted instead.
        // "\n L…" is what the export_text fuzz target found: a first empty line let the next,
        // indented one set the block's indentation.
        for text in ["  indented\nsecond\n", "two endings\n\n", "crlf\r\n", "\n", "\n L\nK\n(1", "trailing \nspace"] {
            let mut out = String::new();
            emit(&mut out, &json!({"k": text}), 0);
            assert!(out.starts_with("k: \""), "{text:?}: {out}");
            let parsed = &yaml_rust2::YamlLoader::load_from_str(&out).unwrap()[0];
            assert_eq!(parsed["k"].as_str(), Some(text));
        }
    }
}
