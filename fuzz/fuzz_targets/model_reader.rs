//! Shared by the header targets: the core's model reader driven over fuzzed bytes.

/// Drives the core's model reader over `data` as the one file `name`: every step answered,
/// nothing beside it; it must finish (model or error) within a few dozen steps.
pub fn read_as(name: &str, data: &[u8]) {
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
