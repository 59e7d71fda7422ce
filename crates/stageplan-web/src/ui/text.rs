//! Text the page shows or hands over, which every panel uses: a core message set as prose
//! with its names and values as code, a name set apart from the text around it, text shown
//! as the CLI prints it, and a text saved as a file.
//!
//! Names come from the scenario, a share link or a model file: a right-to-left override
//! (U+202E) or a Hebrew letter at the end of one must not reorder what the page draws after
//! it (`0–32` shown as `23–0`). Each name is drawn in its own `<bdi>` (or `<code>`, which the
//! style sheet isolates as it does `bdi`), so the bidirectional algorithm keeps it to itself.
//! Where a name is written into a line of the page's own (a dropped file's, a fitted
//! machine's) it is escaped as the CLI escapes it ([`stageplan::quote::line`]) instead.

use std::borrow::Cow;

use leptos::prelude::*;
use stageplan::quote::{line, unsafe_char};
use stageplan::view::code_spans;
use wasm_bindgen::JsCast;

/// A core message with its backticked names and values set as code (isolated by the style
/// sheet). The core's own words hold no bidirectional or control character: where one is in
/// them, a name's backticks did not pair up (a name holding a backtick), so it is shown
/// escaped, as the CLI shows it, rather than reordering the message.
pub(crate) fn prose(text: &str) -> impl IntoView + use<> {
    code_spans(text)
        .into_iter()
        .map(|(code, part)| {
            if code {
                view! { <code>{part}</code> }.into_any()
            } else if part.chars().any(unsafe_char) {
                line(&part).into_owned().into_any()
            } else {
                part.into_any()
            }
        })
        .collect_view()
}

/// `name` set apart from the text around it.
pub(crate) fn name(name: String) -> impl IntoView + use<> {
    view! { <bdi>{name}</bdi> }
}

/// `text` that begins with `node` (the core's `node · 0–32`), the name set apart from the
/// rest; all of it as the rest otherwise.
pub(crate) fn named(text: &str, node: &str) -> impl IntoView + use<> {
    let (node, rest) = split_name(text, node);
    view! { <bdi>{node.to_owned()}</bdi>{rest.to_owned()} }
}

/// `text` split into `node` and what follows it, where it begins with a node's name; `""`
/// and all of it otherwise.
fn split_name<'t>(text: &'t str, node: &'t str) -> (&'t str, &'t str) {
    match text.strip_prefix(node) {
        Some(rest) if !node.is_empty() => (node, rest),
        _ => ("", text),
    }
}

/// `text` that begins with `node`, for an attribute (a tooltip), where no element can set
/// the name apart: the name between FIRST STRONG ISOLATE and POP DIRECTIONAL ISOLATE, the
/// characters that do what `<bdi>` does.
pub(crate) fn named_attribute(text: &str, node: &str) -> String {
    match split_name(text, node) {
        ("", text) => text.to_owned(),
        (node, rest) => format!("\u{2068}{node}\u{2069}{rest}"),
    }
}

/// Text the CLI prints (a scenario or plan as JSON, an export) as the CLI prints it: every
/// control, line-separator and bidirectional character written as its JSON escape, line
/// breaks and tabs kept. JSON stays JSON with the same value.
pub(crate) fn as_printed(text: &str) -> Cow<'_, str> {
    stageplan::quote::terminal(text)
}

/// Downloads `text` as a file.
pub(crate) fn download(name: &str, text: &str) {
    let Some(document) = web_sys::window().and_then(|w| w.document()) else { return };
    let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type("application/json");
    let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options) else { return };
    let Ok(url) = web_sys::Url::create_object_url_with_blob(&blob) else { return };
    if let Ok(anchor) = document.create_element("a") {
        let anchor: web_sys::HtmlAnchorElement = anchor.unchecked_into();
        anchor.set_href(&url);
        anchor.set_download(name);
        anchor.click();
    }
    let _ = web_sys::Url::revoke_object_url(&url);
}
