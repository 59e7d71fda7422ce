//! Every field of a scenario checked into a [`Problem`]: ranges, units, unique names,
//! presets and weight formats resolved, manual stages in range (machines and links in
//! `machines.rs`). Each error
//! names the field by its JSON path and says what to write. Reached only through
//! [`crate::check()`].

use crate::check::ReadConfig;
use crate::engine::Engine;
use crate::error::{ModelError, ScenarioError, suggest};
use crate::limits::{MAX_BATCH, MAX_BYTES, MAX_CONTEXT, MAX_NODE_LAYERS, MAX_PREFILL_CHUNK};
use crate::model::{Model, WeightFormat};
use crate::presets::ModelPreset;
use crate::problem::{
    DEFAULT_PROMPT, DEFAULT_RESPONSE, Draft, FixedOffload, Node, Placement, Problem, Projector, Riders, Workload,
};
use crate::scenario::{DraftSpec, ModelSpec, Policy, Scenario, WorkloadSpec, Workspace};
use crate::tensor_type::TensorType;
use crate::units::Bytes;

// Here rather than in `scenario`: the file format does not depend on the checked types.
impl Default for WorkloadSpec {
    /// [`Workload::DEFAULT`] as written in a scenario.
    fn default() -> Self {
        let Workload { context, batch, kv, prefill_chunk, flash_attention, .. } = Workload::DEFAULT;
        WorkloadSpec {
            context,
            batch,
            kv: kv.name().to_owned(),
            kv_v: None,
            workspace: None,
            prefill_chunk,
            flash_attention,
            prompt: None,
            depth: None,
            response: None,
        }
    }
}

impl Scenario {
    /// Checks every field and resolves presets.
    ///
    /// # Errors
    /// The first problem found, naming its field.
    #[cfg(test)]
    pub(crate) fn problem(&self) -> Result<Problem, ScenarioError> {
        let configs = &mut crate::check::read_config;
        self.problem_with_models(self.model.resolve(configs)?, None, configs)
    }

    /// Checks every field but `model`, planning `model` instead: how a caller that read a
    /// model file (`"model": {"file": …}`) supplies what it found; likewise `draft` for a
    /// draft's file (`"draft": {"file": …}`).
    ///
    /// # Errors
    /// The first problem found, naming its field.
    pub(crate) fn problem_with_models(
        &self,
        model: Model,
        draft: Option<Model>,
        configs: ReadConfig<'_>,
    ) -> Result<Problem, ScenarioError> {
        let file = self.model.file()?.map(str::to_owned);
        let riders = self.check_riders(draft, configs)?;
        let workload = Workload { engine: self.engine, ..self.workload.check()? };
        model.cache_formats(workload.kv, workload.kv_v).map_err(|e| ScenarioError::field("workload.kv_v", e))?;
        let nodes = self.check_nodes()?;
        let cells = nodes.len().saturating_mul(model.num_layers());
        if cells > MAX_NODE_LAYERS {
            return Err(ScenarioError::field(
                "nodes",
                format!(
                    "lists {} machines for a {}-layer model; the planner takes at most {MAX_NODE_LAYERS} machines × layers: plan on fewer machines",
                    nodes.len(),
                    model.num_layers()
                ),
            ));
        }
        let links = self.check_links(&nodes)?;
        let manual = self.check_stages(&nodes, model.num_layers())?;
        let fixed_offloads = self.check_stage_offloads(&nodes, manual.as_deref())?;
        let notes = self.notes(&nodes);
        let serving = self.serving.as_ref().map(|s| s.demand(self.engine)).transpose()?;
        Ok(Problem {
            model,
            workload,
            nodes,
            links,
            objective: self.objective,
            policy: self.policy,
            manual,
            fixed_offloads,
            file,
            riders,
            notes,
            serving,
        })
    }

