//! A cursor over the bytes of a header that may be cut short.
//!
//! Parsers read from a prefix of a file. Running out of bytes is not an error but a request:
//! [`Short`] says how many bytes from the start of the file the parser needs, so a caller
//! can read more (a `File.slice` in the browser, a larger read natively) and parse again.
//! Lengths and counts come from the file and are untrusted: they are checked against what a
//! well-formed file could hold before anything is allocated.

/// `"<what> length"`, formatted only when an error needs it.
pub(crate) struct Length<'a>(pub &'a dyn std::fmt::Display);

impl std::fmt::Display for Length<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} length", self.0)
    }
}

/// The prefix ended before the header did; `needed` bytes from the file's start are required.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Short {
    pub needed: u64,
}

/// Reading failed: either more bytes are needed, or the bytes are malformed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fault {
    Short(Short),
    Bad { offset: u64, message: String },
}

pub(crate) type Read<T> = Result<T, Fault>;

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Total file length, when known: lengths beyond it are malformed, not short.
    file_len: Option<u64>,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8], file_len: Option<u64>) -> Cursor<'a> {
        Cursor { bytes, at: 0, file_len }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.at as u64
    }

    pub(crate) fn bad<T>(&self, offset: u64, message: impl Into<String>) -> Read<T> {
        Err(Fault::Bad { offset, message: message.into() })
    }

    /// Takes `len` bytes, or reports how far the file must be read.
    pub(crate) fn take(&mut self, len: u64, what: &dyn std::fmt::Display) -> Read<&'a [u8]> {
        let end = (self.at as u64).checked_add(len);
        let Some(end) = end.filter(|&e| self.file_len.is_none_or(|f| e <= f)) else {
            return self.bad(
                self.offset(),
                format!("{what} claims {len} bytes, past the end of the file ({} bytes)", self.file_len.unwrap_or(0)),
            );
        };
        if end > self.bytes.len() as u64 {
            return Err(Fault::Short(Short { needed: end }));
        }
        let slice = &self.bytes[self.at..end as usize];
        self.at = end as usize;
        Ok(slice)
    }

    pub(crate) fn u8(&mut self, what: &dyn std::fmt::Display) -> Read<u8> {
        Ok(self.take(1, what)?[0])
    }

    pub(crate) fn u32(&mut self, what: &dyn std::fmt::Display) -> Read<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, what: &dyn std::fmt::Display) -> Read<u64> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// A count of items each at least `min_item` bytes long: more items than the rest of the
    /// file could hold is malformed (this is what keeps a claim of 2^60 items from allocating).
    pub(crate) fn count(&mut self, what: &dyn std::fmt::Display, min_item: u64) -> Read<u64> {
        let at = self.offset();
        let count = self.u64(what)?;
        let room = self.file_len.map(|f| f.saturating_sub(self.offset()));
        let needed = count.checked_mul(min_item.max(1));
        match (needed, room) {
            (None, _) => self.bad(at, format!("{what} is {count}, more than any file could hold")),
            (Some(n), Some(room)) if n > room => self
                .bad(at, format!("{what} is {count}, but only {room} bytes follow; the file is truncated or corrupt")),
            _ => Ok(count),
        }
    }

    /// Capacity to reserve for `count` items: never more than the bytes present could hold.
    pub(crate) fn capacity(&self, count: u64, min_item: u64) -> usize {
        let present = (self.bytes.len() - self.at) as u64 / min_item.max(1);
        count.min(present).min(1 << 20) as usize
    }
}
