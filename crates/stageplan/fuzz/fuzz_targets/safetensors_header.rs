//! safetensors headers and index files from untrusted bytes, and the model reader driven
//! over the bytes as a file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stageplan::import::{self, Parse, safetensors};

fuzz_target!(|data: &[u8]| {
    read_as("fuzz.safetensors", data);
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

/// Drives the core's model reader over `data` as the one file `name`: every step answered,
/// nothing beside it; it must finish (model or error) within a few dozen steps.
fn read_as(name: &str, data: &[u8]) {
    use stageplan::import::{FileEntry, ModelReader, Step};
    let offered = vec![FileEntry { name: name.to_owned(), size: Some(data.len() as u64) }];
    let Ok(mut reader) = ModelReader::new(offered, None, None) else { return };
    for _ in 0..64 {
        match reader.step() {
            Ok(Step::Read { file, start, end }) => {
                assert!(file == 0 && start < end && end <= data.len() as u64, "{start}..{end} of {}", data.len());
                reader.supply(file, start, &data[start as usize..end as usize]);
            }
            Ok(Step::Find { name }) => reader.missing(&name),
            Ok(Step::Done(_)) | Err(_) => return,
        }
    }
    panic!("the reader did not finish in 64 steps");
}