    /// The draft model (resolved, or as its file was read) and the vision projector.
    fn check_riders(&self, read_draft: Option<Model>, configs: ReadConfig<'_>) -> Result<Riders, ScenarioError> {
        let draft = match &self.model.draft {
            None => None,
            Some(spec) => {
                let file = spec.file()?.map(str::to_owned);
                let model = match read_draft {
                    Some(model) if file.is_some() => model,
                    _ => spec.resolve(configs)?,
                };
                let kv = match &spec.kv {
                    Some(name) => crate::tensor_type::kv_format(name)
                        .map_err(|e| ScenarioError::field("model.draft.kv", e.to_string()))?,
                    None => TensorType::F16,
                };
                Some(Draft { model, kv, file })
            }
        };
        let projector = match &self.model.mmproj {
            None => None,
            Some(spec) => {
                let size = |value: Option<Bytes>, field: &str, example: &str| {
                    let at = format!("model.mmproj.{field}");
                    let Some(value) = value.map(Bytes::get) else {
                        let read = if spec.file.is_some() { "the CLI reads it from the file; here, " } else { "" };
                        return Err(ScenarioError::field(
                            at,
                            format!("is missing; {read}give the projector's {field}, e.g. `{example}`"),
                        ));
                    };
                    if value > MAX_BYTES {
                        return Err(ScenarioError::field(at, "is over an exabyte; check the unit"));
                    }
                    Ok(value as u64)
                };
                Some(Projector {
                    file: spec.file.clone(),
                    weights: size(spec.weights, "weights", "851 MiB")?,
                    compute: size(spec.compute, "compute", "1.1 GiB")?,
                })
            }
        };
        Ok(Riders { draft, projector })
    }

    fn check_stages(&self, nodes: &[Node], layers: usize) -> Result<Option<Vec<Placement>>, ScenarioError> {
        let Some(stages) = &self.stages else {
            if self.policy == Policy::Manual {
                return Err(ScenarioError::field(
                    "stages",
                    "is missing; the `manual` policy needs stages like `[{\"node\": \"desk\", \"layers\": [0, 40]}]`",
                ));
            }
            return Ok(None);
        };
        if self.policy != Policy::Manual {
            return Err(ScenarioError::field(
                "stages",
                format!(
                    "is given but `policy` is `{}`; set `\"policy\": \"manual\"` or remove `stages`",
                    self.policy.name()
                ),
            ));
        }
        if stages.is_empty() {
            return Err(ScenarioError::field("stages", "is empty; give at least one stage"));
        }
        let mut out: Vec<Placement> = Vec::with_capacity(stages.len());
        let mut expected_start = 0u64;
        for (i, stage) in stages.iter().enumerate() {
            let at = format!("stages[{i}]");
            let node = nodes.iter().position(|n| n.name == stage.node).ok_or_else(|| {
                ScenarioError::field(
                    format!("{at}.node"),
                    format!("`{}` is not a node; use a name from `nodes`", stage.node),
                )
            })?;
            if out.iter().any(|p| p.node == node) {
                return Err(ScenarioError::field(
                    format!("{at}.node"),
                    format!("`{}` already has a stage; give each node one contiguous range", stage.node),
                ));
            }
            let [start, end] = stage.layers;
            if start >= end {
                return Err(ScenarioError::field(
                    format!("{at}.layers"),
                    format!("`[{start}, {end}]` is empty; a stage is `[start, end)` with start < end"),
                ));
            }
            if start != expected_start {
                let problem = if start < expected_start {
                    "overlaps the stage before"
                } else {
                    "leaves a gap after the stage before"
                };
                return Err(ScenarioError::field(
                    format!("{at}.layers"),
                    format!("`[{start}, {end}]` {problem}; start it at {expected_start}"),
                ));
            }
            if end > layers as u64 {
                return Err(ScenarioError::field(
                    format!("{at}.layers"),
                    format!("`[{start}, {end}]` ends past the model's {layers} layers; end the last stage at {layers}"),
                ));
            }
            out.push(Placement::new(node, start as usize, end as usize));
            expected_start = end;
        }
        if expected_start != layers as u64 {
            return Err(ScenarioError::field(
                format!("stages[{}].layers", stages.len() - 1),
                format!("ends at {expected_start} but the model has {layers} layers; end the last stage at {layers}"),
            ));
        }
        Ok(Some(out))
    }
}

