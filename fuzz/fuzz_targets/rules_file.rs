//! A `.rules` file of arbitrary text, read as `guard` reads one (`PolicyParser::parse`, then
//! `build`): a policy or an error, never a panic, a hang or unbounded memory (the parser bounds
//! the evaluation's steps and heap: `policy::parser::MAX_EVALUATION_STEPS`, `MAX_EVALUATION_HEAP`).
//! A policy that loads is also asked about a command, as `guard check` would.
#![no_main]

use guard::policy::{LoadError, PolicyParser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A rules file is read as UTF-8 text; other bytes are refused before the parser.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parser = PolicyParser::new();
    match parser.parse("fuzz.rules", text) {
        Ok(()) => {
            let policy = parser.build();
            let argv = ["git", "push", "origin", "main"].map(String::from);
            let _ = policy.check(&argv, None);
        }
        // The error people see is made of its location and first line: that must render too.
        Err(source) => {
            let error = LoadError::Parse {
                path: "fuzz.rules".into(),
                source,
            };
            assert!(!error.display_line().is_empty());
        }
    }
});
