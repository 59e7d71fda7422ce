//! The page's state: what the user typed, as typed, and the scenario it makes.
//!
//! Fields hold text (`"24 GiB"`) so editing never loses what was written; the scenario is
//! built by handing that text to the core's scenario parser, so the page validates exactly
//! as the CLI does and its errors name the same fields. The whole state travels in the URL
//! fragment (`#s1.` + base64url JSON): versioned, bounded in size, decoded defensively.

use serde::Serialize;
use serde_json::{Value, json};
use stageplan::Scenario;
use stageplan::plan::Change;
use stageplan::problem::Workload;
use stageplan::scenario::{LinksSpec, NodeSpec, Objective, Policy};
use stageplan::units::{Dimension, parse_quantity};

use crate::fields::{InputError, Place};

mod kept;
mod share;

pub use kept::not_kept;

/// Where the model comes from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    #[default]
    Preset,
    /// A pasted `config.json`.
    Config,
    /// A dropped file; its tensors live in the page, not in the state.
    File,
}

/// The model as edited.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelDraft {
    pub source: ModelSource,
    pub preset: String,
    pub weights: String,
    pub config: String,
    /// The dropped file's name, for the record.
    pub file: String,
    /// What rides along: the scenario's `model.draft` and `model.mmproj` objects as JSON
    /// text (empty: none), as a machine's `fit` is kept — text, so a share link carries no
    /// second copy of the scenario types' serializers.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub draft: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mmproj: String,
}

impl ModelDraft {
    /// A text field of the draft model (`preset`, `weights`), if there is a draft.
    pub fn draft_field(&self, key: &str) -> Option<String> {
        let draft: Value = serde_json::from_str(&self.draft).ok()?;
        draft.get(key)?.as_str().map(str::to_owned)
    }

    /// A draft named by its preset, in `weights`; `None`: no draft.
    pub fn set_draft(&mut self, preset: Option<&str>, weights: &str) {
        self.draft = preset.map_or_else(String::new, |p| json!({"preset": p, "weights": weights}).to_string());
    }

    /// A size of the vision projector as text (`weights`, `compute`); empty without one.
    pub fn projector_field(&self, key: &str) -> String {
        let Ok(Value::Object(projector)) = serde_json::from_str::<Value>(&self.mmproj) else { return String::new() };
        match projector.get(key) {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Number(bytes)) => bytes.to_string(),
            _ => String::new(),
        }
    }

    /// A size of the vision projector as typed: the core reads it (and says what is wrong at
    /// the field). With nothing left (no size, no file), no projector.
    pub fn set_projector(&mut self, key: &str, text: &str) {
        let mut projector = match serde_json::from_str::<Value>(&self.mmproj) {
            Ok(Value::Object(object)) => object,
            _ => serde_json::Map::new(),
        };
        if text.trim().is_empty() {
            projector.remove(key);
        } else {
            projector.insert(key.into(), Value::String(text.to_owned()));
        }
        self.mmproj = if projector.is_empty() { String::new() } else { Value::Object(projector).to_string() };
    }
}

/// A scenario's draft as the page keeps it: JSON text written field by field.
fn draft_text(draft: &stageplan::scenario::DraftSpec) -> String {
    let mut object = serde_json::Map::new();
    for (key, value) in [
        ("preset", &draft.preset),
        ("file", &draft.file),
        ("name", &draft.name),
        ("weights", &draft.weights),
        ("kv", &draft.kv),
    ] {
        if let Some(value) = value {
            object.insert(key.into(), Value::String(value.clone()));
        }
    }
    if let Some(config) = &draft.config {
        // Written as the model's config is: one serializer for configs on the page.
        let text = serde_json::to_string_pretty(config).unwrap_or_default();
        if let Ok(config) = serde_json::from_str::<Value>(&text) {
            object.insert("config".into(), config);
        }
    }
    Value::Object(object).to_string()
}

