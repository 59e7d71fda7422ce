//! JSON with the path of the field an error is about (`nodes[1].memory`).
//!
//! serde_json reports where an error happened as a line and column. Instead of tracking the
//! path while deserializing (a wrapper that doubles every `Deserialize` instantiation, a
//! third of the planner's WebAssembly), [`path_at`] recovers it afterwards by scanning the
//! text up to that position: only the error path pays, and only once.

use serde::de::DeserializeOwned;
use serde_json::error::Category;

/// What kind of place the error is at, which settles the edge cases as a deserializer that
/// tracks the path would.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// In or right after a value (a wrong type, an unknown key): the entry is the problem.
    Value,
    /// Between a key and its value (no colon yet, a key given twice): the object is.
    BeforeValue,
    /// At a character that breaks the syntax (which the column points at, so it is not
    /// scanned); as `BeforeValue` otherwise.
    Syntax,
    /// Right after a name (an unknown key); serde_json may have peeked past it, so the scan
    /// stops at the end of the last string.
    Name,
    /// Right after an unknown variant: as `Name`, but a variant written as an object's key
    /// (`{"name": …}` where a string was expected) is the enclosing value's problem.
    Variant,
    /// The text ended: the innermost container left open is.
    Eof,
}

/// Deserializes `text`; on error, the JSON path at the error's position (empty at the root)
/// and serde_json's message.
///
/// # Errors
/// The text is not JSON, or not the shape `T` expects.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, (String, serde_json::Error)> {
    serde_json::from_str(text).map_err(|e| {
        let message = e.to_string();
        let end = match e.classify() {
            Category::Eof => End::Eof,
            Category::Syntax => End::Syntax,
            // A key read twice is the object's problem; an unknown key is its own.
            _ if message.starts_with("duplicate field") => End::BeforeValue,
            _ if message.starts_with("unknown field") => End::Name,
            _ if message.starts_with("unknown variant") => End::Variant,
            _ => End::Value,
        };
        (path_at(text, e.line(), e.column(), end), e)
    })
}

/// One open container while scanning.
enum Frame {
    /// The key being read or whose value is being read; `None` between entries.
    Object { key: Option<String>, expect_key: bool, colon: bool, value_started: bool },
    /// The element index, and whether that element has started.
    Array { index: usize, started: bool },
}

