//! Rust source read as the checks need it: tokens with their lines, comments dropped and
//! each literal one token; test code left out; then what the rest declares (modules),
//! names (paths from `crate`, `super`, `self`) and defines (constants).

/// A word, a punctuation mark (`::` is one) or a literal (`"`, `'`), with its line.
#[derive(Clone, Debug)]
pub(super) struct Token {
    text: String,
    line: usize,
}

impl Token {
    fn is(&self, text: &str) -> bool {
        self.text == text
    }

    fn is_word(&self) -> bool {
        self.text.starts_with(|c: char| c.is_alphabetic() || c == '_')
    }
}

/// Rust source as tokens, comments dropped and each literal one token.
pub(super) fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips a string whose opening quote is at `i`, `hashes` `#` after its closing one.
    let skip_string = |mut i: usize, hashes: usize, raw: bool, line: &mut usize| {
        i += 1;
        while i < chars.len() {
            match chars[i] {
                '\\' if !raw => {
                    *line += usize::from(at(i + 1) == '\n');
                    i += 2;
                    continue;
                }
                '"' if (1..=hashes).all(|k| at(i + k) == '#') => return i + 1 + hashes,
                '\n' => *line += 1,
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        let start_line = line;
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let hashes = chars[i..].iter().take_while(|c| **c == '#').count();
            if matches!(word.as_str(), "r" | "br" | "cr") && at(i + hashes) == '"' {
                i = skip_string(i + hashes, hashes, true, &mut line);
                tokens.push(Token { text: "\"".into(), line: start_line });
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(i, 0, false, &mut line);
                tokens.push(Token { text: "\"".into(), line: start_line });
            } else if word == "b" && at(i) == '\'' {
                i = skip_char(&chars, i);
                tokens.push(Token { text: "'".into(), line: start_line });
            } else {
                tokens.push(Token { text: word, line: start_line });
            }
        } else if c == '"' {
            i = skip_string(i, 0, false, &mut line);
            tokens.push(Token { text: "\"".into(), line: start_line });
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            i = skip_char(&chars, i);
            tokens.push(Token { text: "'".into(), line: start_line });
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token { text: "::".into(), line });
            i += 2;
        } else {
            // A lifetime's quote lands here too: a mark of its own, its name a word.
            tokens.push(Token { text: c.into(), line });
            i += 1;
        }
    }
    tokens
}

/// Skips a character literal whose opening quote is at `i`.
fn skip_char(chars: &[char], mut i: usize) -> usize {
    i += 1;
    if chars.get(i) == Some(&'\\') {
        i += 2;
    } else {
        i += 1;
    }
    while i < chars.len() && chars[i] != '\'' {
        i += 1;
    }
    i + 1
}

/// The index of the bracket closing the one at `open` (the last token if none does).
fn closing(tokens: &[Token], open: usize) -> usize {
    let (open_text, close_text) = match tokens[open].text.as_str() {
        "(" => ("(", ")"),
        "[" => ("[", "]"),
        _ => ("{", "}"),
    };
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        if token.is(open_text) {
            depth += 1;
        } else if token.is(close_text) {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
    }
    tokens.len() - 1
}

/// The tokens without test code (items under `#[cfg(test)]` or `#[cfg(all(test, …))]`; none
/// when the file says `#![cfg(test)]`), and the modules declared for tests only.
pub(super) fn without_tests(tokens: &[Token]) -> (Vec<Token>, Vec<String>) {
    let mut kept = Vec::new();
    let mut test_modules = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let inner = tokens.get(i + 1).is_some_and(|t| t.is("!"));
        let open = i + 1 + usize::from(inner);
        if tokens[i].is("#") && tokens.get(open).is_some_and(|t| t.is("[")) {
            let close = closing(tokens, open);
            if is_test_cfg(&tokens[open + 1..close]) {
                if inner {
                    return (Vec::new(), Vec::new());
                }
                // Further attributes, then the item up to its `;` or through its braces.
                let mut k = close + 1;
                while k + 1 < tokens.len() && tokens[k].is("#") && tokens[k + 1].is("[") {
                    k = closing(tokens, k + 1) + 1;
                }
                let item = k;
                while k < tokens.len() && !tokens[k].is(";") && !tokens[k].is("{") {
                    k = if tokens[k].is("(") || tokens[k].is("[") { closing(tokens, k) + 1 } else { k + 1 };
                }
                if k < tokens.len() && tokens[k].is("{") {
                    k = closing(tokens, k);
                }
                let words: Vec<&str> =
                    tokens[item..k.min(tokens.len())].iter().map(|t| t.text.as_str()).filter(|t| *t != "pub").collect();
                if let [.., "mod", name] = words.as_slice()
                    && tokens.get(k).is_some_and(|t| t.is(";"))
                {
                    test_modules.push((*name).to_owned());
                }
                i = k + 1;
                continue;
            }
        }
        kept.push(tokens[i].clone());
        i += 1;
    }
    (kept, test_modules)
}

