//! What running deployments measure, from the two places the CLI reads it: a metrics file
//! written by anything, and a Prometheus server's query API. Parsing only; the CLI does the
//! reading and the HTTP.
//!
//! The metrics file is either the original form, utilization per deployment
//! (`{"chat": 0.85}`), or
//!
//! ```json
//! {"utilization": {"chat": 0.85},
//!  "stages": [{"deployment": "chat", "replica": 0, "stage": 1, "step_s": 0.031}],
//!  "nodes": [{"node": "mac", "memory_free": 12884901888, "up": true}],
//!  "tokens": [{"deployment": "chat", "token_s": 0.083}]}
//! ```
//!
//! where every list and map may be left out. From Prometheus, each [`Query`] is an instant
//! query whose series carry the labels that say what they measure (`deployment`,
//! `replica`, `stage`, `node`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stageplan::quote::line;

use crate::metrics::Metrics;

/// Most series one answer may hold: far above any fleet, far below what runs out of memory.
pub const MAX_SERIES: usize = 200_000;

/// Measurements of one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Observations {
    /// Utilization per deployment (1.0 = replicas at capacity).
    pub utilization: BTreeMap<String, f64>,
    /// Seconds per decode step by (deployment, replica, stage).
    pub steps: BTreeMap<(String, u32, usize), f64>,
    /// Free bytes per node.
    pub memory_free: BTreeMap<String, u64>,
    /// Whether each node reports itself up.
    pub up: BTreeMap<String, bool>,
    /// Seconds per generated token of a deployment's whole pipeline, as its engine reports
    /// it (llama.cpp's and vLLM's servers measure the pipeline, not its stages).
    pub token_s: BTreeMap<String, f64>,
    /// Whether each replica (deployment, replica) serves, as its machines' agents report.
    pub serving: BTreeMap<(String, u32), bool>,
}

impl Metrics for Observations {
    fn utilization(&self, deployment: &str) -> Option<f64> {
        self.utilization.get(deployment).copied()
    }
    fn stage_step_s(&self, deployment: &str, replica: u32, stage: usize) -> Option<f64> {
        self.steps.get(&(deployment.to_owned(), replica, stage)).copied()
    }
    fn memory_free(&self, node: &str) -> Option<u64> {
        self.memory_free.get(node).copied()
    }
    fn node_up(&self, node: &str) -> Option<bool> {
        self.up.get(node).copied()
    }
    fn replica_serving(&self, deployment: &str, replica: u32) -> Option<bool> {
        self.serving.get(&(deployment.to_owned(), replica)).copied()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    utilization: BTreeMap<String, f64>,
    #[serde(default)]
    stages: Vec<StageLine>,
    #[serde(default)]
    nodes: Vec<NodeLine>,
    #[serde(default)]
    tokens: Vec<TokenLine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StageLine {
    deployment: String,
    #[serde(default)]
    replica: u32,
    stage: usize,
    step_s: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeLine {
    node: String,
    #[serde(default)]
    memory_free: Option<u64>,
    #[serde(default)]
    up: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenLine {
    deployment: String,
    token_s: f64,
}

/// A time or a share must be a finite number, not below zero.
fn measure(field: &str, value: f64) -> Result<f64, String> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(format!("`{field}` is {value}; give a finite number, 0 or more"))
    }
}

impl Observations {
    /// Reads a metrics file (either form).
    ///
    /// # Errors
    /// Text that is neither form, naming the field.
    pub fn from_json(text: &str) -> Result<Observations, String> {
        // Errors quote the input they name: one line, whatever it holds.
        Observations::read_json(text).map_err(|e| line(&e).into_owned())
    }

    fn read_json(text: &str) -> Result<Observations, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("is not valid JSON ({e})"))?;
        let Some(object) = value.as_object() else {
            return Err("is not a JSON object; give `{\"DEPLOYMENT\": 0.85}` or the form with `stages`".into());
        };
        let mut out = Observations::default();
        if object.values().all(serde_json::Value::is_number) {
            for (name, v) in object {
                let load = v.as_f64().unwrap_or(f64::NAN);
                out.utilization.insert(name.clone(), measure(name, load)?);
            }
            return Ok(out);
        }
        let file: File = serde_json::from_value(value).map_err(|e| e.to_string())?;
        for (name, load) in file.utilization {
            out.utilization.insert(name.clone(), measure(&format!("utilization.{name}"), load)?);
        }
        for (i, s) in file.stages.into_iter().enumerate() {
            let step = measure(&format!("stages[{i}].step_s"), s.step_s)?;
            out.steps.insert((s.deployment, s.replica, s.stage), step);
        }
        for n in file.nodes {
            if let Some(free) = n.memory_free {
                out.memory_free.insert(n.node.clone(), free);
            }
            if let Some(up) = n.up {
                out.up.insert(n.node, up);
            }
        }
        for (i, t) in file.tokens.into_iter().enumerate() {
            out.token_s.insert(t.deployment, measure(&format!("tokens[{i}].token_s"), t.token_s)?);
        }
        Ok(out)
    }
}