/// The path of the value being read at (1-based) `line` and byte `column`, as serde reports
/// them: keys as `.key` (no dot first), elements as `[i]`; empty at the root.
pub(crate) fn path_at(text: &str, line: usize, column: usize, end_kind: End) -> String {
    let start_of_line: usize = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    let mut end = (start_of_line + column).min(text.len());
    match end_kind {
        End::Name | End::Variant => {
            end = text.as_bytes()[..end].iter().rposition(|&b| b == b'"').map_or(end, |quote| quote + 1);
        }
        End::Syntax => end = end.saturating_sub(1),
        _ => {}
    }
    // A column can land inside a multi-byte character; the scan slices `text`, so end on a
    // character boundary (the scenario fuzz target found this one).
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let bytes = &text.as_bytes()[..end];
    let mut stack: Vec<Frame> = Vec::new();
    // Whether the scan ended inside a string.
    let mut open_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // A value starts here when an array is waiting for its next element, or an object
        // for the value of the key just read.
        match stack.last_mut() {
            Some(Frame::Array { started, .. }) if !*started && b != b']' && b != b',' => *started = true,
            Some(Frame::Object { colon: true, value_started, .. }) if !*value_started && b != b',' && b != b'}' => {
                *value_started = true;
            }
            _ => {}
        }
        match b {
            b'"' => {
                let close = string_end(bytes, i).unwrap_or_else(|| {
                    open_string = true;
                    bytes.len()
                });
                if let Some(Frame::Object { key, expect_key, .. }) = stack.last_mut()
                    && *expect_key
                {
                    let raw = &text[i..close.min(bytes.len())];
                    *key =
                        Some(serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw.trim_matches('"').to_owned()));
                    *expect_key = false;
                }
                i = close;
                continue;
            }
            b'{' => stack.push(Frame::Object { key: None, expect_key: true, colon: false, value_started: false }),
            b':' => {
                if let Some(Frame::Object { colon, .. }) = stack.last_mut() {
                    *colon = true;
                }
            }
            b'[' => stack.push(Frame::Array { index: 0, started: false }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { key, expect_key, colon, value_started }) => {
                    *key = None;
                    *expect_key = true;
                    *colon = false;
                    *value_started = false;
                }
                Some(Frame::Array { index, started }) => {
                    *index += 1;
                    *started = false;
                }
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    match (end_kind, stack.last_mut()) {
        // The text ended after a complete entry: the container it is in never closed. (A
        // value cut short, or missing after its colon, is still the entry's.)
        (End::Eof, Some(Frame::Object { key, colon, value_started, .. }))
            if !(*colon && (!*value_started || open_string)) =>
        {
            *key = None;
        }
        (End::Eof, Some(Frame::Array { started, .. })) if !open_string => *started = false,
        (End::BeforeValue | End::Syntax | End::Variant, Some(Frame::Object { key, colon: false, .. })) => *key = None,
        // serde_json may stop just before the value it rejects (having only peeked at it).
        (End::Value | End::Syntax, Some(Frame::Array { started, .. })) => *started = true,
        _ => {}
    }
    let mut path = String::new();
    for frame in &stack {
        match frame {
            Frame::Object { key: Some(key), .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Frame::Array { index, started: true } => path.push_str(&format!("[{index}]")),
            _ => break,
        }
    }
    path
}

/// The text of the value at `path` (as [`path_at`] writes paths: `nodes[2].memory`) in the
/// JSON `text`, exactly as written; `None` when nothing is there or the text breaks first.
/// A scan, not a parse into `serde_json::Value`: the page and the widget ship without one.
pub(crate) fn value_text_at<'a>(text: &'a str, path: &str) -> Option<&'a str> {
    let bytes = text.as_bytes();
    let mut at = skip_space(bytes, 0);
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let (index, after) = after.split_once(']')?;
            let index: usize = index.parse().ok()?;
            rest = after;
            (bytes.get(at) == Some(&b'[')).then_some(())?;
            at = skip_space(bytes, at + 1);
            for _ in 0..index {
                at = skip_space(bytes, skip_value(bytes, at)?);
                (bytes.get(at) == Some(&b',')).then_some(())?;
                at = skip_space(bytes, at + 1);
            }
            (bytes.get(at) != Some(&b']')).then_some(())?;
        } else {
            let key_part = rest.strip_prefix('.').unwrap_or(rest);
            let end = key_part.find(['.', '[']).unwrap_or(key_part.len());
            let wanted = &key_part[..end];
            rest = &key_part[end..];
            (bytes.get(at) == Some(&b'{')).then_some(())?;
            at = skip_space(bytes, at + 1);
            loop {
                (bytes.get(at) == Some(&b'"')).then_some(())?;
                let close = string_end(bytes, at)?;
                let key = serde_json::from_str::<String>(&text[at..close]).ok()?;
                at = skip_space(bytes, close);
                (bytes.get(at) == Some(&b':')).then_some(())?;
                at = skip_space(bytes, at + 1);
                if key == wanted {
                    break;
                }
                at = skip_space(bytes, skip_value(bytes, at)?);
                (bytes.get(at) == Some(&b',')).then_some(())?;
                at = skip_space(bytes, at + 1);
            }
        }
    }
    let end = skip_value(bytes, at)?;
    Some(&text[at..end])
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// The index just past the value that starts at `at` (a string, a container with what it
/// holds, or a scalar); `None` when the text ends first.
fn skip_value(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let len = bytes[at..].iter().position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace());
            Some(at + len.unwrap_or(bytes.len() - at))
        }
    }
}