/// A scenario's vision projector as the page keeps it.
fn projector_text(projector: &stageplan::scenario::ProjectorSpec) -> String {
    let mut object = serde_json::Map::new();
    if let Some(file) = &projector.file {
        object.insert("file".into(), Value::String(file.clone()));
    }
    for (key, value) in [("weights", projector.weights), ("compute", projector.compute)] {
        if let Some(bytes) = value {
            object.insert(key.into(), json!(bytes.get()));
        }
    }
    Value::Object(object).to_string()
}

impl Default for ModelDraft {
    fn default() -> Self {
        ModelDraft {
            source: ModelSource::Preset,
            preset: "llama-3.1-70b".into(),
            weights: "q4_k_m".into(),
            config: String::new(),
            file: String::new(),
            draft: String::new(),
            mmproj: String::new(),
        }
    }
}

/// One machine as edited.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodeDraft {
    /// Stable while the node exists, so its row keeps focus while it is edited.
    pub id: u64,
    pub name: String,
    /// A device preset, or empty for custom figures.
    pub device: String,
    /// `gpu`, `unified` or `cpu`; empty for the preset's (exports name devices by it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    pub memory: String,
    pub bandwidth: String,
    pub compute: String,
    pub reserve: String,
    /// System RAM beside the device: a RAM preset (`ddr5-6000-2ch`) and its size; both
    /// empty for a machine planned as one memory.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ram: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ram_memory: String,
    /// GPUs of the device in this machine (`2` for "2× RTX 3090"), mixed GPUs as people
    /// write them (`rtx-5090 + 2× rtx-4090`, each a preset), or a scenario's list of mixed
    /// GPUs as JSON; empty for a machine of one device. With `gpu_link`, the link
    /// between them (a preset; empty for the default).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gpus: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gpu_link: String,
    /// What-if: a switched-off node is kept but not planned on.
    pub enabled: bool,
    /// The node's `backend`, `efficiency` and `probe` as JSON text (an object, or empty):
    /// fitted from the machine's own llama-bench results dropped on its row, measured by
    /// "this device", or read from a scenario. Kept as text, so the page never needs their
    /// types.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fit: String,
}

impl NodeDraft {
    /// The checked scenario's nodes this machine becomes: one per GPU of `gpus` (its count,
    /// or the counts of its list), else one.
    pub fn devices(&self) -> usize {
        let count = |v: &Value| v.get("count").and_then(Value::as_u64).unwrap_or(1) as usize;
        match serde_json::from_str::<Value>(self.gpus.trim()) {
            _ if self.gpus.trim().is_empty() => 1,
            Ok(Value::Array(list)) => list.iter().map(count).sum::<usize>().max(1),
            _ => match crate::fields::gpu_list(&self.gpus) {
                Some(list) => list.iter().map(|&(n, _)| n.clamp(1, 64) as usize).sum::<usize>().clamp(1, 64),
                None => crate::fields::count(&self.gpus).map_or(1, |n| n.clamp(1, 64) as usize),
            },
        }
    }

    /// Whether `gpus` names each GPU's device (a list, typed or JSON): the row's device
    /// and figures then stand for none of them.
    pub fn mixed_gpus(&self) -> bool {
        self.gpus.trim_start().starts_with('[') || crate::fields::gpu_list(&self.gpus).is_some()
    }

    /// A node from a device preset.
    pub fn preset(name: &str, device: &str) -> NodeDraft {
        NodeDraft { name: name.into(), device: device.into(), enabled: true, ..NodeDraft::default() }
    }

