//! Text the page shows or hands over, which every panel uses: a core message set as prose
//! with its names and values as code, and a text saved as a file.

use leptos::prelude::*;
use stageplan::view::code_spans;
use wasm_bindgen::JsCast;

/// A core message with its backticked names and values set as code.
pub(crate) fn prose(text: &str) -> impl IntoView + use<> {
    code_spans(text)
        .into_iter()
        .map(|(code, part)| if code { view! { <code>{part}</code> }.into_any() } else { part.into_any() })
        .collect_view()
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
