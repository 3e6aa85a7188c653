#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| {
    fencelock_fuzz::key_template(text);
});