    /// Picks a device from the select. A preset brings its own figures, so the old ones
    /// (typed for another device) go; "custom figures" starts from the figures of the preset
    /// it leaves, written out to edit.
    pub fn choose_device(&mut self, device: &str) {
        let leaving = std::mem::replace(&mut self.device, device.to_owned());
        // A fit was to the figures it leaves.
        self.fit.clear();
        if !device.is_empty() {
            (self.kind, self.memory, self.bandwidth, self.compute, self.reserve) = Default::default();
            return;
        }
        if let Ok(preset) = stageplan::presets::DevicePreset::find(&leaving) {
            let fill = |field: &mut String, value: f64, dimension: Dimension| {
                if field.trim().is_empty() {
                    *field = quantity_text(value, dimension);
                }
            };
            fill(&mut self.memory, preset.memory, Dimension::Memory);
            fill(&mut self.bandwidth, preset.bandwidth, Dimension::Bandwidth);
            fill(&mut self.compute, preset.compute, Dimension::Compute);
            fill(&mut self.reserve, preset.reserve, Dimension::Memory);
            if self.kind.is_empty() {
                preset.kind.name().clone_into(&mut self.kind);
            }
        }
    }
}

/// A link between two named nodes, as edited.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PairDraft {
    pub a: String,
    pub b: String,
    pub bandwidth: String,
    pub latency: String,
}

/// Everything the page holds. A share link carries it as JSON (`to_fragment`), read back
/// by hand (`share`): no derived `Deserialize` on a first plan's road.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AppState {
    pub model: ModelDraft,
    pub context: String,
    pub batch: String,
    pub kv: String,
    /// The V cache's format where it differs from the K cache's (`-ctv`); empty: as K's.
    pub kv_v: String,
    pub nodes: Vec<NodeDraft>,
    pub link_bandwidth: String,
    pub link_latency: String,
    pub pairs: Vec<PairDraft>,
    pub objective: Objective,
}

impl Default for AppState {
    /// A home cluster: the page's first plan.
    fn default() -> Self {
        AppState {
            model: ModelDraft::default(),
            context: "8192".into(),
            batch: "1".into(),
            kv: Workload::DEFAULT.kv.name().into(),
            kv_v: String::new(),
            nodes: vec![
                NodeDraft::preset("desk", "rtx-4090"),
                NodeDraft::preset("gamer", "rtx-3090"),
                NodeDraft {
                    name: "mac".into(),
                    kind: "unified".into(),
                    memory: "64 GiB".into(),
                    bandwidth: "400 GB/s".into(),
                    compute: "27 TFLOPS".into(),
                    reserve: "16 GiB".into(),
                    enabled: true,
                    ..NodeDraft::default()
                },
            ],
            link_bandwidth: default_link_text(Dimension::Bandwidth),
            link_latency: default_link_text(Dimension::Time),
            pairs: Vec::new(),
            objective: Objective::Throughput,
        }
        .with_unique_ids()
    }
}

/// Limits on a decoded state: a share link is untrusted input.
pub const MAX_FRAGMENT: usize = 32 * 1024;
/// Machines a share link may hold (fewer than the planner takes, `limits::MAX_NODES`: a link is
/// typed by hand or pasted, and each machine is a row on the page).
const MAX_SHARED_NODES: usize = 256;
const MAX_TEXT: usize = 16 * 1024;

/// Why a share link could not be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ShareError(pub String);

