//! `stageplan deploy` and `stageplan undeploy`: a deployment written to the store (its stages
//! planned from a `scenario` when it gives one) or removed with its stage bindings.

use std::path::Path;

use stageplan::device::DeviceKind;
use stageplan::quote::line;
use stageplan_reconcile::spec::{MAX_GPUS_PER_NODE, SpecError};
use stageplan_reconcile::store::{ASSIGNMENTS, DEPLOYMENTS};
use stageplan_reconcile::{
    BalanceOptions, Controller, Deployment, Event, Expect, NoMetrics, Op, Planned, Store, StoreError, planned_stages,
};

use crate::outcome::{Failure, Outcome};
use crate::{input, load, render, store};

/// Reads a deployment file: a [`Deployment`], where `stages` may be left out when a
/// `scenario` (inline, or a path relative to the file) says what to plan.
fn read_deployment(path: &Path, text: &str) -> Result<Deployment, Failure> {
    let at = |e: String| Failure(format!("`{}`: {e}", path.display()));
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| at(format!("is not valid JSON ({e})")))?;
    let object = value.as_object_mut().ok_or_else(|| at("is not a JSON object; give a deployment".into()))?;
    let scenario = object.remove("scenario");
    let gpus_per_stage = object.remove("gpus_per_stage");
    let rebalance = match object.remove("rebalance") {
        None | Some(serde_json::Value::Bool(false)) => None,
        Some(_) if scenario.is_none() => {
            return Err(at("`rebalance` needs a `scenario`: the loop re-plans from it".into()));
        }
        Some(serde_json::Value::Bool(true)) => Some(BalanceOptions::default()),
        Some(options) => Some(
            serde_json::from_value::<BalanceOptions>(options)
                .map_err(|e| at(format!("`rebalance`: {e}; give `true` or an object of its options")))?,
        ),
    };
    // GPUs per planned stage: a whole number a node can hold, never wrapped into range.
    let gpus = match &gpus_per_stage {
        None => None,
        Some(_) if scenario.is_none() => {
            return Err(at(
                "`gpus_per_stage` is for stages planned from a `scenario`; give `gpus` in each of `stages`".into(),
            ));
        }
        Some(value) => {
            Some(value.as_u64().and_then(|g| u32::try_from(g).ok()).filter(|&g| g <= MAX_GPUS_PER_NODE).ok_or_else(
                || at(format!("`gpus_per_stage` `{value}` must be a whole number from 0 to {MAX_GPUS_PER_NODE}")),
            )?)
        }
    };
    if let Some(scenario) = scenario {
        if object.contains_key("stages") {
            return Err(at("has both `stages` and `scenario`; give one".into()));
        }
        let here = path.parent().unwrap_or(Path::new("."));
        // A model file is relative to the file the scenario is in.
        let (scenario_text, base) = match &scenario {
            serde_json::Value::String(file) => {
                let file = here.join(file);
                let text = input::read_text(&file).map_err(|e| at(format!("`scenario`: {e}")))?;
                (text, file.parent().unwrap_or(here).to_path_buf())
            }
            other => (other.to_string(), here.to_path_buf()),
        };
        let checked = load::check(&base, scenario_text.as_str()).map_err(|e| at(format!("`scenario`: {}", e.0)))?;
        let (mut parsed, problem) = (checked.scenario, checked.problem);
        // The loop re-reads a model file from anywhere: keep its path absolute.
        if let Some(file) = parsed.model.file.as_mut() {
            *file = std::path::absolute(base.join(&*file)).unwrap_or_else(|_| base.join(&*file)).display().to_string();
        }
        let plan = stageplan::plan(&problem);
        if !plan.feasible {
            let why = plan.diagnostics.first().map_or_else(String::new, |d| format!(": {}", d.message));
            return Err(at(format!("`scenario` does not fit its machines{why}")));
        }
        let kinds = stageplan::export::ExportOptions::for_problem(&problem).kinds;
        let name = object.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_owned();
        // Only the stages and the model are taken from the template; `replicas` stays as given.
        let template = Deployment::from_plan(&name, &plan, 1, 1);
        // A stage takes a GPU unless its machine holds it in RAM (a Mac, a CPU box).
        let gpus_of =
            |node: &str| gpus.unwrap_or(u32::from(kinds.get(node).copied().unwrap_or_default() == DeviceKind::Gpu));
        let (mut stages, predicted) = planned_stages(&plan, |s| gpus_of(&s.node));
        if let Some(options) = rebalance {
            let planned =
                Planned { scenario: parsed, predicted, learned: Default::default(), options, events: Vec::new() };
            object.insert("planned".into(), serde_json::to_value(&planned).map_err(|e| at(e.to_string()))?);
        } else {
            // Without re-balancing, a stage may run on any node that fits.
            stages.iter_mut().for_each(|s| (s.node, s.gpu_ids) = (None, Vec::new()));
        }
        object.insert("stages".into(), serde_json::to_value(&stages).map_err(|e| at(e.to_string()))?);
        object.entry("model").or_insert(serde_json::Value::String(template.model));
    } else if object.contains_key("planned") {
        return Err(at(
            "`planned` is written by `stageplan deploy` from a `scenario` with `rebalance`; remove it".into()
        ));
    }
    let deployment: Deployment = serde_json::from_value(value).map_err(|e| at(e.to_string()))?;
    deployment.check().map_err(|e| {
        at(match e {
            // The file's `scenario` is what the record keeps as `planned.scenario`.
            SpecError::Machine { index, name, problem } => {
                format!("`scenario`: `nodes[{index}].name` `{}` {problem}", line(&name))
            }
            // The file says `rebalance` for what the record keeps as `planned.options`.
            e => e.to_string().replace("`planned.options.", "`rebalance."),
        })
    })?;
    Ok(deployment)
}

