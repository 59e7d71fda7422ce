//! The API over text in and Rust values out, so native tests call exactly what JavaScript
//! calls; `lib.rs` only converts values at the boundary.
//!
//! Errors are the CLI's messages word for word (scenario errors name the JSON path of the
//! field and the fix), so a docs page and a terminal say the same thing; a scenario's error
//! also carries that path and the value written there as data ([`Failure`]).

use std::fmt;

#[cfg(feature = "more")]
use serde::Serialize;
use stageplan::check::FileField;
#[cfg(feature = "more")]
use stageplan::import::{self, FileEntry, FileKind, ModelReader, Parse, Step};
#[cfg(feature = "more")]
use stageplan::model::{HfConfig, ModelSummary};
#[cfg(feature = "more")]
use stageplan::planner::replan::{self, ReplanOptions};
#[cfg(feature = "more")]
use stageplan::presets::ModelPreset;
#[cfg(feature = "more")]
use stageplan::problem::Workload;
use stageplan::view::PlanView;
use stageplan::view::users::{self, UsersView};
use stageplan::{Checked, Model, Plan, ScenarioError};
#[cfg(feature = "more")]
use stageplan::{Replan, WeightFormat};

/// Why a call failed: the CLI's message and, for a scenario's field, its JSON path and the
/// value written there — what a JS `Error` carries as `path` and `value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub message: String,
    /// The field's JSON path (`nodes[2].bandwidth`); `None` for the input as a whole.
    pub path: Option<String>,
    /// The value written at `path`, as JSON text.
    pub value: Option<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { message, path: None, value: None }
    }
}

impl From<ScenarioError> for Failure {
    fn from(error: ScenarioError) -> Failure {
        let path = Some(error.path.clone()).filter(|p| !p.is_empty());
        Failure { message: error.to_string(), path, value: error.value }
    }
}

/// A scenario given as JSON text, checked; a file it names is refused at its field, naming
/// the call that reads the model's.
fn check(scenario: &str) -> Result<Checked, Failure> {
    stageplan::check(scenario, NoFiles)
}

/// What the JS API reads of the files a scenario names: nothing. Without `more`, not an
/// inline `config.json` either: its reader is in `stageplan/more` (which the widget loads for
/// such a scenario), so the module of a page's first plan does not carry it (issue #45).
struct NoFiles;

impl stageplan::check::Files for NoFiles {
    type Error = Failure;

    fn model(&mut self, field: FileField, name: &str) -> Result<Model, Failure> {
        Err(refused_file(field, name).into())
    }

    #[cfg(not(feature = "more"))]
    fn config(&mut self, _: &str) -> Result<stageplan::model::Transformer, stageplan::ModelError> {
        Err(stageplan::check::refused_config(CONFIG_IN_MORE))
    }
}

/// Where an inline config is read, as a refusal says it; the widget's cue to load `more`.
#[cfg(not(feature = "more"))]
const CONFIG_IN_MORE: &str = "an inline config.json is read by `plan` and `planView` from `stageplan/more`";

/// Why the JS API does not read the file `name` at `field`: the model's is given to `plan`
/// from `stageplan/more`; a draft's is named by `preset` or `config`.
fn refused_file(field: FileField, name: &str) -> ScenarioError {
    let how = match field {
        FileField::Model => {
            "is not read by this call; pass its first bytes as `modelFile` ({name, bytes}) to `plan` from `stageplan/more`"
        }
        FileField::Draft | FileField::Projector => {
            "is not read: the JS API reads one file, the model's; give the draft as a `preset` or `config`, a projector's `weights` and `compute`"
        }
    };
    stageplan::check::refused(field, name, how)
}

/// Plans a scenario given as JSON text.
///
/// # Errors
/// The scenario's first problem.
pub fn plan(scenario: &str) -> Result<Plan, Failure> {
    Ok(stageplan::plan(&check(scenario)?.problem))
}

/// Plans a scenario whose model is a `file`, from that file's header.
///
/// # Errors
/// The scenario's first problem, or the file's.
#[cfg(feature = "more")]
pub fn plan_with_file(scenario: &str, file: ModelFile<'_>) -> Result<Plan, Failure> {
    let mut read = false;
    let checked = stageplan::check(scenario, |field, name: &str| match field {
        FileField::Model => {
            read = true;
            file.model(None).map_err(Failure::from)
        }
        _ => Err(refused_file(field, name).into()),
    })?;
    if !read {
        return Err(format!("`modelFile` `{}` was given but the scenario's `model` names no `file`", file.name).into());
    }
    Ok(stageplan::plan(&checked.problem))
}