impl AppState {
    /// The same state with every node's `id` distinct (ids from a share link are untrusted).
    pub fn with_unique_ids(mut self) -> AppState {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.id = i as u64 + 1;
        }
        self
    }

    /// An id no node has.
    pub fn next_id(&self) -> u64 {
        self.nodes.iter().map(|n| n.id).max().unwrap_or(0) + 1
    }

    /// The scenario as JSON text: what `stageplan plan` reads (the page's export).
    pub fn scenario_json(&self) -> Value {
        // A bare number is read in the unit the field's hint shows (GiB, GB/s, TFLOPS, ms),
        // never in bytes: "64" in Memory is 64 GiB.
        let quantity = |text: &str, unit: &str| -> Value {
            let t = text.trim();
            match stageplan::units::parse_decimal(t) {
                _ if t.is_empty() => Value::Null,
                Some(_) => json!(format!("{t} {unit}")),
                None => json!(t),
            }
        };
        // Counts as people write them (`32k`, `8,192`); anything else goes to the core as
        // typed, which says what is wrong.
        let integer =
            |text: &str| -> Value { crate::fields::count(text).map_or_else(|| json!(text.trim()), |n| json!(n)) };
        let model = match self.model.source {
            ModelSource::Preset => json!({"preset": self.model.preset, "weights": self.model.weights}),
            ModelSource::Config => {
                let config: Value =
                    serde_json::from_str(&self.model.config).unwrap_or_else(|_| json!(self.model.config));
                json!({"config": config, "weights": self.model.weights})
            }
            ModelSource::File => json!({"file": self.model.file}),
        };
        let mut model = model;
        if let Some(object) = model.as_object_mut() {
            for (key, text) in [("draft", &self.model.draft), ("mmproj", &self.model.mmproj)] {
                if !text.is_empty() {
                    // Text the page wrote; anything else goes to the core as written.
                    object.insert(key.into(), serde_json::from_str(text).unwrap_or_else(|_| json!(text)));
                }
            }
        }
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| {
                let mut node = serde_json::Map::new();
                node.insert("name".into(), json!(n.name));
                // Several GPUs: the device and its figures are each GPU's.
                let several = !n.gpus.trim().is_empty();
                let mut device = serde_json::Map::new();
                if !n.device.trim().is_empty() {
                    device.insert("device".into(), json!(n.device.trim()));
                }
                if !n.kind.is_empty() && !several {
                    device.insert("kind".into(), json!(n.kind));
                }
                for (key, text, unit) in [
                    ("memory", &n.memory, "GiB"),
                    ("bandwidth", &n.bandwidth, "GB/s"),
                    ("compute", &n.compute, "TFLOPS"),
                    ("reserve", &n.reserve, "GiB"),
                ] {
                    let value = quantity(text, unit);
                    if !value.is_null() {
                        device.insert(key.into(), value);
                    }
                }
                if several {
                    let gpus = match (serde_json::from_str::<Value>(n.gpus.trim()), crate::fields::gpu_list(&n.gpus)) {
                        (Ok(list @ Value::Array(_)), _) => list,
                        // Mixed GPUs as people write them: each a device preset, its own figures.
                        (_, Some(list)) => list
                            .into_iter()
                            .map(|(count, device)| match count {
                                1 => json!({"device": device}),
                                _ => json!({"device": device, "count": count}),
                            })
                            .collect(),
                        _ => {
                            device.insert("count".into(), integer(&n.gpus));
                            json!([Value::Object(std::mem::take(&mut device))])
                        }
                    };
                    node.insert("gpus".into(), gpus);
                    if !n.gpu_link.is_empty() {
                        node.insert("gpu_link".into(), json!(n.gpu_link));
                    }
                } else {
                    node.extend(device);
                }
                if !n.ram.is_empty() || !n.ram_memory.trim().is_empty() {
                    let mut host = serde_json::Map::new();
                    if !n.ram.is_empty() {
                        host.insert("ram".into(), json!(n.ram));
                    }
                    let memory = quantity(&n.ram_memory, "GiB");
                    if !memory.is_null() {
                        host.insert("memory".into(), memory);
                    }
                    node.insert("host".into(), Value::Object(host));
                }
                // Only the fields a fit or a probe holds, whatever a share link carries; a
                // machine's GPUs take a fit's backend, and no probe.
                if let Ok(Value::Object(fit)) = serde_json::from_str(&n.fit) {
                    let fit = fit.into_iter().filter(|(key, _)| FIT_FIELDS.contains(&key.as_str()));
                    match node.get_mut("gpus").and_then(Value::as_array_mut) {
                        Some(gpus) => {
                            for (key, value) in fit.filter(|(key, _)| key != "probe") {
                                for gpu in gpus.iter_mut().filter_map(Value::as_object_mut) {
                                    gpu.insert(key.clone(), value.clone());
                                }
                            }
                        }
                        None => node.extend(fit),
                    }
                }
                Value::Object(node)
            })
            .collect();
        let mut links = json!({"default": {"bandwidth": quantity(&self.link_bandwidth, "GB/s"), "latency": quantity(&self.link_latency, "ms")}});
        if !self.pairs.is_empty() {
            links["pairs"] = self
                .pairs
                .iter()
                .map(|p| json!({"between": [p.a, p.b], "bandwidth": quantity(&p.bandwidth, "GB/s"), "latency": quantity(&p.latency, "ms")}))
                .collect();
        }
        let mut workload = json!({"context": integer(&self.context), "batch": integer(&self.batch), "kv": self.kv});
        if !self.kv_v.is_empty() {
            workload["kv_v"] = json!(self.kv_v);
        }
        json!({
            "model": model,
            "workload": workload,
            "nodes": nodes,
            "links": links,
            "objective": self.objective.name(),
            "policy": Policy::Optimal.name(),
        })
    }

    /// The scenario, checked by the core's parser (errors name the field, as in the CLI).
    ///
    /// # Errors
    /// The first problem, as the CLI would print it, placed on its field; a count the page
    /// cannot read is said in the page's words first.
    pub fn scenario(&self) -> Result<Scenario, InputError> {
        for (id, text, what, example) in
            [("context", &self.context, "tokens", "`8192` or `32k`"), ("batch", &self.batch, "sequences", "`1` or `8`")]
        {
            if crate::fields::count(text).is_none() {
                let message = format!(
                    "`{}` is not a number of {what}; write a whole number, e.g. {example}",
                    stageplan::quote::line(text.trim())
                );
                return Err(InputError::at(Place::Field(id), message));
            }
        }
        let text = serde_json::to_string(&self.scenario_json())
            .map_err(|e| InputError { place: None, message: e.to_string() })?;
        Scenario::from_json(&text).map_err(|e| self.place(&e))
    }

    /// A core error about this state's scenario, placed on its field (see [`crate::fields`]).
    pub fn place(&self, error: &stageplan::ScenarioError) -> InputError {
        let machines: Vec<(u64, &str)> = self.nodes.iter().map(|n| (n.id, n.name.as_str())).collect();
        crate::fields::place(&machines, self.model.source == ModelSource::Config, error)
    }

    /// Applies a plan's fix (the page's "no plan fits" buttons).
    pub fn apply(&mut self, change: &Change) {
        match change {
            Change::Weights(weights) => weights.clone_into(&mut self.model.weights),
            Change::Context(context) => self.context = context.to_string(),
            // The fix is one format for both caches: a V format apart goes with it.
            Change::Kv(kv) => {
                kv.clone_into(&mut self.kv);
                self.kv_v.clear();
            }
            Change::CopyNode(name) => {
                let Some(like) = self.nodes.iter().find(|n| n.name == *name) else { return };
                let mut copy = NodeDraft { id: self.next_id(), enabled: true, ..like.clone() };
                let mut k = 2;
                while self.nodes.iter().any(|n| n.name == copy.name) {
                    copy.name = format!("{name}-{k}");
                    k += 1;
                }
                self.nodes.push(copy);
            }
        }
    }

    /// Which nodes are switched on, in order.
    pub fn enabled(&self) -> Vec<bool> {
        // A machine with several GPUs is a node per GPU in the checked scenario.
        self.nodes.iter().flat_map(|n| std::iter::repeat_n(n.enabled, n.devices())).collect()
    }

    /// The state a scenario describes (an imported file): figures written back as text.
    pub fn from_scenario(scenario: &Scenario) -> AppState {
        let model = match (&scenario.model.preset, &scenario.model.config, &scenario.model.file) {
            (Some(preset), _, _) => ModelDraft {
                source: ModelSource::Preset,
                preset: preset.clone(),
                weights: scenario.model.weights.clone().unwrap_or_else(|| "bf16".into()),
                ..ModelDraft::default()
            },
            (None, Some(config), _) => ModelDraft {
                source: ModelSource::Config,
                config: serde_json::to_string_pretty(config).unwrap_or_default(),
                weights: scenario.model.weights.clone().unwrap_or_else(|| "bf16".into()),
                ..ModelDraft::default()
            },
            (None, None, file) => ModelDraft {
                source: ModelSource::File,
                file: file.clone().unwrap_or_default(),
                ..ModelDraft::default()
            },
        };
        let model = ModelDraft {
            draft: scenario.model.draft.as_ref().map(draft_text).unwrap_or_default(),
            mmproj: scenario.model.mmproj.as_ref().map(projector_text).unwrap_or_default(),
            ..model
        };
        let links: &LinksSpec = &scenario.links;
        let default = links.default.as_ref();
        AppState {
            model,
            context: scenario.workload.context.to_string(),
            batch: scenario.workload.batch.to_string(),
            kv: scenario.workload.kv.clone(),
            kv_v: scenario.workload.kv_v.clone().unwrap_or_default(),
            nodes: scenario.nodes.iter().flat_map(node_drafts).collect(),
            link_bandwidth: default.map_or_else(
                || default_link_text(Dimension::Bandwidth),
                |l| quantity_text(l.bandwidth.get(), Dimension::Bandwidth),
            ),
            link_latency: default.map_or_else(
                || default_link_text(Dimension::Time),
                |l| quantity_text(l.latency.get(), Dimension::Time),
            ),
            pairs: links
                .pairs
                .iter()
                .map(|p| PairDraft {
                    a: p.between[0].clone(),
                    b: p.between[1].clone(),
                    bandwidth: quantity_text(p.bandwidth.get(), Dimension::Bandwidth),
                    latency: quantity_text(p.latency.get(), Dimension::Time),
                })
                .collect(),
            objective: scenario.objective,
        }
        .with_unique_ids()
    }

    /// The share-link fragment: `s1.` + base64url of the state's JSON.
    pub fn to_fragment(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("s1.{}", crate::base64url::encode(&json))
    }

    /// Reads a share-link fragment (with or without the leading `#`).
    ///
    /// # Errors
    /// A fragment that is too long, of an unknown version, not base64url, not the state's
    /// JSON, or beyond the size limits; the message says which.
    pub fn from_fragment(fragment: &str) -> Result<AppState, ShareError> {
        let fragment = fragment.trim_start_matches('#');
        if fragment.len() > MAX_FRAGMENT {
            return Err(ShareError(format!(
                "the share link is {} characters, over the {MAX_FRAGMENT} limit",
                fragment.len()
            )));
        }
        let Some(payload) = fragment.strip_prefix("s1.") else {
            return Err(ShareError("the share link is not a stageplan link (it should start with `s1.`)".into()));
        };
        let bytes = crate::base64url::decode(payload)
            .ok_or_else(|| ShareError("the share link is damaged (not base64url); copy it again".into()))?;
        if bytes.first() != Some(&b'{') {
            return Err(ShareError("the share link does not hold a plan (not a JSON object); copy it again".into()));
        }
        // As text, with the one JSON reader the page has (`from_str`, not `from_slice`).
        let state = std::str::from_utf8(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<Value>(text).map_err(|e| e.to_string()))
            .and_then(|value| share::app_state(&value))
            .map_err(|e| ShareError(format!("the share link does not hold a plan ({e}); copy it again")))?;
        let texts = std::iter::once(&state.model.config).chain(state.nodes.iter().flat_map(|n| {
            [
                &n.name,
                &n.device,
                &n.memory,
                &n.bandwidth,
                &n.compute,
                &n.reserve,
                &n.fit,
                &n.ram,
                &n.ram_memory,
                &n.gpus,
                &n.gpu_link,
            ]
        }));
        if state.nodes.len() > MAX_SHARED_NODES || texts.into_iter().any(|t| t.len() > MAX_TEXT) {
            return Err(ShareError(format!(
                "the share link holds more than {MAX_SHARED_NODES} nodes or an over-long field"
            )));
        }
        Ok(state)
    }
}