impl Scenario {
    /// Manual stages' `offload`: on a machine with system RAM, within the stage, whole
    /// layers only on a first stage.
    fn check_stage_offloads(
        &self,
        nodes: &[Node],
        manual: Option<&[Placement]>,
    ) -> Result<Vec<FixedOffload>, ScenarioError> {
        let (Some(specs), Some(manual)) = (&self.stages, manual) else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (i, (spec, &stage)) in specs.iter().zip(manual).enumerate() {
            let Some(offload) = &spec.offload else { continue };
            let at = |field: &str| format!("stages[{i}].offload.{field}");
            if nodes[stage.node].host.is_none() {
                return Err(ScenarioError::field(
                    format!("stages[{i}].offload"),
                    format!(
                        "is given, but `{}` has no `host`; give the machine its system RAM, or remove `offload`",
                        spec.node
                    ),
                ));
            }
            let layers = (stage.end - stage.start) as u64;
            if offload.host_ffn > 0 && self.engine.rules().host_ram == crate::engine::HostRam::Streamed {
                return Err(ScenarioError::field(
                    at("host_ffn"),
                    format!(
                        "is {}, but {} offloads whole layers' weights only (`--cpu-offload-gb`), never a layer's FFN alone: give 0 and count whole layers in `host_layers`, or plan for llama.cpp",
                        offload.host_ffn,
                        self.engine.name()
                    ),
                ));
            }
            if offload.host_layers > 0 && stage.start > 0 {
                return Err(ScenarioError::field(
                    at("host_layers"),
                    "is over 0, but only a first stage keeps whole layers in RAM (llama.cpp runs them where llama-server runs); give 0",
                ));
            }
            if offload.host_layers.saturating_add(offload.host_ffn) > layers {
                // Said at the field that was written: `host_layers` alone, or the two together.
                let (field, message) = if offload.host_ffn == 0 {
                    (
                        at("host_layers"),
                        format!(
                            "is {}, more than the stage's {layers} layers; give at most {layers}",
                            offload.host_layers
                        ),
                    )
                } else {
                    (
                        at("host_ffn"),
                        format!(
                            "with `host_layers` is {} layers, more than the stage's {layers}; give at most {layers} together",
                            offload.host_layers.saturating_add(offload.host_ffn)
                        ),
                    )
                };
                return Err(ScenarioError::field(field, message));
            }
            // llama.cpp's `-ngl` counts the output as the last layer it offloads: only
            // `-ngl 0` leaves it in RAM, with every layer there.
            if offload.host_head && (specs.len() != 1 || offload.host_layers != layers) {
                return Err(ScenarioError::field(
                    at("host_head"),
                    format!(
                        "is true, but only a one-stage plan with every layer in RAM keeps its head there (`-ngl 0`): give `host_layers` {layers} in a single stage, or false"
                    ),
                ));
            }
            out.push(FixedOffload {
                stage,
                host_layers: offload.host_layers as usize,
                host_ffn: offload.host_ffn as usize,
                head_on_host: offload.host_head,
            });
        }
        Ok(out)
    }
}

impl ModelSpec {
    /// The model file to read, when the spec names one (and only that).
    ///
    /// # Errors
    /// A file together with a preset, a config or a weight format.
    pub fn file(&self) -> Result<Option<&str>, ScenarioError> {
        self.source().file()
    }

    /// The model this spec names, with its weight format applied.
    ///
    /// # Errors
    /// Unknown preset or weight format, a bad config, or none/several of `preset`, `config`, `file`.
    pub fn resolve(&self, configs: ReadConfig<'_>) -> Result<Model, ScenarioError> {
        self.source().resolve(configs)
    }

    fn source(&self) -> Source<'_> {
        let ModelSpec { preset, config, file, name, weights, .. } = self;
        Source { at: "model", preset, config, file, name, weights }
    }
}

impl DraftSpec {
    /// The draft's model file to read, when the spec names one (and only that).
    ///
    /// # Errors
    /// As [`ModelSpec::file`], at `model.draft`.
    pub fn file(&self) -> Result<Option<&str>, ScenarioError> {
        self.source().file()
    }

    /// The draft model this spec names.
    ///
    /// # Errors
    /// As [`ModelSpec::resolve`], at `model.draft`.
    pub fn resolve(&self, configs: ReadConfig<'_>) -> Result<Model, ScenarioError> {
        self.source().resolve(configs)
    }

    fn source(&self) -> Source<'_> {
        let DraftSpec { preset, config, file, name, weights, .. } = self;
        Source { at: "model.draft", preset, config, file, name, weights }
    }
}

/// Where a model comes from, as `model` and `model.draft` both name one: the one reading of
/// `preset`, `config`, `file` and `weights`, with errors at `at`.
struct Source<'a> {
    at: &'static str,
    preset: &'a Option<String>,
    config: &'a Option<crate::scenario::InlineConfig>,
    file: &'a Option<String>,
    name: &'a Option<String>,
    weights: &'a Option<String>,
}