/// A scenario planned with some of its machines switched off and laid out for drawing: what
/// the `<stage-plan>` element shows. `enabled` has one entry per scenario node (a node with
/// `count` switches all its copies).
///
/// # Errors
/// The scenario's first problem, or an `enabled` of the wrong length.
pub fn plan_view(scenario: &str, enabled: Option<&[bool]>) -> Result<PlanView, Failure> {
    let Checked { scenario: parsed, problem } = check(scenario)?;
    let per_node = per_problem_node(&parsed, problem.nodes.len(), enabled)?;
    let plan = stageplan::plan_with(&problem, stageplan::planner::PlanOptions::default().enabled(&per_node));
    let index = |name: &str| problem.nodes.iter().position(|n| n.name == name).unwrap_or(0);
    Ok(stageplan::view::plan_view(&plan, problem.model.num_layers(), &index))
}

/// The users chart of a scenario on its enabled machines (`enabled` as [`plan_view`]'s):
/// p95 time to first token and per token for 1, 2, 4, … users of one llama-server, and how
/// many see their first token within 2 s, laid out in the widget's box.
///
/// # Errors
/// The scenario's first problem, an `enabled` of the wrong length, or what stops the
/// simulation (an engine other than llama.cpp, a plan for one user that does not fit).
pub fn users_view(scenario: &str, enabled: Option<&[bool]>) -> Result<UsersView, Failure> {
    let Checked { scenario: parsed, problem } = check(scenario)?;
    let per_node = per_problem_node(&parsed, problem.nodes.len(), enabled)?;
    Ok(users::users_view(&problem, &per_node, WIDGET_FRAME).map_err(|e| e.to_string())?)
}

/// The widget's users chart box, the page's size: drawn at the widget's width.
const WIDGET_FRAME: users::Frame = users::Frame { width: 600.0, height: 160.0, pad: 24.0 };

/// `enabled`, one entry per scenario node, as one per problem node: a node with `count`
/// switches all its copies. Without it, each of the problem's `nodes` is on.
fn per_problem_node(
    parsed: &stageplan::Scenario,
    nodes: usize,
    enabled: Option<&[bool]>,
) -> Result<Vec<bool>, Failure> {
    let copies = |node: &stageplan::scenario::NodeSpec| node.count.unwrap_or(1) as usize;
    match enabled {
        None => Ok(vec![true; nodes]),
        Some(enabled) if enabled.len() == parsed.nodes.len() => {
            Ok(parsed.nodes.iter().zip(enabled).flat_map(|(node, &on)| std::iter::repeat_n(on, copies(node))).collect())
        }
        Some(enabled) => Err(Failure {
            message: format!(
                "`enabled` has {} entries for {} nodes; give one per scenario node",
                enabled.len(),
                parsed.nodes.len()
            ),
            path: Some("enabled".into()),
            value: None,
        }),
    }
}

/// A model file's first bytes (at least its whole header) and its name.
#[cfg(feature = "more")]
#[derive(Copy, Clone, Debug)]
pub struct ModelFile<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
    /// The whole file's size, when known: it lets the parsers check offsets against it.
    pub size: Option<u64>,
    /// The model's `config.json` beside a safetensors file: the hyperparameters shapes
    /// cannot tell (context length, rope, windows).
    pub config: Option<&'a stageplan::model::HfConfig>,
}

/// What reading a header gave: a model, or how many bytes to read first.
#[cfg(feature = "more")]
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Header {
    /// Read at least this many bytes from the start of the file and call again.
    NeedMore(u64),
    Model(ModelSummary),
}

