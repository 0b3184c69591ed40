//! Command-line brace expansion and config executables' JSON: never a panic.
#![no_main]

use databuild_core::{expand_braces, JobConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if text.len() < 256 {
            let _ = expand_braces(text);
        }
        let _ = JobConfig::parse_response(text);
    }
});