/// The index just past the string that opens at `open`; `None` when the input ends first.
fn string_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Node {
        name: String,
        memory: Option<u64>,
        tags: Option<Vec<u32>>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        model: String,
        nodes: Vec<Node>,
    }

    fn error_path(text: &str) -> String {
        from_str::<Doc>(text).unwrap_err().0
    }

    #[test]
    fn errors_point_at_the_field() {
        for (text, path) in [
            (r#"{"model": "m", "nodes": [{"name": "a", "memory": "x"}]}"#, "nodes[0].memory"),
            (r#"{"model": "m", "nodes": [{"name": "a"}, {"name": "b", "memry": 1}]}"#, "nodes[1].memry"),
            (r#"{"model": "m", "nodes": [{"name": "a"}, {"memory": 1}]}"#, "nodes[1]"),
            (r#"{"model": "m", "nodes": [{"name": "a", "tags": [1, 2, -3]}]}"#, "nodes[0].tags[2]"),
            (r#"{"model": 5, "nodes": []}"#, "model"),
            ("{\"model\": \"m\",\n \"nodes\": [\n", "nodes"),
            (r#"{"model": "m", "nodes": [{"name": "a"}"#, "nodes"),
            (r#"{"model": "m", "nodes": [{"name": "a""#, "nodes[0]"),
            (r#"{"nodes": []}"#, ""),
            (r#"{"model": "a \"quoted\" [name", "nodes": [{"name": "x, y", "memory": true}]}"#, "nodes[0].memory"),
            (r#"{"model": "m", "nodes": [], }"#, ""),
            (r#"{"mo\u0064el": 1, "nodes": []}"#, "model"),
        ] {
            assert_eq!(error_path(text), path, "{text}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 4096, ..Default::default() })]

        /// Against serde_path_to_error (which tracks the path while deserializing) on
        /// scenario files broken at random, a byte range cut out or a value replaced, read
        /// as the scenario's reader reads them first: into a JSON tree, where a syntax error
        /// or a key given twice is found by position.
        #[test]
        fn paths_match_the_tracking_deserializer(
            file in 0usize..6,
            at in 0usize..4000,
            len in 0usize..40,
            replacement in proptest::sample::select(vec!["", "true", "-1", "\"x\"", "{}", "[]", "null", "1e999", "\"GiB\"", "\"extra\": 1,"]),
        ) {
            let files = [
                include_str!("../../../tests/scenarios/home-70b.json"),
                include_str!("../../../tests/scenarios/home-70b-8.json"),
                include_str!("../../../tests/scenarios/straggler-8b.json"),
                include_str!("../../../tests/scenarios/fast-small-slow-big.json"),
                include_str!("../../../tests/scenarios/rack-405b.json"),
                include_str!("../../../tests/cli/plan-manual/scenario.json"),
            ];
            let text = files[file];
            let start = at % text.len();
            let end = (start + len).min(text.len());
            if !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                return Ok(());
            }
            let broken = format!("{}{replacement}{}", &text[..start], &text[end..]);
            let de = &mut serde_json::Deserializer::from_str(&broken);
            let reference: Result<crate::scenario::Json, _> = serde_path_to_error::deserialize(&mut *de);
            let ours = from_str::<crate::scenario::Json>(&broken);
            // Trailing characters after the document are an error at the root.
            if reference.is_ok() && de.end().is_err() {
                proptest::prop_assert_eq!(ours.map(|_| ()).map_err(|e| e.0), Err(String::new()));
                return Ok(());
            }
            match (reference, ours) {
                (Ok(_), Ok(_)) => {}
                (Err(expected), Err((path, error))) => {
                    // An empty key at the root prints as nothing in both.
                    let expected = Some(expected.path().to_string()).filter(|p| !p.is_empty()).unwrap_or_else(|| ".".to_owned());
                    let path = if path.is_empty() { ".".to_owned() } else { path };
                    // Between entries the reference names the next, unread key `?`; and after
                    // a syntax error we may name the entry just read rather than its container.
                    let container = expected.split_once('?').map_or(expected.as_str(), |(c, _)| c).trim_end_matches(['.', '[']);
                    let inside = container.is_empty()
                        || container == "."
                        || path == container
                        || path.starts_with(&format!("{container}."))
                        || path.starts_with(&format!("{container}["));
                    if expected.contains('?') || error.classify() == Category::Syntax {
                        proptest::prop_assert!(inside, "{} is not inside {} ({})", path, expected, broken);
                    } else {
                        proptest::prop_assert_eq!(path, expected, "{}", broken);
                    }
                }
                (a, b) => proptest::prop_assert!(false, "one parsed, one did not: {:?} vs {:?}", a.err(), b.err().map(|e| e.0)),
            }
        }
    }

    #[test]
    fn values_are_found_at_their_paths_as_written() {
        let text = r#"{"nodes": [{"name": "a"}, {"name": "b\"]", "memory": "x", "tags": [1, 2e3]}], "n": 7 }"#;
        for (path, value) in [
            ("nodes[1].memory", Some("\"x\"")),
            ("nodes[1].tags[1]", Some("2e3")),
            ("nodes[0]", Some(r#"{"name": "a"}"#)),
            ("nodes[1].name", Some(r#""b\"]""#)),
            ("n", Some("7")),
            ("nodes[2]", None),
            ("nodes[x]", None),
            ("nodes.memory", None),
            ("nodes[1", None),
            ("missing", None),
        ] {
            assert_eq!(value_text_at(text, path), value, "{path}");
        }
        assert_eq!(value_text_at(text, ""), Some(text.trim_end()));
        assert_eq!(value_text_at(r#"{"a": [1, "#, "a[1]"), None, "the text ends first");
    }

    proptest::proptest! {
        /// Against serde_json's own tree: every path of a scenario file finds the text that
        /// parses to the value there.
        #[test]
        fn the_text_found_is_the_value_serde_json_finds(file in 0usize..3, pick in 0usize..10_000) {
            let files = [
                include_str!("../../../tests/scenarios/home-70b.json"),
                include_str!("../../../tests/scenarios/rack-405b.json"),
                include_str!("../../../tests/cli/plan-manual/scenario.json"),
            ];
            let text = files[file];
            let document: serde_json::Value = serde_json::from_str(text).unwrap();
            let mut paths = Vec::new();
            fn walk(value: &serde_json::Value, path: &str, out: &mut Vec<(String, serde_json::Value)>) {
                out.push((path.to_owned(), value.clone()));
                match value {
                    serde_json::Value::Object(map) => map.iter().for_each(|(k, v)| {
                        walk(v, &if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, out);
                    }),
                    serde_json::Value::Array(items) => {
                        items.iter().enumerate().for_each(|(i, v)| walk(v, &format!("{path}[{i}]"), out));
                    }
                    _ => {}
                }
            }
            walk(&document, "", &mut paths);
            let (path, expected) = &paths[pick % paths.len()];
            let found = value_text_at(text, path).map(|t| serde_json::from_str::<serde_json::Value>(t).unwrap());
            proptest::prop_assert_eq!(found.as_ref(), Some(expected), "{}", path);
        }
    }

    #[test]
    fn positions_past_the_end_and_empty_input_are_safe() {
        assert_eq!(path_at("", 1, 10, End::Eof), "");
        assert_eq!(path_at("{\"a\": [", 9, 99, End::Eof), "a");
        assert_eq!(path_at("{\"a\": [1", 9, 99, End::Value), "a[0]");
        assert_eq!(path_at("\"unterminated", 1, 13, End::Eof), "");
    }
}