impl<'a> Source<'a> {
    fn file(&self) -> Result<Option<&'a str>, ScenarioError> {
        let at = self.at;
        let Some(file) = self.file.as_deref() else { return Ok(None) };
        if self.preset.is_some() || self.config.is_some() {
            return Err(ScenarioError::field(at, "gives more than one of `preset`, `config` and `file`; keep one"));
        }
        if self.weights.is_some() {
            return Err(ScenarioError::field(
                format!("{at}.weights"),
                "cannot change the formats a model file stores; remove `weights` or use a `preset`",
            ));
        }
        Ok(Some(file))
    }

    fn resolve(&self, configs: ReadConfig<'_>) -> Result<Model, ScenarioError> {
        let at = self.at;
        let weights: WeightFormat = match self.weights {
            Some(w) => w.parse().map_err(|e: ModelError| match e {
                ModelError::UnknownWeights { name, suggestion } => ScenarioError::field(
                    format!("{at}.weights"),
                    format!(
                        "`{name}` is not a weight format{}; run `stageplan presets` to list them",
                        suggest(suggestion.as_deref())
                    ),
                ),
                other => other.into(),
            })?,
            None => WeightFormat::default(),
        };
        match (self.preset, self.config, self.file) {
            (Some(preset), None, None) => {
                let preset = ModelPreset::find(preset).map_err(|e| match e {
                    ModelError::UnknownPreset { name, suggestion } => ScenarioError::field(
                        format!("{at}.preset"),
                        format!(
                            "`{name}` is not a model preset{}; run `stageplan presets` to list them",
                            suggest(suggestion.as_deref())
                        ),
                    ),
                    other => other.into(),
                })?;
                Ok(preset.model(weights)?)
            }
            (None, Some(config), None) => {
                let arch = configs(config.text()).map_err(|e| e.within(&format!("{at}.config")))?;
                let name = self.name.clone().unwrap_or_else(|| arch.model_type.clone());
                Ok(Model::from_transformer(&name, arch, weights))
            }
            (None, None, Some(_)) => Err(ScenarioError::field(
                format!("{at}.file"),
                "cannot be read here; the CLI reads model files, a library caller passes the model's config or header",
            )),
            (None, None, None) => Err(ScenarioError::field(
                at,
                "names no model; give `preset` (e.g. `llama-3.1-8b`), `config` (a config.json object) or `file`",
            )),
            _ => Err(ScenarioError::field(at, "gives more than one of `preset`, `config` and `file`; keep one")),
        }
    }
}

impl WorkloadSpec {
    /// Checks ranges and parses the KV format.
    ///
    /// # Errors
    /// A zero context, batch or chunk, or an unknown KV format.
    pub fn check(&self) -> Result<Workload, ScenarioError> {
        if self.context == 0 || self.context > MAX_CONTEXT {
            return Err(ScenarioError::field(
                "workload.context",
                format!("is {}; give a context between 1 and 67108864 tokens", self.context),
            ));
        }
        if self.batch == 0 || self.batch > MAX_BATCH {
            return Err(ScenarioError::field(
                "workload.batch",
                format!("is {}; give between 1 and 1048576 sequences", self.batch),
            ));
        }
        if self.prefill_chunk == 0 || self.prefill_chunk > MAX_PREFILL_CHUNK {
            return Err(ScenarioError::field(
                "workload.prefill_chunk",
                format!("is {}; give between 1 and 1048576 tokens (llama.cpp uses 512)", self.prefill_chunk),
            ));
        }
        let prompt = match self.prompt {
            Some(prompt) if prompt == 0 || prompt > self.context => {
                return Err(ScenarioError::field(
                    "workload.prompt",
                    format!("is {prompt}; give between 1 and the context's {} tokens", self.context),
                ));
            }
            Some(prompt) => prompt,
            None => DEFAULT_PROMPT.min(self.context),
        };
        let depth = match self.depth {
            Some(depth) if depth >= self.context => {
                return Err(ScenarioError::field(
                    "workload.depth",
                    format!("is {depth}; give fewer tokens than the context's {}, as llama-bench's `-d`", self.context),
                ));
            }
            Some(depth) => depth,
            None => prompt.min(self.context - 1),
        };
        let response = match self.response {
            Some(response) if response == 0 || response > self.context => {
                return Err(ScenarioError::field(
                    "workload.response",
                    format!("is {response}; give between 1 and the context's {} tokens", self.context),
                ));
            }
            Some(response) => response,
            None => DEFAULT_RESPONSE,
        };
        let kv = parse_kv(&self.kv)?;
        let kv_v = match &self.kv_v {
            Some(name) => {
                crate::tensor_type::kv_format(name).map_err(|e| ScenarioError::field("workload.kv_v", e.to_string()))?
            }
            None => kv,
        };
        let workspace = match &self.workspace {
            Some(Workspace::Size(bytes)) if bytes.get() > MAX_BYTES => {
                return Err(ScenarioError::field(
                    "workload.workspace",
                    "is over an exabyte; check the unit, or write `\"auto\"` for llama.cpp-like buffers",
                ));
            }
            Some(Workspace::Size(bytes)) => Some(bytes.get() as u64),
            Some(Workspace::Auto(_)) | None => None,
        };
        if !self.flash_attention && kv_v.is_quantized() {
            let (field, name) = if self.kv_v.is_some() { ("kv_v", kv_v.name()) } else { ("kv", kv.name()) };
            return Err(ScenarioError::field(
                "workload.flash_attention",
                format!(
                    "is false with a `{name}` V cache; llama.cpp needs flash attention for a quantized V cache: set it true or use `{field}` f16"
                ),
            ));
        }
        Ok(Workload {
            context: self.context,
            batch: self.batch,
            kv,
            kv_v,
            workspace,
            prefill_chunk: self.prefill_chunk,
            flash_attention: self.flash_attention,
            prompt,
            depth,
            response,
            engine: Engine::default(),
        })
    }
}

