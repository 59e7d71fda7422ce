//! GGUF headers from untrusted bytes: parse any prefix, with and without the file length,
//! and build a model from whatever parses; and the model reader driven over the bytes as a
//! file. Must never panic, loop or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stageplan::import::{self, Parse, gguf};

fuzz_target!(|data: &[u8]| {
    read_as("fuzz.gguf", data);
    for file_len in [Some(data.len() as u64), None] {
        if let Ok(Parse::Done(header)) = gguf::parse(data, file_len) {
            assert!(header.data_offset <= data.len() as u64 + header.alignment || file_len.is_none());
            if let Ok(model) = import::gguf_model("fuzz", std::slice::from_ref(&header)) {
                let _ = model.summary(stageplan::TensorType::F16);
            }
        }
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
