//! safetensors headers and index files from untrusted bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stageplan::import::{self, Parse, safetensors};

fuzz_target!(|data: &[u8]| {
    if let Ok(Parse::Done(header)) = safetensors::parse(data, Some(data.len() as u64)) {
        assert_eq!(header.data_offset() + header.tensor_bytes(), data.len() as u64);
        let shards = vec![("fuzz.safetensors".to_owned(), header)];
        if let Ok(model) = import::safetensors_model("fuzz", &shards, None, None) {
            let _ = model.summary(stageplan::TensorType::F16);
        }
    }
    let _ = safetensors::parse(data, None);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = safetensors::parse_index(text);
    }
});