fn parse_kv(name: &str) -> Result<TensorType, ScenarioError> {
    crate::tensor_type::kv_format(name).map_err(|e| ScenarioError::field("workload.kv", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::DEFAULT_LINK;
    use crate::scenario::Objective;

    #[test]
    fn an_omitted_workload_checks_into_the_default() {
        assert_eq!(WorkloadSpec::default().check(), Ok(Workload::DEFAULT));
        assert_eq!(Workload::default(), Workload::DEFAULT);
    }

    fn problem(json: &str) -> Result<Problem, ScenarioError> {
        Scenario::from_json(json).and_then(|s| s.problem())
    }

    const MINIMAL: &str = r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#;

    #[test]
    fn fills_defaults() {
        let p = problem(MINIMAL).unwrap();
        assert_eq!(p.workload, Workload::default());
        assert_eq!(p.objective, Objective::Throughput);
        assert_eq!(p.policy, Policy::Optimal);
        assert_eq!(p.nodes[0].memory, 24564 * 1024 * 1024);
        assert!(p.links.is_uniform());
    }

    #[test]
    fn serving_asks_users_or_targets_and_is_refused_at_its_field() {
        let with = |serving: &str| {
            problem(&format!(
                r#"{{"model": {{"preset": "llama-3.1-8b"}}, "nodes": [{{"name": "a", "device": "rtx-4090"}}], "serving": {serving}}}"#
            ))
        };
        assert_eq!(problem(MINIMAL).unwrap().serving, None);
        let demand = with(r#"{"users": 8}"#).unwrap().serving.unwrap();
        assert_eq!((demand.users, demand.targets), (Some(8), None));
        let demand = with(r#"{"ttft": "2 s", "percentile": "p50"}"#).unwrap().serving.unwrap();
        let targets = demand.targets.unwrap();
        assert_eq!(
            (targets.ttft_s, targets.tpot_s, targets.percentile),
            (Some(2.0), None, crate::demand::Percentile::P50)
        );
        assert_eq!(
            with(r#"{"tpot": "80 ms"}"#).unwrap().serving.unwrap().targets.unwrap().percentile,
            Default::default()
        );
        for (serving, path, words) in [
            ("{}", "serving", "asks nothing"),
            (r#"{"percentile": "p95"}"#, "serving.percentile", "is what `ttft` and `tpot` hold at"),
            (r#"{"users": 0}"#, "serving.users", "is 0"),
            (r#"{"users": 257}"#, "serving.users", "past llama-server's 256 slots"),
            (r#"{"ttft": "7200 s"}"#, "serving.ttft", "from 1 µs to 1 h"),
            (r#"{"users": 2, "tpot": 0}"#, "serving.tpot", "from 1 µs to 1 h"),
        ] {
            let error = with(serving).unwrap_err();
            assert_eq!(error.path, path, "{serving}");
            assert!(error.to_string().contains(words), "{serving}: {error}");
        }
    }

    #[test]
    fn expands_counts_and_applies_overrides() {
        let p = problem(
            r#"{"model": {"preset": "llama-3.1-8b"},
                "nodes": [{"name": "gpu", "device": "rtx-3090", "count": 3, "memory": "20 GiB"}],
                "links": {"pairs": [{"between": ["gpu-1", "gpu-3"], "bandwidth": "10 Gbit/s", "latency": "1 ms"}]}}"#,
        )
        .unwrap();
        let names: Vec<&str> = p.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["gpu-1", "gpu-2", "gpu-3"]);
        assert_eq!(p.nodes[1].memory, 20 << 30);
        assert_eq!(p.links.get(2, 0).latency, 1e-3);
        assert_eq!(p.links.get(0, 1), DEFAULT_LINK);
    }
}
