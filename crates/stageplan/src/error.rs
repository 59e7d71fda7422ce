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
    if field.is_empty() || field == "." { prefix.to_owned() } else { format!("{prefix}.{field}") }
}

pub(crate) fn suggest(suggestion: Option<&str>) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean `{s}`?)"),
        None => String::new(),
    }
}

/// A scenario that cannot be planned as written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// The text is not JSON, or a field has the wrong shape.
    #[error("{0}")]
    Syntax(String),
    /// A field is present but wrong; `field` is its JSON path (`nodes[1].memory`).
    #[error("`{field}` {problem}")]
    Field { field: String, problem: String },
    /// The model part failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

impl ScenarioError {
    pub(crate) fn field(field: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
        ScenarioError::Field { field: field.into(), problem: problem.into() }
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
