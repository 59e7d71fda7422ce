//! safetensors headers and index files from untrusted bytes, and the model reader driven
//! over the bytes as a file.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "model_reader.rs"]
mod model_reader;
use model_reader::read_as;
use stageplan::import::{self, Parse, safetensors};

fuzz_target!(|data: &[u8]| {
    read_as("fuzz.safetensors", data);
    if let Ok(Parse::Done(header)) = safetensors::parse(data, Some(data.len() as u64)) {
        assert_eq!(header.data_offset() + header.tensor_bytes(), data.len() as u64);
        let shards = vec![("fuzz.safetensors".to_owned(), header)];
        if let Ok(model) = import::safetensors_model("fuzz", &shards, None, None) {
            let _ = model.summary(stageplan::TensorType::Q8_0, stageplan::TensorType::F16);
        }
    }
    let _ = safetensors::parse(data, None);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = safetensors::parse_index(text);
    }
});

