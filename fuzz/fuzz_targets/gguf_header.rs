//! GGUF headers from untrusted bytes: parse any prefix, with and without the file length,
//! and build a model from whatever parses; and the model reader driven over the bytes as a
//! file. Must never panic, loop or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "model_reader.rs"]
mod model_reader;
use model_reader::read_as;
use stageplan::import::{self, Parse, gguf};

fuzz_target!(|data: &[u8]| {
    read_as("fuzz.gguf", data);
    for file_len in [Some(data.len() as u64), None] {
        if let Ok(Parse::Done(header)) = gguf::parse(data, file_len) {
            assert!(header.data_offset <= data.len() as u64 + header.alignment || file_len.is_none());
            if let Ok(model) = import::gguf_model("fuzz", std::slice::from_ref(&header)) {
                let _ = model.summary(stageplan::TensorType::Q8_0, stageplan::TensorType::F16);
            }
        }
    }
});