/// Drafts for a scenario node (`count` expanded, one draft per machine).
fn node_drafts(spec: &NodeSpec) -> Vec<NodeDraft> {
    let text = |q: Option<f64>, d: Dimension| q.map_or_else(String::new, |v| quantity_text(v, d));
    // A machine of one kind of GPU: its device in the row, their number in `gpus`; mixed
    // GPUs: the list as JSON, kept whole.
    let alike = match spec.gpus.as_deref() {
        Some([gpu]) => Some(gpu),
        _ => None,
    };
    let device = alike.map_or((&spec.device, spec.memory, spec.bandwidth, spec.compute, spec.reserve), |g| {
        (&g.device, g.memory, g.bandwidth, g.compute, g.reserve)
    });
    let gpus = match (alike, &spec.gpus) {
        (Some(gpu), _) => gpu.count.unwrap_or(1).to_string(),
        (None, Some(list)) => gpus_text(list),
        (None, None) => String::new(),
    };
    let draft = |name: String| NodeDraft {
        id: 0,
        name,
        device: device.0.clone().unwrap_or_default(),
        kind: spec.kind.map(|k| k.name().to_owned()).unwrap_or_default(),
        memory: text(device.1.map(stageplan::units::Bytes::get), Dimension::Memory),
        bandwidth: text(device.2.map(stageplan::units::Bandwidth::get), Dimension::Bandwidth),
        compute: text(device.3.map(stageplan::units::Compute::get), Dimension::Compute),
        reserve: text(device.4.map(stageplan::units::Bytes::get), Dimension::Memory),
        gpus: gpus.clone(),
        gpu_link: spec.gpu_link.clone().unwrap_or_default(),
        ram: spec.host.as_ref().and_then(|h| h.ram.clone()).unwrap_or_default(),
        ram_memory: text(
            spec.host.as_ref().and_then(|h| h.memory).map(stageplan::units::Bytes::get),
            Dimension::Memory,
        ),
        enabled: true,
        fit: fit_text(spec),
    };
    match spec.count {
        Some(count) => (1..=count.min(MAX_SHARED_NODES as u32)).map(|k| draft(format!("{}-{k}", spec.name))).collect(),
        None => vec![draft(spec.name.clone())],
    }
}