/// `stageplan deploy`: writes the deployment; the loop places it.
pub(super) fn deploy(store: &str, path: &Path) -> Result<Outcome, Failure> {
    let deployment = read_deployment(path, &input::read_text(path)?)?;
    let mut store = store::open(store)?;
    let summary = render::cluster::deployed(&deployment);
    Controller::default().handle(&mut store, Event::DeploymentChanged(deployment), &NoMetrics)?;
    Ok(Outcome::ok(summary))
}

/// `stageplan undeploy`: removes a deployment, readable or quarantined, and releases every
/// stage binding under its name at once (a quarantined deployment's bindings are otherwise
/// kept: the loop never releases what it cannot read).
pub(super) fn undeploy(store: &str, name: &str) -> Result<Outcome, Failure> {
    // A `/` would make `assignments/NAME/` the prefix of another deployment's replica.
    if name.is_empty() || name.contains('/') {
        return Err(Failure(format!("`{}` cannot be a deployment's name: it is empty or holds `/`", line(name))));
    }
    store::must_exist(store)?;
    let mut store = store::open(store)?;
    let key = format!("{DEPLOYMENTS}{name}");
    let prefix = format!("{ASSIGNMENTS}{name}/");
    let deployed = store.list(DEPLOYMENTS)?;
    if deployed.iter().any(|(k, _)| *k == key) {
        // The deployment first: a pass in between releases its readable bindings as not desired.
        Controller::default().handle(&mut store, Event::DeploymentRemoved(name.to_owned()), &NoMetrics)?;
    } else if store.list(&prefix)?.is_empty() {
        // Bindings left without their deployment record (orphans) are released all the same.
        let known: Vec<String> =
            deployed.iter().filter_map(|(k, _)| k.strip_prefix(DEPLOYMENTS)).map(|k| line(k).into_owned()).collect();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(Failure(format!("deployment `{}` is not deployed; deployed: {known}", line(name))));
    }
    let max_ops = store.max_ops().max(1);
    let mut bindings = store.list(&prefix)?;
    let held = bindings.len();
    // Each delete expects the binding as read; a pass that released some first makes a
    // transaction fail, and the rest is read again.
    for _ in 0..8 {
        for chunk in bindings.chunks(max_ops) {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|(key, v)| Op::Delete { key: key.clone(), expect: Expect::Revision(v.revision) })
                .collect();
            match store.commit(&ops) {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        bindings = store.list(&prefix)?;
        if bindings.is_empty() {
            break;
        }
    }
    Ok(Outcome::ok(render::cluster::undeployed(name, held, bindings.len())))
}
