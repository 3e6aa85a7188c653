//! Code generation: the locked function, or the function as written followed
//! by the errors.

use fencelock_options::{DEFAULT_TTL_MS, digit_grouped};
use proc_macro2::{Ident, Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{Attribute, Expr, Index, LitStr, Path, Type, TypeInfer};

use crate::args::{self, Action, Number, OnLost};
use crate::errors::Errors;
use crate::item::LockedFn;
use crate::template::Field;
use crate::validate::{self, Key, KeyPart, Kind, LockSpec, Options};

/// Expands `#[redis_lock(attr)] item`.
///
/// On any error the function is emitted unchanged, followed by every error:
/// IDEs keep working, and the user sees no second wave of errors caused by a
/// half-generated function.
pub(crate) fn redis_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = args::parse(attr, &mut errors);
    let checked = errors
        .collect(syn::parse2::<LockedFn>(item.clone()))
        .and_then(|func| Some((validate::validate(args, &func, &mut errors)?, func)));
    match errors.finish(checked) {
        Ok((spec, func)) => locked_fn(&spec, func),
        Err(error) => {
            let mut tokens = item;
            tokens.extend(error.into_compile_error());
            tokens
        }
    }
}

/// The function with the same signature, whose body takes the lock and runs
/// the original body inside it.
fn locked_fn(spec: &LockSpec, func: LockedFn) -> TokenStream {
    let LockedFn {
        outer_attrs,
        vis,
        sig,
        brace,
        inner_attrs,
        body,
    } = func;
    let krate = &spec.crate_path;
    // Mixed-site names: the body cannot see these, nor clash with its own names.
    let client_var = format_ident!("__fencelock_client", span = Span::mixed_site());
    let key_var = format_ident!("__fencelock_key", span = Span::mixed_site());
    let options_var = format_ident!("__fencelock_options", span = Span::mixed_site());
    // Shown at the return type, like the call on it: an unsuitable return type is then
    // reported there only.
    let ending_var = format_ident!(
        "__fencelock_ending",
        span = Span::mixed_site().located_at(spec.return_type.span())
    );
    let client = match &spec.client {
        Some(expr) => client_of(krate, expr),
        None => quote!(#krate::__private::scoped_client()),
    };
    let key = match &spec.keys[..] {
        [key] => render_key(krate, key),
        keys => {
            let keys = keys.iter().map(|key| render_key(krate, key));
            quote!(#krate::__private::render_keys([#(#keys),*]))
        }
    };
    let kind = lock_kind(krate, &spec.kind);
    let templates: Vec<&str> = spec.keys.iter().map(|key| &key.template[..]).collect();
    let options = lock_options(krate, &spec.options, &templates.join(", "));
    let fake_return = fake_return(&spec.return_type);
    // A segmented body that may mark its shard exhausted runs again on another shard: it
    // borrows its arguments rather than taking them.
    let runs_again = matches!(spec.kind, Kind::Segmented { .. }) && names_shard_exhausted(&body);
    let capture = (!runs_again).then(|| quote!(move));
    let body = quote! {
        async #capture {
            #fake_return
            { #body }
        }
    };
    let outer_attrs = with_lock_doc(outer_attrs, spec);
    let call = if spec.options.action == Some(Action::Share) {
        // Calls of one function share values; another function of the same key computes its
        // own.
        // The path and the place: two methods of one name in one module are two functions.
        let name = LitStr::new(&sig.ident.unraw().to_string(), sig.ident.span());
        let function = quote_spanned! {sig.ident.span()=>
            ::core::concat!(
                ::core::module_path!(), "::", #name, "@", ::core::line!(), ":", ::core::column!()
            )
        };
        run_shared(
            krate,
            &spec.return_type,
            quote!(#client_var, #key_var, #options_var, #function, #body),
        )
    } else if runs_again {
        let ending = ending(krate, &spec.return_type);
        let runs_var = format_ident!("__fencelock_runs", span = Span::mixed_site());
        let kind_var = format_ident!("__fencelock_kind", span = Span::mixed_site());
        let output_var = format_ident!("__fencelock_output", span = Span::mixed_site());
        let run_locked = run_locked(
            &spec.return_type,
            &ending_var,
            quote! {
                ::core::clone::Clone::clone(&#client_var),
                #runs_var.key(&#key_var),
                #kind_var,
                #runs_var.options(),
                #body
            },
        );
        quote! {
            let #ending_var = #ending;
            let #kind_var = #kind;
            let mut #runs_var = #krate::__private::ShardRuns::new(#kind_var, #options_var);
            loop {
                let #output_var = #run_locked;
                if let ::core::option::Option::Some(#output_var) = #runs_var.finished(#output_var) {
                    break #output_var;
                }
            }
        }
    } else {
        let ending = ending(krate, &spec.return_type);
        let run_locked = run_locked(
            &spec.return_type,
            &ending_var,
            quote!(#client_var, #key_var, #kind, #options_var, #body),
        );
        quote!(let #ending_var = #ending; #run_locked)
    };
    let mut locked_body = TokenStream::new();
    brace.surround(&mut locked_body, |tokens| {
        tokens.extend(quote! {
            #(#inner_attrs)*
            let #client_var = #client;
            let #key_var = #key;
            let #options_var = #options;
            #call
        });
    });
    quote! {
        #outer_attrs
        #vis #sig #locked_body
    }
}

/// The function's attributes with a paragraph after its docs saying which lock it takes.
/// An undocumented function stays undocumented, so that `missing_docs` still finds it.
fn with_lock_doc(outer_attrs: Vec<Attribute>, spec: &LockSpec) -> TokenStream {
    // `#[doc = "..."]` only: `#[doc(hidden)]` or `#[doc(alias = "..")]` are no docs.
    let is_doc = |attr: &Attribute| {
        attr.path().is_ident("doc") && matches!(attr.meta, syn::Meta::NameValue(_))
    };
    let Some(last_doc) = outer_attrs.iter().rposition(is_doc) else {
        return quote!(#(#outer_attrs)*);
    };
    let lease = match (&spec.options.ttl_ms, &spec.options.base) {
        (Some(ttl_ms), _) => shown(ttl_ms).map(|ttl_ms| format!("lease {ttl_ms} ms")),
        (None, Some(_)) => None,
        (None, None) => Some(format!("lease {} ms", digit_grouped(DEFAULT_TTL_MS))),
    };
    let lease = lease.unwrap_or_else(|| "lease set at run time".to_owned());
    let templates: Vec<String> = spec
        .keys
        .iter()
        .map(|key| format!("`{}`", key.template))
        .collect();
    let key = &spec.keys[0].template;
    let count = |count: &Number<u32>| shown(count).unwrap_or_else(|| "the".to_owned());
    let lock = match &spec.kind {
        Kind::Mutex => match templates.split_last() {
            Some((last, others)) if !others.is_empty() => {
                format!(
                    "the distributed locks {} and {last}, together",
                    others.join(", ")
                )
            }
            _ => format!("the distributed lock `{key}`"),
        },
        Kind::Read => format!("a distributed read lock of `{key}`"),
        Kind::Write => format!("the distributed write lock of `{key}`"),
        Kind::Semaphore { permits } => format!(
            "one of {} permits of the distributed semaphore `{key}`",
            count(permits)
        ),
        Kind::Segmented { shards } => format!(
            "one of {} shards of the distributed segmented lock `{key}`",
            count(shards)
        ),
    };
    let shared = match spec.options.action {
        Some(Action::Share) => ", single-flight: calls that overlap share one computation",
        _ => "",
    };
    let doc = format!(" Runs while holding {lock} (`#[redis_lock]`, {lease}{shared}).");
    let (docs, others) = outer_attrs.split_at(last_doc + 1);
    quote!(#(#docs)* #[doc = ""] #[doc = #doc] #(#others)*)
}

/// A numeric argument in the function's docs: a literal digit-grouped, a constant by its
/// path; `None` for any other expression, which only the run time knows.
fn shown<T: Copy + Into<u64>>(number: &Number<T>) -> Option<String> {
    match number {
        Number::Literal { value, .. } => Some(digit_grouped((*value).into())),
        Number::Expr(expr) => match &**expr {
            Expr::Path(path) => Some(format!("`{}`", args::path_text(&path.path))),
            _ => None,
        },
    }
}

/// `render_key(&[Text(..), value(&arg), ..])`. The values are spanned at the
/// template, so that "cannot be part of a lock key" points at it.
fn render_key(krate: &Path, key: &Key) -> TokenStream {
    let span = key.span;
    let parts = key.parts.iter().map(|part| match part {
        KeyPart::Text(text) => {
            let text = LitStr::new(text, span);
            quote!(#krate::__private::KeyPart::Text(#text))
        }
        KeyPart::Value { root, fields } => {
            let fields = fields.iter().map(|field| match field {
                Field::Named(name) => field_name(name, span).into_token_stream(),
                Field::Index(index) => Index {
                    index: *index,
                    span,
                }
                .into_token_stream(),
            });
            quote_spanned!(span=> #krate::__private::KeyPart::value(&#root #(.#fields)*))
        }
    });
    quote!(#krate::__private::render_key(&[#(#parts),*]))
}

/// A field's name as its struct declares it: raw (`r#type`) for a keyword, `gen` included
/// (reserved since edition 2024, and not a keyword to syn).
fn field_name(name: &str, span: Span) -> Ident {
    match syn::parse_str::<Ident>(name) {
        Ok(_) if name != "gen" => Ident::new(name, span),
        _ => Ident::new_raw(name, span),
    }
}

/// `LockKind::Mutex`, or the kind `mode`, `permits` or `shards` asks for. A count is the
/// user's literal or expression, so that one not of type `u32` is reported there.
fn lock_kind(krate: &Path, kind: &Kind) -> TokenStream {
    let kind = match kind {
        Kind::Mutex => quote!(Mutex),
        Kind::Read => quote!(Read),
        Kind::Write => quote!(Write),
        Kind::Semaphore { permits } => {
            let permits = number(permits);
            quote!(Semaphore { permits: #permits })
        }
        Kind::Segmented { shards } => {
            let shards = number(shards);
            quote!(Segmented { shards: #shards })
        }
    };
    quote!(#krate::__private::LockKind::#kind)
}

/// `LockOptions::new()` (or the `options = EXPR` base, unless it names the lock) named after
/// the key template (the `lock` of spans and metrics), plus one call per option the user
/// wrote.
fn lock_options(krate: &Path, options: &Options, template: &str) -> TokenStream {
    let Options {
        base,
        ttl_ms,
        retry,
        sleep_ms,
        action,
        renew,
        on_lost,
        min_hold_ms,
        max_hold_ms,
        wait_ms,
        fair,
        min_replicas,
    } = options;
    // `Share` waits as `Continue` does, the default.
    let action = action.and_then(|action| {
        let action = match action {
            Action::GiveUp => quote!(GiveUp),
            Action::Continue => quote!(Continue),
            Action::Share => return None,
        };
        Some(quote!(#krate::__private::Action::#action))
    });
    let on_lost = on_lost.map(|on_lost| {
        let policy = match on_lost {
            OnLost::Abort => quote!(Abort),
            OnLost::Continue => quote!(Continue),
        };
        quote!(#krate::__private::OnLost::#policy)
    });
    let calls = [
        ("ttl_ms", ttl_ms.as_ref().map(number)),
        ("retry", retry.as_ref().map(number)),
        ("sleep_ms", sleep_ms.as_ref().map(number)),
        ("action", action),
        ("renew", renew.as_ref().map(ToTokens::to_token_stream)),
        ("on_lost", on_lost),
        ("min_hold_ms", min_hold_ms.as_ref().map(number)),
        ("max_hold_ms", max_hold_ms.as_ref().map(number)),
        ("wait_ms", wait_ms.as_ref().map(number)),
        ("fair", fair.as_ref().map(ToTokens::to_token_stream)),
        ("min_replicas", min_replicas.as_ref().map(number)),
    ]
    .into_iter()
    .filter_map(|(setter, value)| {
        let setter = Ident::new(setter, Span::call_site());
        value.map(|value| quote!(.#setter(#value)))
    });
    let named = match base {
        // Typed where it is written, so that a value of another type is reported there; a
        // name the base gives is kept.
        Some(base) => {
            let span = Span::mixed_site().located_at(base.span());
            let options = Ident::new("__fencelock_base", span);
            let base = quote_spanned!(span=> { let #options: #krate::__private::LockOptions = #base; #options });
            quote!(#krate::__private::named(#base, #template))
        }
        None => quote!(#krate::__private::LockOptions::new().name(#template)),
    };
    quote!(#named #(#calls)*)
}

/// A numeric argument as the user wrote it: a literal without suffix at the user's literal,
/// or the expression.
fn number<T: Copy + Into<u64>>(number: &Number<T>) -> TokenStream {
    match number {
        Number::Literal { value, span } => {
            let mut literal = Literal::u64_unsuffixed((*value).into());
            literal.set_span(*span);
            literal.into_token_stream()
        }
        Number::Expr(expr) => expr.to_token_stream(),
    }
}

/// `client_of(&(expr))`, located at the expression: a value that is no lock
/// client is then reported there.
fn client_of(krate: &Path, expr: &Expr) -> TokenStream {
    let span = Span::call_site().located_at(expr.span());
    let krate = located_at(krate, span);
    quote_spanned!(span=> #krate::__private::client_of(&(#expr)))
}

/// How the lock ends after the body, chosen by the return type: the release is
/// awaited (and a loss it finds reported) when the output is `Send`, else left to
/// the background so that the function's future stays `Send` (autoref
/// specialisation, see `__private::Ending`). A return type with `impl Trait` in
/// it cannot be named in the body, nor asked whether it is `Send` there: it is
/// released in the background, which keeps the future `Send` either way.
fn ending(krate: &Path, return_type: &Type) -> TokenStream {
    let mut output = return_type.clone();
    let mut eraser = ImplTraitEraser::default();
    eraser.visit_type_mut(&mut output);
    if eraser.erased {
        return quote!(#krate::__private::ReleaseInBackground);
    }
    quote! {
        {
            use #krate::__private::{AwaitsRelease as _, ReleasesInBackground as _};
            (&&#krate::__private::Ending::<#output>::new()).ending()
        }
    }
}

/// Whether `body` names `shard_exhausted` (a call of `fencelock::shard_exhausted`, under any
/// path).
fn names_shard_exhausted(body: &TokenStream) -> bool {
    body.clone().into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == "shard_exhausted",
        TokenTree::Group(group) => names_shard_exhausted(&group.stream()),
        _ => false,
    })
}

/// `ending.run_locked(args).await`, located at the return type: its
/// `R: LockResult` bound then reports a return type that is not a suitable
/// `Result` there, once, rather than at the attribute.
fn run_locked(return_type: &Type, ending: &Ident, args: TokenStream) -> TokenStream {
    let span = Span::call_site().located_at(return_type.span());
    quote_spanned!(span=> #ending.run_locked(#args).await)
}

/// `run_shared(args).await`, located at the return type: its `R: SharedOutput` bound then
/// reports a value that cannot be shared there.
fn run_shared(krate: &Path, return_type: &Type, args: TokenStream) -> TokenStream {
    let span = Span::call_site().located_at(return_type.span());
    let krate = located_at(krate, span);
    quote_spanned!(span=> #krate::__private::run_shared(#args).await)
}

/// The crate path, shown at `span` but resolved as written, for diagnostics
/// that rustc reports at the span of a whole call.
fn located_at(krate: &Path, span: Span) -> TokenStream {
    krate
        .to_token_stream()
        .into_iter()
        .map(|mut token| {
            token.set_span(token.span().located_at(span));
            token
        })
        .collect()
}

/// An unreachable `return` of the declared type, so that the async block (and
/// the `?` and `return` in the body) are inferred as the function's return
/// type, with type errors reported at the user's code. The same trick as
/// `tracing::instrument`.
fn fake_return(return_type: &Type) -> TokenStream {
    let span = return_type.span();
    let mut return_type = return_type.clone();
    ImplTraitEraser::default().visit_type_mut(&mut return_type);
    quote_spanned! {span=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::unreachable,
            clippy::needless_return
        )]
        if false {
            let __fencelock_fake_return: #return_type = loop {};
            return __fencelock_fake_return;
        }
    }
}

/// Replaces `impl Trait` with `_`: it is not allowed in a `let` type.
#[derive(Default)]
struct ImplTraitEraser {
    /// Whether it replaced any.
    erased: bool,
}

impl VisitMut for ImplTraitEraser {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(impl_trait) = ty {
            self.erased = true;
            *ty = Type::Infer(TypeInfer {
                attrs: Vec::new(),
                underscore_token: syn::Token![_](impl_trait.impl_token.span),
            });
        } else {
            visit_mut::visit_type_mut(self, ty);
        }
    }
}