/// `cfg(test)` or `cfg(all(…, test, …))`: code that exists only in tests.
fn is_test_cfg(attribute: &[Token]) -> bool {
    let words: Vec<&str> = attribute.iter().map(|t| t.text.as_str()).collect();
    match words.as_slice() {
        ["cfg", "(", "test", ")"] => true,
        ["cfg", "(", "all", "(", rest @ ..] => {
            let mut depth = 0;
            let mut argument = Vec::new();
            for word in rest {
                match *word {
                    "(" => depth += 1,
                    ")" if depth == 0 => return argument == ["test"],
                    ")" => depth -= 1,
                    "," if depth == 0 => {
                        if argument == ["test"] {
                            return true;
                        }
                        argument.clear();
                        continue;
                    }
                    _ => {}
                }
                argument.push(*word);
            }
            false
        }
        _ => false,
    }
}

/// What a file's code names and defines.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// Modules its `mod` items declare, relative to the file's module.
    pub(super) declared: Vec<Vec<String>>,
    /// Paths from `crate`, `super` or `self`.
    pub(super) paths: Vec<NamedPath>,
    /// Names its `pub use` items give to paths elsewhere (re-exports).
    pub(super) reexports: Vec<Reexport>,
    /// Constants that are not associated with a type: line and name.
    pub(super) consts: Vec<(usize, String)>,
}

#[derive(Debug)]
pub(super) struct NamedPath {
    pub(super) line: usize,
    /// The inline modules (`mod m { … }`) the path is in.
    pub(super) inline: Vec<String>,
    pub(super) segments: Vec<String>,
    /// Called (`…(`) or a macro (`…!`): its last segment is an item, never a module.
    pub(super) value: bool,
}

/// A name a `pub use` gives to a path: `pub use planner::{plan as run}` names `run` for
/// `planner::plan`, in the module (and inline modules) where it stands.
#[derive(Debug)]
pub(super) struct Reexport {
    pub(super) inline: Vec<String>,
    pub(super) name: String,
    /// As written: from `crate`, `super` or `self`, or from a child module.
    pub(super) segments: Vec<String>,
}

/// What an open brace holds.
#[derive(Debug, PartialEq)]
enum Block {
    /// An `impl` or a `trait`: its constants are associated.
    Impl,
    Module(String),
    Other,
}

