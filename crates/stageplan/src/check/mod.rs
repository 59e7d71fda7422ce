//! The one road from a scenario to a [`Problem`]: the CLI, the page, its worker, the JS API
//! and the reconcile loop all call [`check`], so a scenario means the same everywhere and
//! fails with the same [`ScenarioError`] — its JSON path and value as data.
//!
//! The core reads no files, so what a surface supplies is what a scenario's files hold:
//! `files` is asked for each file the scenario names, with the field that names it
//! ([`FileField`]: `model.file`, `model.draft.file`, `model.mmproj.file`), and returns what
//! the surface read from the file's header (the CLI from disk, the page from a dropped file,
//! the JS API from given bytes), or its own error saying why it cannot. A closure over
//! `(FileField, &str)` that returns a model reads model files only; a surface that also reads
//! a vision projector's header implements [`Files`].

mod fields;
mod machines;

pub use machines::machine_nodes;

use crate::error::ModelError;
use crate::error::ScenarioError;
use crate::import::ProjectorSize;
use crate::model::{HfConfig, Model, Transformer};
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

/// A file a scenario names, by the field that names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FileField {
    /// `model.file`: the model planned.
    Model,
    /// `model.draft.file`: a speculative-decoding draft model.
    Draft,
    /// `model.mmproj.file`: a vision projector, asked for when the scenario does not give
    /// its sizes.
    Projector,
}

impl FileField {
    /// The field's JSON path, where an error about the file belongs.
    pub fn path(self) -> &'static str {
        match self {
            FileField::Model => "model.file",
            FileField::Draft => "model.draft.file",
            FileField::Projector => "model.mmproj.file",
        }
    }
}

/// What a surface reads from the files a scenario names.
pub trait Files {
    type Error: From<ScenarioError>;

    /// The model in the file `name` that `field` (the model's or the draft's) names.
    ///
    /// # Errors
    /// The surface's own: the file cannot be read, or is not a model.
    fn model(&mut self, field: FileField, name: &str) -> Result<Model, Self::Error>;

    /// A vision projector's sizes from the file `name`, or `None` when this surface reads no
    /// projector files (the scenario must then give the sizes).
    ///
    /// # Errors
    /// The surface's own: the file cannot be read, or is not a projector.
    fn projector(&mut self, name: &str) -> Result<Option<ProjectorSize>, Self::Error> {
        let _ = name;
        Ok(None)
    }

    /// The transformer an inline `config.json` (`model.config`, `model.draft.config`)
    /// describes. A surface that plans presets only may refuse it ([`refused_config`]) and
    /// then does not carry the reader: the widget's module, whose first plan is a preset's
    /// (issue #45).
    ///
    /// # Errors
    /// What the config gets wrong, at its field within the config.
    fn config(&mut self, config: &str) -> Result<Transformer, ModelError> {
        read_config(config)
    }
}

/// How the model's and the draft's inline configs are read while a scenario is checked.
pub type ReadConfig<'a> = &'a mut dyn FnMut(&str) -> Result<Transformer, ModelError>;

/// Reads an inline `config.json` (its JSON text) into its transformer: [`Files::config`]
/// unless a surface says otherwise.
///
/// # Errors
/// What the config gets wrong, at its field within the config.
pub fn read_config(config: &str) -> Result<Transformer, ModelError> {
    HfConfig::from_inline(config)?.transformer()
}

/// A surface's refusal of inline configs, naming where they are read instead.
pub fn refused_config(instead: &str) -> ModelError {
    ModelError::Invalid { field: String::new(), problem: format!("is not read here; {instead}") }
}

impl<E: From<ScenarioError>, F: FnMut(FileField, &str) -> Result<Model, E>> Files for F {
    type Error = E;

    fn model(&mut self, field: FileField, name: &str) -> Result<Model, E> {
        self(field, name)
    }
}