#[cfg(feature = "more")]
impl ModelFile<'_> {
    /// The model the header describes; `weights` applies to a `config.json` only.
    ///
    /// # Errors
    /// Bytes that are not a model file, a header cut short, or a malformed one.
    pub fn model(&self, weights: Option<WeightFormat>) -> Result<Model, String> {
        match self.read(weights)? {
            Parse::Done(model) => Ok(model),
            Parse::NeedMore(n) => Err(format!(
                "`{}`: the header needs the first {n} bytes of the file; {} were given",
                self.name,
                self.bytes.len()
            )),
        }
    }

    /// Drives the core's model reader over the bytes given: a read past them is a request
    /// for more (`NeedMore`), a file beside this one (a split part, a shard) is not there.
    fn read(&self, weights: Option<WeightFormat>) -> Result<Parse<Model>, String> {
        let name = self.name;
        if weights.is_some() && import::detect(name, self.bytes).is_some_and(|k| k != FileKind::Config) {
            return Err(format!("`weights` applies to presets and config.json; `{name}` states its own tensor types"));
        }
        let is_text = import::detect(name, self.bytes) == Some(FileKind::Config);
        // A config's text is all there is, and so are fewer bytes than a file's magic; a
        // header's file may be longer than its prefix.
        let whole = is_text || self.bytes.len() < 16;
        let size = self.size.or(whole.then_some(self.bytes.len() as u64));
        let offered = vec![FileEntry { name: name.to_owned(), size }];
        let mut reader = ModelReader::new(offered, weights, None).map_err(|e| e.to_string())?;
        if let Some(config) = self.config {
            reader = reader.with_config(config.clone());
        }
        if !self.bytes.is_empty() {
            reader.supply(0, 0, self.bytes);
        }
        loop {
            match reader.step().map_err(|e| e.to_string())? {
                Step::Read { end, .. } => return Ok(Parse::NeedMore(end)),
                Step::Find { name } => reader.missing(&name),
                Step::Done(model) => return Ok(Parse::Done(*model)),
            }
        }
    }
}

/// Reads a model file's header from its first bytes.
///
/// # Errors
/// Bytes that are not a model file, or a malformed header.
#[cfg(feature = "more")]
pub fn import_header(file: ModelFile<'_>, weights: Option<&str>, caches: Caches<'_>) -> Result<Header, String> {
    if file.config.is_some() && !file.name.to_ascii_lowercase().ends_with(".safetensors") {
        return Err(format!("`config` goes with a .safetensors file; `{}` states its own hyperparameters", file.name));
    }
    let weights = weights.map(str::parse::<WeightFormat>).transpose().map_err(|e| e.to_string())?;
    Ok(match file.read(weights)? {
        Parse::NeedMore(n) => Header::NeedMore(n),
        Parse::Done(model) => Header::Model(caches.summary(&model)?),
    })
}

/// What `stageplan model` reports for a preset name or a `config.json` text.
///
/// # Errors
/// An unknown preset, a malformed config, or an unknown weight or KV format.
#[cfg(feature = "more")]
pub fn model(preset_or_config: &str, weights: Option<&str>, caches: Caches<'_>) -> Result<ModelSummary, String> {
    let weights = weights.map(str::parse::<stageplan::WeightFormat>).transpose().map_err(|e| e.to_string())?;
    let text = preset_or_config.trim();
    let model = if text.starts_with('{') {
        config_model(text, weights)?
    } else {
        ModelPreset::find(text).and_then(|p| p.model(weights.unwrap_or_default())).map_err(|e| e.to_string())?
    };
    caches.summary(&model)
}

#[cfg(feature = "more")]
fn config_model(text: &str, weights: Option<stageplan::WeightFormat>) -> Result<Model, String> {
    let config = HfConfig::from_json(text).map_err(|e| e.to_string())?;
    let arch = config.transformer().map_err(|e| e.to_string())?;
    let label = arch.model_type.clone();
    Ok(Model::from_transformer(&label, arch, weights.unwrap_or_default()))
}

/// The KV format named, or the default workload's when none is.
#[cfg(feature = "more")]
/// The KV-cache formats a model summary is priced in: `kv` for K (default `f16`), `kv_v`
/// for V where it differs.
#[cfg(feature = "more")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Caches<'a> {
    pub kv: Option<&'a str>,
    pub kv_v: Option<&'a str>,
}

