//! Refs, patterns and templates: parsing never panics; whatever a pattern renders, it matches back.
#![no_main]

use std::collections::BTreeMap;

use databuild_core::{PartitionRef, Pattern, Template};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (a, b) = text.split_once('\n').unwrap_or((text, ""));
    if let Ok(r) = PartitionRef::new(a) {
        assert!(!r.as_str().split('/').any(|s| s == ".."));
        assert!(!r.as_str().starts_with('/'));
    }
    if let Ok(p) = Pattern::parse(a) {
        if let Some(values) = p.match_ref(b) {
            assert_eq!(p.render(&values), b);
        }
        let domains = BTreeMap::from([("d".to_string(), vec!["x".to_string()])]);
        if let Ok(t) = Template::parse(b, std::slice::from_ref(&p), &domains) {
            let _ = t.shape(&domains);
        }
    }
});