/// What a Prometheus query measures, and the labels its series must carry.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Query {
    /// Seconds per decode step of a stage: labels `deployment`, `replica`, `stage`.
    Step,
    /// Free bytes on a node: label `node`.
    MemoryFree,
    /// Utilization of a deployment: label `deployment`.
    Utilization,
    /// Seconds per generated token of a deployment's pipeline: label `deployment`.
    Token,
    /// 1 when a node is up, 0 when down: label `node`.
    Up,
}

impl Query {
    pub const ALL: [Query; 5] = [Query::Step, Query::MemoryFree, Query::Utilization, Query::Token, Query::Up];

    /// The name `--prometheus-query NAME=PROMQL` uses.
    pub fn name(self) -> &'static str {
        match self {
            Query::Step => "step",
            Query::MemoryFree => "memory_free",
            Query::Utilization => "utilization",
            Query::Token => "token",
            Query::Up => "up",
        }
    }

    /// The query asked when none is given: stageplan's documented metric names for
    /// engines that report stages, and for the whole pipeline the counters llama.cpp's
    /// `llama-server --metrics` and vLLM export.
    pub fn default_promql(self) -> &'static str {
        match self {
            Query::Step => "stageplan_stage_step_seconds",
            Query::MemoryFree => "stageplan_node_memory_free_bytes",
            Query::Utilization => "stageplan_deployment_utilization",
            Query::Up => "stageplan_node_up",
            Query::Token => {
                "sum by (deployment) (rate(llamacpp:tokens_predicted_seconds_total[1m])) \
                 / sum by (deployment) (rate(llamacpp:tokens_predicted_total[1m])) \
                 or sum by (deployment) (rate(vllm:inter_token_latency_seconds_sum[1m])) \
                 / sum by (deployment) (rate(vllm:inter_token_latency_seconds_count[1m]))"
            }
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    /// `[unix seconds, "value"]`.
    value: (f64, String),
}

/// Adds a Prometheus instant query's answer (`/api/v1/query`) to `into`; returns how many
/// series it used. Series without the labels `query` needs, or whose value is not a number
/// (NaN from a division by a zero rate), are skipped.
///
/// # Errors
/// An answer that is not Prometheus's JSON, an error answer (with Prometheus's words), a
/// result that is not an instant vector, more than [`MAX_SERIES`] series.
pub fn add_prometheus(query: Query, text: &str, into: &mut Observations) -> Result<usize, String> {
    // Errors quote the answer's words: one line, whatever they hold.
    add(query, text, into).map_err(|e| line(&e).into_owned())
}