/// Mixed GPUs as people write them where each is a preset (`rtx-5090 + 2× rtx-4090`), else
/// as the scenario's JSON, field by field (serialising the type would add its serde code to
/// the page's first download).
fn gpus_text(gpus: &[stageplan::scenario::GpuSpec]) -> String {
    let presets: Option<Vec<String>> = gpus
        .iter()
        .map(|g| {
            let plain = g.memory.is_none() && g.bandwidth.is_none() && g.compute.is_none() && g.reserve.is_none();
            let written = |d: &&String| !d.contains(['+', ' ']) && !d.chars().any(char::is_uppercase);
            let device = g.device.as_ref().filter(|d| plain && g.backend.is_none() && written(d))?;
            Some(match g.count {
                Some(n) if n != 1 => format!("{n}× {device}"),
                _ => device.clone(),
            })
        })
        .collect();
    if let Some(terms) = presets.filter(|t| t.len() > 1) {
        return terms.join(" + ");
    }
    let list: Vec<Value> = gpus
        .iter()
        .map(|g| {
            let mut gpu = serde_json::Map::new();
            let mut put = |key: &str, value: Option<Value>| {
                if let Some(value) = value {
                    gpu.insert(key.into(), value);
                }
            };
            put("device", g.device.as_ref().map(|d| json!(d)));
            put("memory", g.memory.map(|b| json!(b.get())));
            put("bandwidth", g.bandwidth.map(|b| json!(b.get())));
            put("compute", g.compute.map(|c| json!(c.get())));
            put("reserve", g.reserve.map(|b| json!(b.get())));
            put("backend", g.backend.map(|b| json!(b.name())));
            put("count", g.count.map(|c| json!(c)));
            Value::Object(gpu)
        })
        .collect();
    Value::Array(list).to_string()
}

