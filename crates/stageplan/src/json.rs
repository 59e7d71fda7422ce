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

/// The value at `path` (as [`path_at`] writes paths: `nodes[2].memory`) in `document`; `None`
/// when nothing is there. A key holding `.` or `[` cannot be told from a path's own
/// punctuation: such a path finds nothing.
pub(crate) fn value_at<'a>(document: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    let mut value = document;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let (index, after) = after.split_once(']')?;
            value = value.get(index.parse::<usize>().ok()?)?;
            rest = after;
        } else {
            let key_part = rest.strip_prefix('.').unwrap_or(rest);
            let end = key_part.find(['.', '[']).unwrap_or(key_part.len());
            value = value.get(&key_part[..end])?;
            rest = &key_part[end..];
        }
    }
    Some(value)
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
        /// scenario files broken at random: a byte range cut out, or a value replaced.
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
            let reference: Result<crate::Scenario, _> = serde_path_to_error::deserialize(&mut *de);
            let ours = from_str::<crate::Scenario>(&broken);
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

    /// A proptest case: an object where an enum's name was expected is the field's problem,
    /// as a tracking deserializer says, not the object's first key's.
    #[test]
    fn an_unknown_variant_is_the_fields_whether_a_string_or_an_object() {
        for (policy, path) in [(r#""bogus""#, "policy"), (r#"{"name": "a", "device": "x"}"#, "policy")] {
            let text = format!(r#"{{"model": {{"preset": "llama-3.1-8b"}}, "nodes": [], "policy": {policy}}}"#);
            assert_eq!(from_str::<crate::Scenario>(&text).unwrap_err().0, path, "{text}");
        }
    }

    #[test]
    fn values_are_found_at_their_paths() {
        let document: serde_json::Value =
            serde_json::from_str(r#"{"nodes": [{"name": "a"}, {"name": "b", "memory": "x", "tags": [1, 2]}]}"#)
                .unwrap();
        for (path, value) in [
            ("nodes[1].memory", Some("\"x\"")),
            ("nodes[1].tags[1]", Some("2")),
            ("nodes[0]", Some(r#"{"name":"a"}"#)),
            ("nodes[2]", None),
            ("nodes[x]", None),
            ("nodes.memory", None),
            ("nodes[1", None),
        ] {
            assert_eq!(value_at(&document, path).map(ToString::to_string).as_deref(), value, "{path}");
        }
        assert_eq!(value_at(&document, ""), Some(&document));
    }

    #[test]
    fn positions_past_the_end_and_empty_input_are_safe() {
        assert_eq!(path_at("", 1, 10, End::Eof), "");
        assert_eq!(path_at("{\"a\": [", 9, 99, End::Eof), "a");
        assert_eq!(path_at("{\"a\": [1", 9, 99, End::Value), "a[0]");
        assert_eq!(path_at("\"unterminated", 1, 13, End::Eof), "");
    }
}
