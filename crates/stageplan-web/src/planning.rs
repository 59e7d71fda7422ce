//! The page's one road from what the user edited to a plan: the scenario, the model (a
//! dropped file's or the scenario's own), the plan and its drawing, timed: [`compute`]. The
//! drawing is the core's [`stageplan::view`], which the embed widget draws too.

use stageplan::Plan;

use crate::fields::InputError;
use crate::state::AppState;
use crate::worker::{ConfigRead, Dropped};
use std::sync::Arc;

use stageplan::check::{FileField, Files};
use stageplan::model::Transformer;
use stageplan::view::{PlanView, plan_view};
use stageplan::{Model, ModelError, Scenario, ScenarioError};

/// The model dropped on the page as the file `file` that `field` names, or what to drop.
///
/// # Errors
/// No file of that name was dropped (files never leave the machine, so a link or an
/// imported scenario carries only their names).
pub fn dropped_model(dropped: &[Dropped], field: FileField, file: &str) -> Result<Model, ScenarioError> {
    if let Some(found) = dropped.iter().rev().find(|d| d.is(file)) {
        return Ok(found.model.clone());
    }
    let what = if field == FileField::Draft { "draft model" } else { "model" };
    Err(match file.trim() {
        "" => ScenarioError::about(
            field.path(),
            "drop a model file (.gguf, .safetensors, model.safetensors.index.json) to plan it",
        ),
        file => ScenarioError::about(
            field.path(),
            format!(
                "this plan's {what} is the file `{}`: drop it on the page again to plan it (files never leave your machine, so links cannot carry them)",
                stageplan::quote::line(file)
            ),
        ),
    })
}

/// What the page has of the models a scenario names: files dropped on it, and inline
/// configs its worker read (the configs' reader is not in the page's download: the first
/// plan, a preset's, does not use it).
struct PageModels<'a> {
    dropped: &'a [Dropped],
    configs: &'a [ConfigRead],
}

impl Files for PageModels<'_> {
    type Error = ScenarioError;

    fn model(&mut self, field: FileField, file: &str) -> Result<Model, ScenarioError> {
        dropped_model(self.dropped, field, file)
    }

    fn config(&mut self, text: &str) -> Result<Transformer, ModelError> {
        match self.configs.iter().rev().find(|read| read.text == text) {
            Some(read) => read.result(),
            // `read_configs` has asked the worker; its answer plans again.
            None => Err(ModelError::Invalid { field: String::new(), problem: "is being read…".to_owned() }),
        }
    }
}

/// The inline configs (`model.config`, `model.draft.config`) of `scenario`, as the core
/// gives them to [`Files::config`]: what the page asks its worker to read.
pub fn inline_configs(scenario: &Scenario) -> Vec<String> {
    let draft = scenario.model.draft.as_ref().and_then(|d| d.config.as_ref());
    scenario.model.config.iter().chain(draft).map(|c| c.text().to_owned()).collect()
}

/// How many configs the page keeps read: the model's and a draft's, with room for edits.
pub const CONFIGS_KEPT: usize = 8;

/// A planned state, or why it cannot be planned.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub plan: Plan,
    pub view: PlanView,
    pub layers: usize,
    /// The model's name (from a preset, a config or a model file's header) and its weights.
    pub model: String,
    pub weights: String,
    /// What the exports need beyond the plan (each machine's kind, from its preset).
    pub export_options: stageplan::export::ExportOptions,
    /// When nothing fits: the memory-proportional split on the same machines, to show how far
    /// over each machine is.
    pub overflow: Option<(Plan, PlanView)>,
}

/// The last planning and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    /// Shared: the panels that show a plan, and the exports, tell a new plan from the one they
    /// show by the pointer (`Arc::ptr_eq`), not by comparing plans field by field.
    pub result: Result<Arc<Outcome>, InputError>,
    pub millis: f64,
}

/// Plans `state`, with the models read from files dropped on the page (the model's, and a
/// draft's) and the inline configs the worker read: each field that names a file is answered
/// with the dropped file of that name, each config with what it read as.
///
/// # Errors
/// The scenario's first problem, worded as the CLI words it, placed on its field.
pub fn compute(state: &AppState, dropped: &[Dropped], configs: &[ConfigRead]) -> Result<Outcome, InputError> {
    let scenario = state.scenario()?;
    let problem = stageplan::check(scenario, PageModels { dropped, configs }).map_err(|e| state.place(&e))?.problem;
    let enabled = state.enabled();
    let plan = stageplan::plan_with(&problem, stageplan::planner::PlanOptions::default().enabled(&enabled));
    let names: Vec<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    // A GPU of a machine with several (`box/gpu1`) takes its machine's colour.
    let index = |name: &str| {
        let machine = name.rsplit_once("/gpu").map_or(name, |(machine, _)| machine);
        names.iter().position(|n| *n == machine).unwrap_or(0)
    };
    let layers = problem.model.num_layers();
    let mut view = plan_view(&plan, layers, &index);
    // The figures each stage was planned with: a preset's are otherwise not on screen.
    view.figures = figures(&problem, &plan);
    let overflow = (!plan.feasible).then(|| {
        let closest = stageplan::plan_with(
            &problem,
            stageplan::planner::PlanOptions::bare().enabled(&enabled).policy(stageplan::Policy::MemoryProportional),
        );
        let mut view = plan_view(&closest, layers, &index);
        view.figures = figures(&problem, &closest);
        (closest, view)
    });
    let overflow = overflow.filter(|(closest, _)| !closest.stages.is_empty());
    Ok(Outcome {
        plan,
        view,
        layers,
        model: problem.model.name.clone(),
        weights: problem.model.weights.clone(),
        export_options: stageplan::export::ExportOptions::for_problem(&problem),
        overflow,
    })
}

/// Each stage's node figures, `1.01 TB/s · 165 TFLOPS`, as the planner used them.
fn figures(problem: &stageplan::Problem, plan: &Plan) -> Vec<String> {
    use stageplan::units::{format_bandwidth, format_compute};
    plan.stages
        .iter()
        .map(|s| {
            problem.nodes.iter().find(|n| n.name == s.node).map_or_else(String::new, |n| {
                format!("{} · {}", format_bandwidth(n.bandwidth), format_compute(n.compute))
            })
        })
        .collect()
}

/// Milliseconds since the page loaded (0 off the browser).
pub fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}