pub(super) fn scan(tokens: &[Token]) -> Scan {
    let mut scan = Scan::default();
    let mut blocks: Vec<Block> = Vec::new();
    let inline = |blocks: &[Block]| -> Vec<String> {
        blocks.iter().filter_map(|b| if let Block::Module(m) = b { Some(m.clone()) } else { None }).collect()
    };
    let word = |i: usize| tokens.get(i).filter(|t| t.is_word()).map(|t| t.text.as_str());
    let (mut i, mut item) = (0, 0);
    while i < tokens.len() {
        let token = &tokens[i];
        let previous = i.checked_sub(1).map(|p| tokens[p].text.as_str());
        match token.text.as_str() {
            "{" => {
                blocks.push(block(&tokens[item..i]));
                item = i + 1;
            }
            "}" => {
                blocks.pop();
                item = i + 1;
            }
            ";" => item = i + 1,
            "mod" => {
                if let Some(name) = word(i + 1)
                    && tokens.get(i + 2).is_some_and(|t| t.is(";") || t.is("{"))
                {
                    scan.declared.push([inline(&blocks), vec![name.to_owned()]].concat());
                }
            }
            "const" => {
                let item_start = previous.is_none_or(|p| matches!(p, ";" | "{" | "}" | "]" | ")" | "pub"));
                if let Some(name) = word(i + 1)
                    && item_start
                    && tokens.get(i + 2).is_some_and(|t| t.is(":"))
                    && name != "_"
                    && blocks.last() != Some(&Block::Impl)
                {
                    scan.consts.push((token.line, name.to_owned()));
                }
            }
            "use" if is_public(&tokens[..i]) => {
                for (segments, name) in use_tree(tokens, i + 1, &[]).0 {
                    scan.reexports.push(Reexport { inline: inline(&blocks), name, segments });
                }
            }
            "crate" | "super" | "self" if previous != Some("::") && tokens.get(i + 1).is_some_and(|t| t.is("::")) => {
                let (paths, end) = path_tree(tokens, i, &[]);
                let value = paths.len() == 1 && tokens.get(end).is_some_and(|t| t.is("(") || t.is("!"));
                for segments in paths {
                    scan.paths.push(NamedPath { line: token.line, inline: inline(&blocks), segments, value });
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    scan
}

/// Whether the item ending at `before`'s end is public: `pub`, or `pub(…)`.
fn is_public(before: &[Token]) -> bool {
    match before.last() {
        Some(t) if t.is("pub") => true,
        Some(t) if t.is(")") => {
            let open = before.iter().rposition(|t| t.is("("));
            open.is_some_and(|o| o > 0 && before[o - 1].is("pub"))
        }
        _ => false,
    }
}

/// The paths a `use` tree starting at `start` binds, each with the name it binds (its last
/// segment, or its `as` name; `self` in a group binds the group's path), after `prefix`;
/// globs and `as _` bind no name. And the index after it.
fn use_tree(tokens: &[Token], start: usize, prefix: &[String]) -> (Vec<(Vec<String>, String)>, usize) {
    let mut segments = prefix.to_vec();
    let mut i = start;
    while let Some(token) = tokens.get(i) {
        if token.is("{") {
            let close = closing(tokens, i);
            let mut bound = Vec::new();
            i += 1;
            while i < close {
                if tokens[i].is_word() || tokens[i].is("{") {
                    let (inner, end) = use_tree(tokens, i, &segments);
                    bound.extend(inner);
                    i = end;
                }
                while i < close && !tokens[i].is(",") {
                    i = if tokens[i].is("{") { closing(tokens, i) + 1 } else { i + 1 };
                }
                i += 1;
            }
            return (bound, close + 1);
        }
        if !token.is_word() {
            return (Vec::new(), i + 1); // a glob
        }
        segments.push(token.text.clone());
        i += 1;
        if !tokens.get(i).is_some_and(|t| t.is("::")) {
            break;
        }
        i += 1;
    }
    let mut name = segments.last().cloned().unwrap_or_default();
    if tokens.get(i).is_some_and(|t| t.is("as")) {
        name = tokens.get(i + 1).map(|t| t.text.clone()).unwrap_or_default();
        i += 2;
    }
    if segments.last().is_some_and(|s| s == "self") {
        segments.pop();
        if name == "self" {
            name = segments.last().cloned().unwrap_or_default();
        }
    }
    if name == "_" || name.is_empty() {
        return (Vec::new(), i);
    }
    (vec![(segments, name)], i)
}

/// What the brace after `header` (an item's tokens up to it) opens.
fn block(header: &[Token]) -> Block {
    let mut i = 0;
    while i < header.len() {
        let text = header[i].text.as_str();
        if text == "#" {
            let open = i + 1 + usize::from(header.get(i + 1).is_some_and(|t| t.is("!")));
            i = if header.get(open).is_some_and(|t| t.is("[")) { closing(header, open) + 1 } else { i + 1 };
        } else if text == "pub" && header.get(i + 1).is_some_and(|t| t.is("(")) {
            i = closing(header, i + 1) + 1;
        } else if matches!(text, "pub" | "unsafe" | "default") {
            i += 1;
        } else {
            return match text {
                "impl" | "trait" => Block::Impl,
                "mod" => header.get(i + 1).map_or(Block::Other, |name| Block::Module(name.text.clone())),
                _ => Block::Other,
            };
        }
    }
    Block::Other
}

/// The paths a path starting at `start` names, a use group naming several
/// (`crate::{a, b::{c, d}}`), each after `prefix`; and the index after it.
fn path_tree(tokens: &[Token], start: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut segments = prefix.to_vec();
    let mut i = start;
    while let Some(token) = tokens.get(i).filter(|t| t.is_word()) {
        segments.push(token.text.clone());
        i += 1;
        if !tokens.get(i).is_some_and(|t| t.is("::")) {
            break;
        }
        i += 1;
        match tokens.get(i).map(|t| t.text.as_str()) {
            Some("{") => {
                let close = closing(tokens, i);
                let mut paths = Vec::new();
                i += 1;
                while i < close {
                    if tokens[i].is_word() {
                        let (inner, end) = path_tree(tokens, i, &segments);
                        paths.extend(inner);
                        i = end;
                    }
                    // Past `as name` and to the next entry.
                    while i < close && !tokens[i].is(",") {
                        i = if tokens[i].is("{") { closing(tokens, i) + 1 } else { i + 1 };
                    }
                    i += 1;
                }
                return (paths, close + 1);
            }
            Some(word) if word.starts_with(|c: char| c.is_alphabetic() || c == '_') => {}
            _ => break, // `*`, a turbofish
        }
    }
    (vec![segments], i)
}
