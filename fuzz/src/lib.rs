//! The proc-macro crate's stages, compiled as a plain library so that fuzz targets can call
//! them (a `proc-macro` crate exports nothing else). The modules are the very files of
//! `lock-macros/src`, so the fuzzed code is the shipped code.
#![allow(dead_code)]

#[path = "../../lock-macros/src/args.rs"]
mod args;
#[path = "../../lock-macros/src/errors.rs"]
mod errors;
#[path = "../../lock-macros/src/expand.rs"]
mod expand;
#[path = "../../lock-macros/src/item.rs"]
mod item;
#[path = "../../lock-macros/src/suggest.rs"]
mod suggest;
#[path = "../../lock-macros/src/template.rs"]
mod template;
#[path = "../../lock-macros/src/validate.rs"]
mod validate;

use proc_macro2::TokenStream;

/// Parses a key template; must answer segments or errors, never panic.
pub fn key_template(text: &str) {
    let _ = template::parse(text);
}

/// Expands `#[redis_lock(attr)]` on `item`; must answer code or compile errors, never panic.
pub fn attribute(attr: &str, item: &str) {
    let (Ok(attr), Ok(item)) = (attr.parse::<TokenStream>(), item.parse::<TokenStream>()) else {
        return;
    };
    let _ = expand::redis_lock(attr, item);
}
