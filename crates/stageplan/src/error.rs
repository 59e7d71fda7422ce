//! Errors of the core: each names the offending field or value and says how to fix it.
//!
//! Messages are one line, lowercase, with values in backticks and no trailing period, so a
//! CLI can print them after `error: ` and a web page can show them under a field.

/// A model description that cannot be turned into per-layer costs.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A `config.json` field has the wrong JSON type.
    #[error("`{field}`: {message}")]
    Config { field: String, message: String },
    /// A field is missing or out of range.
    #[error("`{field}` {problem}")]
    Invalid { field: String, problem: String },
    /// A model family this cost model does not describe from its config.
    #[error("{what} is not supported from a config: {fix}")]
    Unsupported { what: String, fix: String },
    /// No model preset by that name.
    #[error("unknown model preset `{name}`{}; run `stageplan presets` to list them", suggest(.suggestion.as_deref()))]
    UnknownPreset { name: String, suggestion: Option<String> },
    /// No weight format by that name.
    #[error("unknown weight format `{name}`{}; use e.g. `bf16`, `f16`, `fp8`, `int8`, `q8_0`, `q6_k`, `q5_k_m`, `q4_k_m`, `q3_k_m`, `q2_k`, `iq4_xs`", suggest(.suggestion.as_deref()))]
    UnknownWeights { name: String, suggestion: Option<String> },
}

impl ModelError {
    pub(crate) fn invalid(field: &str, problem: &str) -> ModelError {
        ModelError::Invalid { field: field.to_owned(), problem: problem.to_owned() }
    }

    /// The same error with `prefix.` in front of the field it names.
    pub(crate) fn within(self, prefix: &str) -> ModelError {
        match self {
            ModelError::Config { field, message } => ModelError::Config { field: join(prefix, &field), message },
            ModelError::Invalid { field, problem } => ModelError::Invalid { field: join(prefix, &field), problem },
            other => other,
        }
    }
}

fn join(prefix: &str, field: &str) -> String {
    match field {
        "" | "." => prefix.to_owned(),
        index if index.starts_with('[') => format!("{prefix}{index}"),
        _ => format!("{prefix}.{field}"),
    }
}

pub(crate) fn suggest(suggestion: Option<&str>) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean `{s}`?)"),
        None => String::new(),
    }
}

/// A scenario that cannot be planned as written: where (its JSON path, as data every
/// surface marks a field from), what was written there, and what to do.
///
/// The message is one line: `` `path` problem `` (or `` `path`: problem `` after a syntax or
/// `config.json` error), or the problem alone when it is about the scenario as a whole.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}", self.message_about(&format!("`{}`", self.path)))]
pub struct ScenarioError {
    /// The field's JSON path (`nodes[2].bandwidth`, `model.config.hidden_size`); empty: the
    /// scenario as a whole.
    pub path: String,
    /// The value written at `path`, as compact JSON (shortened past 200 characters), when the
    /// scenario's text was at hand and had one there.
    pub value: Option<String>,
    /// What is wrong and what to write instead, without the path.
    pub problem: String,
    /// How the message names the path.
    form: Form,
}

/// How a message names its path.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Form {
    /// `` `path` is 0; … ``: a checked field.
    Field,
    /// `` `path`: invalid type … ``: the reader's words after a colon.
    Colon,
    /// The problem names what it is about itself (`unknown model preset …`).
    Bare,
}

impl ScenarioError {
    /// A problem with the field at `field` (a JSON path; empty: the scenario as a whole).
    pub fn field(field: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
        ScenarioError { path: field.into(), value: None, problem: problem.into(), form: Form::Field }
    }

    /// A problem with the field at `path` whose message names what it is about itself (the
    /// path is data for placing it, not part of the text).
    pub fn about(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError { path: path.into(), value: None, problem: message.into(), form: Form::Bare }
    }

    /// The reader's own words about the field at `path` (a wrong type, an unknown key).
    pub(crate) fn syntax(path: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
        ScenarioError { path: path.into(), value: None, problem: problem.into(), form: Form::Colon }
    }

    /// The message with `subject` in place of `` `path` `` (a page says "`` `mac` `` memory" for
    /// `nodes[2].memory`); the problem alone when the error is about the scenario as a whole.
    pub fn message_about(&self, subject: &str) -> String {
        match self.form {
            _ if self.path.is_empty() => self.problem.clone(),
            Form::Field => format!("{subject} {}", self.problem),
            Form::Colon => format!("{subject}: {}", self.problem),
            Form::Bare => self.problem.clone(),
        }
    }

    /// The same error with `value`, the JSON written at its path in `text`, when there is one.
    pub(crate) fn with_value_from(mut self, text: &str) -> ScenarioError {
        if self.path.is_empty() {
            return self;
        }
        self.value = crate::json::value_text_at(text, &self.path).map(|value| match value.char_indices().nth(200) {
            Some((cut, _)) => format!("{}…", &value[..cut]),
            None => value.to_owned(),
        });
        self
    }
}

impl From<ModelError> for ScenarioError {
    fn from(error: ModelError) -> ScenarioError {
        let problem = error.to_string();
        match error {
            ModelError::Config { field, message } => ScenarioError::syntax(field, message),
            ModelError::Invalid { field, problem } => ScenarioError::field(field, problem),
            ModelError::Unsupported { .. } => ScenarioError::about("model.config", problem),
            ModelError::UnknownPreset { .. } => ScenarioError::about("model.preset", problem),
            ModelError::UnknownWeights { .. } => ScenarioError::about("model.weights", problem),
        }
    }
}

/// The closest of `candidates` to `name`, if it is close enough to be a likely typo.
pub(crate) fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let name = name.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&name, &c.to_ascii_lowercase()), c))
        .filter(|&(d, c)| d <= 2.max(c.len() / 4))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c.to_owned())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_near_misses_only() {
        let names = ["rtx-4090", "rtx-3090", "h100"];
        assert_eq!(closest("rtx4090", names), Some("rtx-4090".to_owned()));
        assert_eq!(closest("RTX-3090", names), Some("rtx-3090".to_owned()));
        assert_eq!(closest("banana", names), None);
    }

    #[test]
    fn messages_are_one_line() {
        let err = ModelError::UnknownPreset { name: "lama".into(), suggestion: Some("llama-3.1-8b".into()) };
        let text = err.to_string();
        assert!(!text.contains('\n'));
        assert!(text.contains("did you mean `llama-3.1-8b`"), "{text}");
    }
}