fn add(query: Query, text: &str, into: &mut Observations) -> Result<usize, String> {
    let answer: Answer =
        serde_json::from_str(text).map_err(|e| format!("did not answer with Prometheus's JSON ({e})"))?;
    if answer.status != "success" {
        let why = answer.error.unwrap_or_else(|| format!("status `{}`", answer.status));
        return Err(format!("refused the `{}` query: {why}", query.name()));
    }
    let data = answer.data.ok_or("answered `success` without `data`")?;
    if data.result_type != "vector" {
        return Err(format!(
            "answered the `{}` query with a {}; give a query whose result is an instant vector",
            query.name(),
            data.result_type
        ));
    }
    if data.result.len() > MAX_SERIES {
        return Err(format!("answered with {} series, over {MAX_SERIES}", data.result.len()));
    }
    let mut used = 0;
    for series in data.result {
        let Ok(value) = series.value.1.parse::<f64>() else { continue };
        if !(value.is_finite() && value >= 0.0) {
            continue;
        }
        let label = |name: &str| series.metric.get(name).cloned();
        let number = |name: &str| series.metric.get(name).and_then(|v| v.parse::<u64>().ok());
        let stored = match query {
            Query::Step => match (label("deployment"), number("replica"), number("stage")) {
                (Some(d), Some(r), Some(s)) => {
                    let (Ok(r), Ok(s)) = (u32::try_from(r), usize::try_from(s)) else { continue };
                    into.steps.insert((d, r, s), value);
                    true
                }
                _ => false,
            },
            Query::MemoryFree => label("node").map(|n| into.memory_free.insert(n, value as u64)).is_some(),
            Query::Utilization => label("deployment").map(|d| into.utilization.insert(d, value)).is_some(),
            Query::Token => label("deployment").map(|d| into.token_s.insert(d, value)).is_some(),
            Query::Up => label("node").map(|n| into.up.insert(n, value >= 0.5)).is_some(),
        };
        used += usize::from(stored);
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_file_forms_read() {
        let old = Observations::from_json(r#"{"chat": 0.85}"#).unwrap();
        assert_eq!(old.utilization["chat"], 0.85);
        let new = Observations::from_json(
            r#"{"utilization": {"chat": 0.5}, "stages": [{"deployment": "chat", "stage": 1, "step_s": 0.03}],
                "nodes": [{"node": "mac", "memory_free": 1024}], "tokens": [{"deployment": "chat", "token_s": 0.1}]}"#,
        )
        .unwrap();
        assert_eq!(new.stage_step_s("chat", 0, 1), Some(0.03));
        assert_eq!(new.memory_free("mac"), Some(1024));
        assert_eq!(new.token_s["chat"], 0.1);
        for (bad, says) in [
            ("[]", "not a JSON object"),
            (r#"{"chat": -1}"#, "`chat` is -1"),
            (r#"{"stages": [{"deployment": "d", "stage": 0, "step_s": -0.1}]}"#, "`stages[0].step_s` is -0.1"),
            (r#"{"stages": [], "extra": 1}"#, "unknown field `extra`"),
            // Found by the fuzz target: a name from the input is quoted, never a second line.
            ("{\"-\\n\": 0, \"t\": \"\"}", r"unknown field `-\n`"),
        ] {
            let error = Observations::from_json(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn prometheus_answers_fill_what_their_labels_say() {
        let mut seen = Observations::default();
        let answer = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"stageplan_stage_step_seconds","deployment":"chat","replica":"0","stage":"2"},"value":[1.7e9,"0.0412"]},
            {"metric":{"deployment":"chat","stage":"2"},"value":[1.7e9,"0.5"]},
            {"metric":{"deployment":"chat","replica":"0","stage":"3"},"value":[1.7e9,"NaN"]}]}}"#;
        assert_eq!(add_prometheus(Query::Step, answer, &mut seen).unwrap(), 1);
        assert_eq!(seen.stage_step_s("chat", 0, 2), Some(0.0412));
        let error = add_prometheus(
            Query::Token,
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
            &mut seen,
        )
        .unwrap_err();
        assert_eq!(error, "refused the `token` query: parse error at char 3");
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(add_prometheus(Query::Step, matrix, &mut seen).unwrap_err().contains("instant vector"));
        assert!(add_prometheus(Query::Step, "<html>", &mut seen).unwrap_err().contains("Prometheus's JSON"));
    }
}