#[cfg(feature = "more")]
impl Caches<'_> {
    /// `model`'s summary in these formats.
    ///
    /// # Errors
    /// A format that is no KV-cache format, or two the model cannot keep apart.
    fn summary(self, model: &Model) -> Result<ModelSummary, String> {
        let format =
            |field: &str, name: &str| stageplan::tensor_type::kv_format(name).map_err(|e| format!("`{field}` {e}"));
        let kv = self.kv.map_or(Ok(Workload::DEFAULT.kv), |name| format("kv", name))?;
        let kv_v = self.kv_v.map_or(Ok(kv), |name| format("kvV", name))?;
        model.cache_formats(kv, kv_v).map_err(|e| format!("`kvV` {e}"))?;
        Ok(model.summary(kv, kv_v))
    }
}

/// Re-plans a changed cluster from the plan running now (what `plan` returned).
///
/// # Errors
/// A current plan or scenario that does not parse, or options out of range.
#[cfg(feature = "more")]
pub fn replan(current: &str, scenario: &str, options: Option<&str>) -> Result<Replan, Failure> {
    let stages = replan::current_from_json(current).map_err(|e| e.to_string())?;
    let problem = check(scenario)?.problem;
    let options: ReplanOptions = match options {
        Some(text) => serde_json::from_str(text).map_err(|e| format!("re-plan options: {e}"))?,
        None => ReplanOptions::default(),
    };
    Ok(stageplan::replan(&problem, &stages, options).map_err(|e| e.to_string())?)
}

/// How many users of one llama-server meet `ttft`/`tpot`, or with `users` what that many see
/// (options as JSON text: `{"users": 8}`, `{"ttft": "2 s", "tpot": "80 ms", "percentile":
/// "p95"}`; `{}` for what the scenario's `serving` asks): `stageplan plan
/// --users`/`--ttft`/`--tpot --format json`.
///
/// # Errors
/// A scenario or options that do not parse, or a load that cannot be answered.
#[cfg(feature = "more")]
pub fn serve(scenario: &str, options: &str) -> Result<stageplan::serving::Answer, Failure> {
    use stageplan::demand::{Asked, Demand};
    use stageplan::serving::{self, Percentile, Targets};
    use stageplan::units::Seconds;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ServeOptions {
        users: Option<u32>,
        rate: Option<f64>,
        spread: Option<f64>,
        ttft: Option<Seconds>,
        tpot: Option<Seconds>,
        #[serde(default)]
        percentile: Percentile,
    }
    let options: ServeOptions = serde_json::from_str(options).map_err(|e| format!("serve options: {e}"))?;
    let targets = (options.ttft.is_some() || options.tpot.is_some()).then_some(Targets {
        ttft_s: options.ttft.map(Seconds::get),
        tpot_s: options.tpot.map(Seconds::get),
        percentile: options.percentile,
    });
    let problem = check(scenario)?.problem;
    if let Some(rate) = options.rate {
        stageplan::demand::check_rate(rate, options.users).map_err(|e| format!("`rate`: `rate` {e}"))?;
    }
    if let Some(spread) = options.spread {
        stageplan::demand::check_spread(spread).map_err(|e| format!("`spread`: `spread` {e}"))?;
    }
    let demand = Demand { users: options.users, targets, rate: options.rate, spread: options.spread.unwrap_or(0.0) };
    let asked = Asked::of(demand, problem.serving);
    let field = asked.field("users", "ttft`/`tpot");
    Ok(serving::answer(&problem, asked.demand).map_err(|e| format!("`{field}`: {e}"))?)
}

#[cfg(all(test, feature = "api", feature = "more"))]
mod tests {
    use super::*;
    #[cfg(feature = "more")]
    use stageplan::TensorType;

    const HOME: &str = include_str!("../../../tests/scenarios/home-70b.json");

    #[test]
    fn plans_what_the_cli_plans() {
        let expected = include_str!("../../../tests/cli/plan-home-json/expected");
        let json = &expected[expected.find('{').unwrap()..=expected.rfind('}').unwrap()];
        assert_eq!(serde_json::to_string_pretty(&plan(HOME).unwrap()).unwrap(), json);
    }

    #[test]
    fn errors_are_the_cli_messages() {
        let bad = std::fs::read_to_string("../../tests/cli/bad-unknown-preset/scenario.json").unwrap();
        let expected = std::fs::read_to_string("../../tests/cli/bad-unknown-preset/expected").unwrap();
        let message = plan(&bad).unwrap_err();
        assert!(expected.contains(&format!("error: {message}\n")), "{message} vs {expected}");
    }

