//! The function `#[redis_lock]` is placed on.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Signature, Token, Visibility, braced, token};

/// A function whose body is kept as unparsed tokens.
///
/// The macro only moves the body into a block, so it has no reason to parse
/// it: syntax errors in the body are then reported once, by rustc, at the
/// right place, and large bodies cost nothing to expand.
pub(crate) struct LockedFn {
    /// Attributes and doc comments above the function.
    pub outer_attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    /// The braces around the body: the locked body keeps their span, so that rustc's
    /// suggestions that rewrite the body (`async_fn_in_trait`) wrap the user's code.
    pub brace: token::Brace,
    /// `#![...]` attributes at the start of the body.
    pub inner_attrs: Vec<Attribute>,
    /// The statements of the body.
    pub body: TokenStream,
}

impl Parse for LockedFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let outer_attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        if !starts_signature(input) {
            return Err(input.error("`#[redis_lock]` can only be used on an `async fn`"));
        }
        let sig: Signature = input.parse()?;
        if input.peek(Token![;]) {
            return Err(input.error(
                "`#[redis_lock]` needs the function body; put it on the `async fn` in the `impl`, not on the trait's declaration",
            ));
        }
        let content;
        let brace = braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body: TokenStream = content.parse()?;
        Ok(LockedFn {
            outer_attrs,
            vis,
            sig,
            brace,
            inner_attrs,
            body,
        })
    }
}

/// Whether the next tokens can start a function signature; anything else (a
/// struct, an impl block, a `let`) gets one clear error instead of syn's
/// "expected `fn`".
fn starts_signature(input: ParseStream) -> bool {
    input.peek(Token![fn])
        || input.peek(Token![async])
        || input.peek(Token![const])
        || input.peek(Token![unsafe])
        || input.peek(Token![safe])
        || input.peek(Token![extern])
}