/// A scenario node's `backend` and `efficiency` as a draft keeps them (see [`NodeDraft::fit`]).
/// The node fields [`NodeDraft::fit`] carries: a llama-bench fit's `backend` and
/// `efficiency`, and a probe's provenance, which makes the figures measured.
const FIT_FIELDS: [&str; 3] = ["backend", "efficiency", "probe"];

fn fit_text(spec: &NodeSpec) -> String {
    let mut fit = serde_json::Map::new();
    if let Some(backend) = spec.backend {
        fit.insert("backend".into(), json!(backend.name()));
    }
    if let Some(e) = spec.efficiency {
        fit.insert("efficiency".into(), json!({"bandwidth": e.bandwidth, "compute": e.compute}));
    }
    // Field by field, as `efficiency` above: serialising the type would add its serde code
    // to the page's first download.
    if let Some(p) = &spec.probe {
        let engine = p
            .engine
            .as_ref()
            .map(|e| json!({"float": e.float, "q8": e.q8, "legacy": e.legacy, "kquant": e.kquant, "method": e.method}));
        fit.insert(
            "probe".into(),
            json!({"adapter": p.adapter, "backend": p.backend, "device_type": p.device_type,
                "memory_source": p.memory_source, "bandwidth_spread": p.bandwidth_spread,
                "compute_spread": p.compute_spread, "method": p.method, "engine": engine}),
        );
    }
    if fit.is_empty() { String::new() } else { Value::Object(fit).to_string() }
}