/// Reads (once) and checks a scenario into a [`Problem`], asking `files` for what the files
/// it names hold: the model's (`model.file`), the draft's (`model.draft.file`) and a vision
/// projector's sizes (`model.mmproj.file`, where the scenario does not give them).
///
/// # Errors
/// The scenario's first problem as a [`ScenarioError`] (into the error of `files`) with the
/// field's path and the value written there, or what `files` says of a file.
///
/// # Examples
/// ```
/// let text = r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#;
/// let checked = stageplan::check(text, stageplan::check::no_model_files)?;
/// assert_eq!(checked.problem.nodes.len(), 1);
/// # Ok::<(), stageplan::ScenarioError>(())
/// ```
pub fn check<'a, F: Files>(input: impl Into<ScenarioInput<'a>>, mut files: F) -> Result<Checked, F::Error> {
    let (mut scenario, text) = match input.into() {
        ScenarioInput::Json(text) => (Scenario::from_json(text)?, Some(text)),
        ScenarioInput::Value(scenario) => (*scenario, None),
    };
    let draft_file = scenario.model.draft.as_ref().map(crate::scenario::DraftSpec::file).transpose();
    let checked = match (scenario.model.file(), draft_file) {
        (Ok(file), Ok(draft_file)) => {
            let model = file.map(|f| files.model(FileField::Model, f)).transpose()?;
            let draft = draft_file.flatten().map(|f| files.model(FileField::Draft, f)).transpose()?;
            read_projector(&mut scenario, &mut files)?;
            let configs = &mut |config: &str| files.config(config);
            match model {
                Some(model) => scenario.problem_with_models(model, draft, configs),
                None => scenario
                    .model
                    .resolve(configs)
                    .and_then(|model| scenario.problem_with_models(model, draft, configs)),
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

/// The vision projector's sizes the scenario leaves out, from the file it names where the
/// surface reads it.
fn read_projector<F: Files>(scenario: &mut Scenario, files: &mut F) -> Result<(), F::Error> {
    let Some(mmproj) = &mut scenario.model.mmproj else { return Ok(()) };
    let Some(file) = mmproj.file.as_deref().filter(|_| mmproj.weights.is_none() || mmproj.compute.is_none()) else {
        return Ok(());
    };
    if let Some(size) = files.projector(file)? {
        let bytes = |b: u64| crate::units::Bytes::new(b as f64).ok();
        mmproj.weights = mmproj.weights.or_else(|| bytes(size.weights));
        mmproj.compute = mmproj.compute.or_else(|| bytes(size.compute));
    }
    Ok(())
}

/// For a caller that reads no model files: a scenario naming one is refused at the field
/// that names it.
///
/// # Errors
/// Always, naming the file.
pub fn no_model_files(field: FileField, file: &str) -> Result<Model, ScenarioError> {
    Err(refused(
        field,
        file,
        "cannot be read here; the CLI reads model files, a library caller passes the file's model to `check`",
    ))
}

/// An error at `field` saying the file `file` it names `cannot`.
pub fn refused(field: FileField, file: &str, cannot: &str) -> ScenarioError {
    let mut error = ScenarioError::field(field.path(), format!("names `{}`, which {cannot}", crate::quote::line(file)));
    error.value = serde_json::to_string(file).ok();
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: &str = include_str!("../../../../tests/scenarios/home-70b.json");

    /// One machine read and checked alone, as a scenario's entry is: a GPU box its GPUs,
    /// its errors at the field within the entry.
    #[test]
    fn a_machine_alone_checks_as_in_a_scenario() {
        let text = r#"{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}], "gpu_link": "pcie4-x8",
            "host": {"ram": "ddr4-3200-2ch", "memory": "64 GiB"}}"#;
        let nodes = machine_nodes(&crate::scenario::NodeSpec::from_json(text).unwrap()).unwrap();
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["box/gpu0", "box/gpu1"]);
        let in_scenario = format!(r#"{{"model": {{"preset": "llama-3.1-8b"}}, "nodes": [{text}]}}"#);
        assert_eq!(check(in_scenario.as_str(), no_model_files).unwrap().problem.nodes, nodes);

        let error = crate::scenario::NodeSpec::from_json(r#"{"name": "a", "memory": "lots"}"#).unwrap_err();
        assert!(error.to_string().starts_with("`memory`"), "{error}");
        let error = crate::scenario::NodeSpec::from_json(r#"{"device": "rtx-4090"}"#).unwrap_err();
        assert!(error.to_string().contains("a machine needs at least a `name`"), "{error}");
        let spec = crate::scenario::NodeSpec::from_json(r#"{"name": "a", "device": "rtx-4090", "reserve": "30 GB"}"#);
        assert_eq!(machine_nodes(&spec.unwrap()).unwrap()[0].reserve, 30_000_000_000);
        let spec = crate::scenario::NodeSpec::from_json(r#"{"name": "a", "device": "rtx-4090", "count": 2}"#);
        assert_eq!(machine_nodes(&spec.unwrap()).unwrap_err().path, "count");
        let spec = crate::scenario::NodeSpec::from_json(
            r#"{"name": "a", "gpus": [{"device": "rtx-4090", "bandwidth": "0 GB/s"}]}"#,
        );
        assert_eq!(machine_nodes(&spec.unwrap()).unwrap_err().path, "gpus[0].bandwidth");
    }

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
        let checked = check(text, |field, file: &str| {
            asked.push((field, file.to_owned()));
            Ok::<_, ScenarioError>(model.clone())
        })
        .unwrap();
        assert_eq!(asked, [(FileField::Model, "m.gguf".to_owned())]);
        assert_eq!(checked.problem.file.as_deref(), Some("m.gguf"));
        let refused = check(text, no_model_files).unwrap_err();
        assert_eq!((refused.path.as_str(), refused.value.as_deref()), ("model.file", Some("\"m.gguf\"")));
    }

    #[test]
    fn each_file_is_asked_for_with_the_field_that_names_it() {
        let text = r#"{"model": {"file": "m.gguf", "draft": {"file": "d.gguf"}, "mmproj": {"file": "p.gguf"}},
                       "nodes": [{"name": "a", "device": "rtx-4090"}]}"#;
        let preset = |name: &str| crate::presets::ModelPreset::find(name).unwrap().model(Default::default()).unwrap();
        struct Disk<'a>(&'a std::cell::RefCell<Vec<(FileField, String)>>, Model, Model);
        impl Files for Disk<'_> {
            type Error = ScenarioError;
            fn model(&mut self, field: FileField, name: &str) -> Result<Model, ScenarioError> {
                self.0.borrow_mut().push((field, name.to_owned()));
                Ok(if field == FileField::Draft { self.2.clone() } else { self.1.clone() })
            }
            fn projector(&mut self, name: &str) -> Result<Option<ProjectorSize>, ScenarioError> {
                self.0.borrow_mut().push((FileField::Projector, name.to_owned()));
                Ok(Some(ProjectorSize { weights: 1 << 20, compute: 2 << 20 }))
            }
        }
        let asked = std::cell::RefCell::default();
        let checked = check(text, Disk(&asked, preset("llama-3.1-8b"), preset("llama-3.2-1b"))).unwrap();
        let asked = asked.into_inner();
        let asked: Vec<(FileField, &str)> = asked.iter().map(|(f, n)| (*f, n.as_str())).collect();
        assert_eq!(
            asked,
            [(FileField::Model, "m.gguf"), (FileField::Draft, "d.gguf"), (FileField::Projector, "p.gguf")]
        );
        // Each from its own file.
        assert_eq!(checked.problem.model.num_layers(), 32);
        assert_eq!(checked.problem.riders.draft.as_ref().unwrap().model.num_layers(), 16);
        let projector = checked.problem.riders.projector.as_ref().unwrap();
        assert_eq!((projector.weights, projector.compute), (1 << 20, 2 << 20));
        // A surface that reads the model's file only refuses the draft's at its own field…
        let main_only = |field: FileField, name: &str| match field {
            FileField::Model => Ok(preset("llama-3.1-8b")),
            _ => Err(refused(field, name, "was not dropped here")),
        };
        let error = check(text, main_only).unwrap_err();
        assert_eq!((error.path.as_str(), error.value.as_deref()), ("model.draft.file", Some("\"d.gguf\"")));
        // …and one that reads no projector asks for its sizes.
        let no_draft = text.replace(r#""draft": {"file": "d.gguf"}, "#, "");
        let error = check(no_draft.as_str(), main_only).unwrap_err();
        assert_eq!(error.path, "model.mmproj.weights");
    }
}
