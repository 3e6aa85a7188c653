#![no_main]

// The input is split at the first NUL: attribute arguments, then the function (or, without
// a NUL, arguments put on a fixed function with a few parameters to name in templates).
libfuzzer_sys::fuzz_target!(|input: &str| {
    let (attr, item) = input.split_once('\0').unwrap_or((
        input,
        "async fn f(a: u32, b: &str, s: S) -> Result<(), E> { Ok(()) }",
    ));
    fencelock_fuzz::attribute(attr, item);
});
