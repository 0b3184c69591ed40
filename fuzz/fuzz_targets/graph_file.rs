//! Graph files: any text either loads or gives an error; it never panics or hangs.
#![no_main]

use databuild_core::Graph;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Graph::parse(text, "fuzz.toml");
    }
});
