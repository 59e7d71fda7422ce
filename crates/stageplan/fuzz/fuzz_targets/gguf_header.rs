//! GGUF headers from untrusted bytes: parse any prefix, with and without the file length,
//! and build a model from whatever parses. Must never panic or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stageplan::import::{self, Parse, gguf};

fuzz_target!(|data: &[u8]| {
    for file_len in [Some(data.len() as u64), None] {
        if let Ok(Parse::Done(header)) = gguf::parse(data, file_len) {
            assert!(header.data_offset <= data.len() as u64 + header.alignment || file_len.is_none());
            if let Ok(model) = import::gguf_model("fuzz", std::slice::from_ref(&header)) {
                let _ = model.summary(stageplan::TensorType::F16);
            }
        }
    }
});
