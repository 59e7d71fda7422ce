//! Text from input is data: one quoting rule per place it is printed.
//!
//! Names reach shells (exported commands), YAML (Kubernetes manifests), comments in scripts
//! and terminals (tables, errors). A name comes from a scenario, a plan file or a model
//! file's own header (`general.name`), so it is untrusted: every exporter and renderer puts
//! it through one of these functions, and the tests parse the output back with readers we
//! did not write (`shlex`, yaml-rust2) to check that any string comes back as itself and
//! never adds a command.
//!
//! | where | function | guarantee |
//! |---|---|---|
//! | a shell word | [`shell()`] | one POSIX word whose value is exactly the input |
//! | a line of a comment, a terminal, an error | [`line()`] | no line break, escape or control character survives |
//! | terminal output of several lines | [`terminal()`] | as [`line()`], keeping `\n` (and tabs) |
//! | a YAML scalar | [`yaml()`] | a scalar that reads back as exactly the input string |

use std::borrow::Cow;
use std::fmt::Write;

/// A POSIX shell word that the shell reads back as exactly `word`: as it is when every
/// character is one no shell treats specially, else in single quotes (inside which nothing
/// is special), with each `'` written as `'\''`.
///
/// # Examples
/// ```
/// use stageplan::quote::shell;
/// assert_eq!(shell("model.gguf"), "model.gguf");
/// assert_eq!(shell("$(id)"), "'$(id)'");
/// assert_eq!(shell("it's"), r"'it'\''s'");
/// ```
pub fn shell(word: &str) -> Cow<'_, str> {
    // `=` only after the first character, so a word is never read as an assignment's name;
    // `%`, `+`, `@`, `:`, `,` are plain in every POSIX shell and in bash and zsh.
    let plain = |(i, c): (usize, char)| c.is_ascii_alphanumeric() || "-_./:,+@%".contains(c) || (c == '=' && i > 0);
    if !word.is_empty() && word.char_indices().all(plain) && !word.starts_with('-') {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// Characters that must not reach a terminal or a comment raw: C0 and C1 controls and DEL
/// (ESC starts terminal escapes, CR rewrites a line), line and paragraph separators (line
/// breaks to YAML 1.1 and some editors), and the bidirectional overrides and isolates that
/// make text display in another order than it is read ("Trojan Source").
pub fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` on one line, with every line break, control, separator and bidi character
/// written as a visible escape (`\n`, `\u001b`): for comments in exported scripts, table
/// cells and one-line error messages. The escapes are JSON's, so text that is JSON stays
/// JSON with the same value: these characters only occur inside its strings.
///
/// # Examples
/// ```
/// use stageplan::quote::line;
/// assert_eq!(line("x\nrm -rf ~ #"), r"x\nrm -rf ~ #");
/// assert_eq!(line("\u{1b}]0;title\u{7}"), r"\u001b]0;title\u0007");
/// ```
pub fn line(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// Several lines of output for a terminal, or a JSON document: as [`line()`], but `\n` and
/// tabs stay.
pub fn terminal(text: &str) -> Cow<'_, str> {
    escape(text, |c| matches!(c, '\n' | '\t'))
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| unsafe_char(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if keep(c) || !unsafe_char(c) => out.push(c),
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            // Every such character is in the Basic Multilingual Plane: four digits.
            c => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// A YAML scalar that any YAML 1.1 or 1.2 reader reads back as exactly the string `text`:
/// plain when it cannot be mistaken for anything else (`stage-1`, `registry.example.com/img`),
/// else double-quoted with every control, separator and non-printable character escaped.
///
/// # Examples
/// ```
/// use stageplan::quote::yaml;
/// assert_eq!(yaml("desk"), "desk");
/// assert_eq!(yaml("yes"), "\"yes\"");
/// assert_eq!(yaml("a\nb"), r#""a\nb""#);
/// ```
pub fn yaml(text: &str) -> Cow<'_, str> {
    let plain = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && text.starts_with(|c: char| c.is_ascii_alphabetic())
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        );
    if plain {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // YAML's printable set excludes these; escape them as code points.
            c if unsafe_char(c) || !yaml_printable(c) => {
                let code = u32::from(c);
                let _ = if code <= 0xffff { write!(out, "\\u{code:04X}") } else { write!(out, "\\U{code:08X}") };
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// YAML 1.2's `c-printable` (§5.1), which a double-quoted scalar may hold raw.
fn yaml_printable(c: char) -> bool {
    matches!(u32::from(c), 0x9 | 0xA | 0xD | 0x20..=0x7E | 0x85 | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Strings that stress every rule: shell syntax, quotes, controls, separators, bidi.
    fn hostile() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "$(id)",
            "`id`",
            ";",
            "|",
            "&&",
            ">",
            "<",
            "'",
            "\"",
            "\\",
            "\n",
            "\r",
            "\t",
            "\u{1b}[2J",
            "\u{1b}]0;x\u{7}",
            "#",
            " ",
            "*",
            "?",
            "[a]",
            "~",
            "{a,b}",
            "!",
            "=",
            "-",
            "--x",
            "\u{0}",
            "\u{85}",
            "\u{2028}",
            "\u{202e}",
            "\u{feff}",
            "é",
            "日本",
            "🙂",
            "yes",
            "null",
            "0x1F",
            "1e3",
            ": ",
            "- ",
            "&a",
            "*a",
            "%",
            "@",
        ]);
        prop_oneof![prop::collection::vec(pieces, 0..8).prop_map(|p| p.concat()), any::<String>(), "[ -~]{0,24}",]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Any string, quoted, is one shell word that reads back as itself.
        #[test]
        fn shell_words_read_back_as_themselves(text in hostile()) {
            prop_assume!(!text.contains('\0'));
            let quoted = shell(&text);
            let words = shlex::split(&format!("cmd {quoted} end"));
            prop_assert_eq!(words, Some(vec!["cmd".to_owned(), text.clone(), "end".to_owned()]));
        }

        /// A line never breaks and never carries a control character.
        #[test]
        fn lines_stay_one_line(text in hostile()) {
            let out = line(&text);
            prop_assert!(!out.chars().any(unsafe_char), "{out:?}");
            prop_assert_eq!(out.lines().count().max(1), 1);
        }

        /// Terminal text keeps its lines and nothing else that a terminal acts on.
        #[test]
        fn terminal_text_keeps_only_newlines_and_tabs(text in hostile()) {
            let out = terminal(&text);
            prop_assert!(!out.chars().any(|c| unsafe_char(c) && c != '\n' && c != '\t'), "{out:?}");
            prop_assert_eq!(out.matches('\n').count(), text.matches('\n').count());
        }

        /// A YAML scalar reads back as exactly the string, as a string.
        #[test]
        fn yaml_scalars_read_back_as_themselves(text in hostile()) {
            let document = format!("key: {}\nother: 1\n", yaml(&text));
            let docs = yaml_rust2::YamlLoader::load_from_str(&document).map_err(|e| TestCaseError::fail(format!("{e}: {document}")))?;
            prop_assert_eq!(docs.len(), 1);
            prop_assert_eq!(docs[0]["key"].as_str(), Some(text.as_str()), "{}", document);
            prop_assert_eq!(docs[0]["other"].as_i64(), Some(1));
        }
    }

    /// JSON with control characters in its strings (serde_json leaves DEL and C1 raw) stays
    /// JSON with the same values.
    #[test]
    fn terminal_text_of_json_is_the_same_json() {
        let value = serde_json::json!({"name": "a\u{7f}b\u{85}c\u{202e}d\u{1b}", "n": [1, 2]});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let cleaned = terminal(&text);
        assert_ne!(cleaned, text);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&cleaned).unwrap(), value);
    }

    #[test]
    fn plain_words_stay_plain() {
        for word in ["desk", "192.168.1.20:50052", "llama-3.1-70b-q4_k_m.gguf", "CUDA0,RPC0", "a=b"] {
            assert_eq!(shell(word), word);
        }
        for word in ["", "-rf", "=x", "a b", "~", "*", "[::1]:1"] {
            assert!(shell(word).starts_with('\''), "{word}");
        }
    }
}