    #[test]
    fn a_scenario_error_carries_its_field_and_value() {
        let mut scenario: serde_json::Value = serde_json::from_str(HOME).unwrap();
        scenario["nodes"][2]["bandwidth"] = serde_json::json!("0 GB/s");
        let error = plan(&scenario.to_string()).unwrap_err();
        assert_eq!(error.path.as_deref(), Some("nodes[2].bandwidth"));
        assert_eq!(error.value.as_deref(), Some("\"0 GB/s\""));
        assert!(error.message.starts_with("`nodes[2].bandwidth` is 0"), "{error}");
        let file = plan(r#"{"model": {"file": "m.gguf"}, "nodes": []}"#).unwrap_err();
        assert_eq!((file.path.as_deref(), file.value.as_deref()), (Some("model.file"), Some("\"m.gguf\"")));
    }

    #[test]
    fn models_from_presets_and_configs() {
        let preset = model("llama-3.1-8b", Some("q4_k_m"), Caches::default()).unwrap();
        assert_eq!(preset.layers.len(), 32);
        let config = stageplan::presets::ModelPreset::find("llama-3.2-1b").unwrap().config_json();
        let from_config = model(config, None, Caches { kv: Some("q8_0"), kv_v: None }).unwrap();
        assert_eq!(from_config.layers.len(), 16);
        assert!(model("llama-9", None, Caches::default()).unwrap_err().contains("llama"));
        assert!(
            model("llama-3.1-8b", None, Caches { kv: Some("q3_k"), kv_v: None })
                .unwrap_err()
                .starts_with("`kv` `q3_k`")
        );
        assert!(model("llama-3.1-8b", Some("q9"), Caches::default()).is_err());
        let apart = model("llama-3.1-8b", None, Caches { kv: Some("q8_0"), kv_v: Some("f16") }).unwrap();
        assert_eq!((apart.kv_bytes_per_token, apart.kv_v_format), (32 * (1088 + 2048), Some(TensorType::F16)));
        assert!(
            model("llama-3.1-8b", None, Caches { kv: None, kv_v: Some("q3_k") })
                .unwrap_err()
                .starts_with("`kvV` `q3_k`")
        );
    }

    #[test]
    fn headers_ask_for_more_bytes_then_read() {
        let bytes = stageplan::import::gguf::Builder::new(3, 2, 3)
            .kv_str("general.architecture", "llama")
            .kv_u32("llama.block_count", 1)
            .kv_u32("llama.attention.head_count", 2)
            .tensor("token_embd.weight", &[32, 10], 0, 0)
            .tensor("blk.0.attn_q.weight", &[32, 32], 8, 32 * 10 * 4)
            .padded(32 * 10 * 4 + 32 * 34);
        let file = |len: usize| ModelFile {
            name: "tiny.gguf",
            bytes: &bytes[..len],
            size: Some(bytes.len() as u64),
            config: None,
        };
        match import_header(file(16), None, Caches::default()).unwrap() {
            Header::NeedMore(n) => assert!(n > 16),
            Header::Model(_) => panic!("16 bytes cannot hold the header"),
        }
        match import_header(file(bytes.len()), None, Caches::default()).unwrap() {
            Header::Model(summary) => assert_eq!(summary.layers.len(), 1),
            Header::NeedMore(n) => panic!("needs {n} of {}", bytes.len()),
        }
        assert!(
            import_header(
                ModelFile { name: "x.bin", bytes: b"hello", size: None, config: None },
                None,
                Caches::default()
            )
            .is_err()
        );
    }

    /// The JS API reads a model file through the CLI's reader: a block index past u32 (read
    /// as no block at all, its bytes put in the embedding) is the CLI's refusal, word for word
    /// (issue #32, item 20). `tests/node` runs the same bytes through the wasm32 build.
    #[test]
    fn a_block_index_past_u32_is_the_clis_refusal() {
        let bytes = stageplan::import::gguf::Builder::new(3, 3, 3)
            .kv_str("general.architecture", "llama")
            .kv_u32("llama.block_count", 1)
            .kv_u32("llama.attention.head_count", 2)
            .tensor("token_embd.weight", &[32, 10], 0, 0)
            .tensor("blk.0.attn_q.weight", &[32, 32], 8, 32 * 10 * 4)
            .tensor("blk.4294967296.attn_q.weight", &[32, 32], 8, 32 * 10 * 4 + 32 * 34)
            .padded(32 * 10 * 4 + 2 * 32 * 34);
        let file = ModelFile { name: "m.gguf", bytes: &bytes, size: Some(bytes.len() as u64), config: None };
        let expected = std::fs::read_to_string("../../tests/cli/bad-model-layer-index-past-u32/expected").unwrap();
        let error = import_header(file, None, Caches::default()).unwrap_err();
        assert!(expected.ends_with(&format!("error: {}\n", error.replacen("`m.gguf`", "`model.gguf`", 1))), "{error}");
    }

    #[test]
    fn replans_from_a_returned_plan() {
        let running = serde_json::to_string(&plan(HOME).unwrap()).unwrap();
        let same = replan(&running, HOME, None).unwrap();
        assert!(same.kept);
        let error = replan(&running, HOME, Some(r#"{"tolerance": 2}"#)).unwrap_err();
        assert!(error.message.starts_with("`tolerance` is 2"), "{error}");
        assert!(replan(&running, HOME, Some(r#"{"tolerence": 0.1}"#)).unwrap_err().message.contains("unknown field"));
    }

    /// The CLI's answers, word for word: how many users fit, and what a count of them sees.
    #[test]
    fn serves_what_the_cli_serves() {
        let scenario = include_str!("../../../tests/cli/plan-users/scenario.json");
        for (case, options) in [
            ("plan-users-capacity-json", r#"{"tpot": "30ms", "percentile": "p50"}"#),
            ("plan-users-targets-json", r#"{"users": 4, "ttft": 1, "tpot": "5 ms"}"#),
        ] {
            let expected = std::fs::read_to_string(format!("../../tests/cli/{case}/expected")).unwrap();
            let json = &expected[expected.find('{').unwrap()..=expected.rfind('}').unwrap()];
            assert_eq!(serde_json::to_string_pretty(&serve(scenario, options).unwrap()).unwrap(), json, "{case}");
        }
        // A scenario's own `serving` answers as the options would.
        let asked = include_str!("../../../tests/cli/plan-serving-targets/scenario.json");
        assert_eq!(
            serde_json::to_string_pretty(&serve(asked, "{}").unwrap()).unwrap(),
            serde_json::to_string_pretty(&serve(scenario, r#"{"tpot": "30ms", "percentile": "p50"}"#).unwrap())
                .unwrap()
        );
        assert!(
            serve(asked, r#"{"users": 0}"#).unwrap_err().message.starts_with("`users`: `users` is 0"),
            "options first"
        );
        assert_eq!(
            serve(scenario, "{}").unwrap_err().message,
            "`ttft`/`tpot`: no target: give a time to first token, a time per token, or both"
        );
        assert!(serve(scenario, r#"{"users": 0}"#).unwrap_err().message.starts_with("`users`: `users` is 0"));
        for bad in ["0 s", "3601 s"] {
            let options = format!(r#"{{"ttft": "{bad}"}}"#);
            let refused = serve(scenario, &options).unwrap_err().message;
            assert!(refused.contains("`ttft` target must be a time from 1 µs to 1 h"), "{refused}");
        }
        assert!(serve(scenario, r#"{"users": 257}"#).unwrap_err().message.contains("past llama-server's 256 slots"));
        assert!(serve(scenario, r#"{"tftt": "2 s"}"#).unwrap_err().message.contains("unknown field `tftt`"));
    }

    #[test]
    fn the_view_is_the_plan_laid_out_with_machines_switched_off() {
        let view = plan_view(HOME, None).unwrap();
        let plan = plan(HOME).unwrap();
        assert_eq!(
            view.rows.iter().map(|r| r.node.as_str()).collect::<Vec<_>>(),
            plan.stages.iter().map(|s| s.node.as_str()).collect::<Vec<_>>()
        );
        let without_desk = plan_view(HOME, Some(&[false, true, true, true])).unwrap();
        assert!(without_desk.rows.iter().all(|r| r.node != "desk"), "{:?}", without_desk.rows);
        assert!(plan_view(HOME, Some(&[true])).unwrap_err().message.starts_with("`enabled` has 1 entries for 4 nodes"));
    }
}
