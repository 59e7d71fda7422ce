//! The one road from a scenario to a [`Problem`]: the CLI, the page, its worker, the JS API
//! and the reconcile loop all call [`check`], so a scenario means the same everywhere and
//! fails with the same [`ScenarioError`] — its JSON path and value as data.
//!
//! The core reads no files, so the one thing a surface supplies is the model a scenario's
//! `model.file` names: `read_model` receives that name and returns what the surface read
//! from the file's header (the CLI from disk, the page from a dropped file, the JS API from
//! given bytes), or its own error saying why it cannot.

mod fields;

use crate::error::ScenarioError;
use crate::model::Model;
use crate::problem::Problem;
use crate::scenario::Scenario;

/// A scenario as a surface holds it: JSON text (parsed here, once), or a value it built or
/// edited (the CLI's flags, the page's form).
#[derive(Clone, Debug)]
pub enum ScenarioInput<'a> {
    Json(&'a str),
    Value(Box<Scenario>),
}

impl<'a> From<&'a str> for ScenarioInput<'a> {
    fn from(text: &'a str) -> Self {
        ScenarioInput::Json(text)
    }
}

impl From<Scenario> for ScenarioInput<'_> {
    fn from(scenario: Scenario) -> Self {
        ScenarioInput::Value(Box::new(scenario))
    }
}

/// A scenario and the problem it checked into.
#[derive(Clone, Debug)]
pub struct Checked {
    pub scenario: Scenario,
    pub problem: Problem,
}

/// Reads (once) and checks a scenario into a [`Problem`], asking `read_model` for the model
/// when the scenario names a `model.file`, and for the draft when it names a `model.draft.file`.
///
/// # Errors
/// The scenario's first problem as a [`ScenarioError`] (into `E`) with the field's path and
/// the value written there, or `read_model`'s own error.
///
/// # Examples
/// ```
/// let text = r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#;
/// let checked = stageplan::check(text, stageplan::check::no_model_files)?;
/// assert_eq!(checked.problem.nodes.len(), 1);
/// # Ok::<(), stageplan::ScenarioError>(())
/// ```
pub fn check<'a, E: From<ScenarioError>>(
    input: impl Into<ScenarioInput<'a>>,
    mut read_model: impl FnMut(&str) -> Result<Model, E>,
) -> Result<Checked, E> {
    let (scenario, text) = match input.into() {
        ScenarioInput::Json(text) => (Scenario::from_json(text)?, Some(text)),
        ScenarioInput::Value(scenario) => (*scenario, None),
    };
    let draft_file = scenario.model.draft.as_ref().map(crate::scenario::DraftSpec::file).transpose();
    let checked = match (scenario.model.file(), draft_file) {
        (Ok(file), Ok(draft_file)) => {
            let model = file.map(&mut read_model).transpose()?;
            let draft = draft_file.flatten().map(&mut read_model).transpose()?;
            match (model, draft) {
                (None, None) => scenario.problem(),
                (Some(model), draft) => scenario.problem_with_models(model, draft),
                (None, draft) => scenario.model.resolve().and_then(|model| scenario.problem_with_models(model, draft)),
            }
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    match checked {
        Ok(problem) => Ok(Checked { scenario, problem }),
        // Only the error path pays for finding the value at the field, as written in the
        // text. A caller that built the scenario as a value holds that value itself (and
        // serializing a scenario here would weigh on the page's first download).
        Err(error) => Err(match text {
            Some(text) => error.with_value_from(text),
            None => error,
        }
        .into()),
    }
}

/// For a caller that reads no model files: a scenario naming one is refused at `model.file`.
///
/// # Errors
/// Always, naming the file.
pub fn no_model_files(file: &str) -> Result<Model, ScenarioError> {
    let mut error = ScenarioError::field(
        "model.file",
        format!(
            "names `{}`, which cannot be read here; the CLI reads model files, a library caller passes the file's model to `check`",
            crate::quote::line(file)
        ),
    );
    error.value = serde_json::to_string(file).ok();
    Err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: &str = include_str!("../../../../tests/scenarios/home-70b.json");

    #[test]
    fn text_and_value_check_alike() {
        let from_text = check(HOME, no_model_files).unwrap();
        let from_value = check(from_text.scenario.clone(), no_model_files).unwrap();
        assert_eq!(from_text.problem, from_value.problem);
    }

    #[test]
    fn errors_carry_the_path_and_the_value_written_there() {
        let mut scenario = Scenario::from_json(HOME).unwrap();
        scenario.nodes[1].bandwidth = Some(crate::units::Bandwidth::new(0.0).unwrap());
        let error = check(scenario, no_model_files).unwrap_err();
        assert_eq!(error.path, "nodes[1].bandwidth");
        assert_eq!(error.value, None, "a value's caller holds the value");
        assert!(error.to_string().starts_with("`nodes[1].bandwidth` is 0"), "{error}");

        let text = HOME.replacen("\"q4_k_m\"", "7", 1);
        let error = check(text.as_str(), no_model_files).unwrap_err();
        assert_eq!((error.path.as_str(), error.value.as_deref()), ("model.weights", Some("7")));
        // From text, the value as the user wrote it.
        let text = HOME.replacen("\"400 GB/s\"", "\"0 GB/s\"", 1);
        assert_ne!(text, HOME);
        let error = check(text.as_str(), no_model_files).unwrap_err();
        assert_eq!(error.value.as_deref(), Some("\"0 GB/s\""), "{error}");
    }

    #[test]
    fn a_model_file_is_asked_for_once_and_used() {
        let text = r#"{"model": {"file": "m.gguf"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#;
        let mut asked = Vec::new();
        let model = crate::presets::ModelPreset::find("llama-3.1-8b").unwrap().model(Default::default()).unwrap();
        let checked = check(text, |file| {
            asked.push(file.to_owned());
            Ok::<_, ScenarioError>(model.clone())
        })
        .unwrap();
        assert_eq!(asked, ["m.gguf"]);
        assert_eq!(checked.problem.file.as_deref(), Some("m.gguf"));
        let refused = check(text, no_model_files).unwrap_err();
        assert_eq!((refused.path.as_str(), refused.value.as_deref()), ("model.file", Some("\"m.gguf\"")));
    }
}