/// The core's default link as the page writes it (`1.25 GB/s`, `0.5 ms`).
fn default_link_text(dimension: Dimension) -> String {
    let link = stageplan::problem::DEFAULT_LINK;
    let value = if dimension == Dimension::Time { link.latency } else { link.bandwidth };
    quantity_text(value, dimension)
}

/// A quantity as text that parses back to exactly `value`: the largest unit that keeps it
/// short, printed with the shortest digits that round-trip.
pub fn quantity_text(value: f64, dimension: Dimension) -> String {
    let units: &[(&str, f64)] = match dimension {
        Dimension::Memory => &[("TiB", 1099511627776.0), ("GiB", 1073741824.0), ("MiB", 1048576.0), ("KiB", 1024.0)],
        Dimension::Bandwidth => &[("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)],
        Dimension::Compute => &[("PFLOPS", 1e15), ("TFLOPS", 1e12), ("GFLOPS", 1e9)],
        Dimension::Time => &[("s", 1.0), ("ms", 1e-3), ("us", 1e-6)],
    };
    // The shortest text, over every unit, that reads back as exactly `value`.
    units
        .iter()
        .map(|&(unit, factor)| format!("{} {unit}", value / factor))
        .chain(std::iter::once(format!("{value} {}", base_unit(dimension))))
        .filter(|text| parse_quantity(text, dimension).is_ok_and(|back| back == value))
        .min_by_key(String::len)
        .unwrap_or_else(|| format!("{value} {}", base_unit(dimension)))
}

/// The unit a quantity is counted in, written out (a bare number in a field means more).
fn base_unit(dimension: Dimension) -> &'static str {
    match dimension {
        Dimension::Memory => "B",
        Dimension::Bandwidth => "B/s",
        Dimension::Compute => "FLOPS",
        Dimension::Time => "s",
    }
}

#[cfg(test)]
mod tests;
