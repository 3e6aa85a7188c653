//! Expansion snapshots: what users get, formatted, compared with the files in
//! `tests/expand/`. Run with `FENCELOCK_BLESS=1` to rewrite those files after
//! a deliberate change, then review the diff.

use std::path::PathBuf;
use std::{env, fs};

use proc_macro2::TokenStream;
use quote::quote;

use crate::expand;

/// Expands `#[redis_lock(attr)] item`, wraps it in `wrap` (e.g. an `impl`
/// block for methods), and compares it with `tests/expand/<name>.expanded.rs`.
fn assert_snapshot(
    name: &str,
    attr: TokenStream,
    item: TokenStream,
    wrap: impl FnOnce(TokenStream) -> TokenStream,
) {
    let expanded = wrap(expand::redis_lock(attr, item));
    let file: syn::File = syn::parse2(expanded).expect("the expansion is valid Rust syntax");
    let actual = prettyplease::unparse(&file);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/expand")
        .join(format!("{name}.expanded.rs"));
    if env::var_os("FENCELOCK_BLESS").is_some_and(|bless| bless == "1") {
        fs::create_dir_all(path.parent().expect("a file in a directory"))
            .expect("creating tests/expand");
        fs::write(&path, &actual).expect("writing the snapshot");
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "cannot read {}: {error}; run with FENCELOCK_BLESS=1 to create it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "the expansion differs from {}; if the change is intended, run with FENCELOCK_BLESS=1 and review the diff\n\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

fn unwrapped(tokens: TokenStream) -> TokenStream {
    tokens
}

#[test]
fn free_fn_with_give_up() {
    assert_snapshot(
        "free_fn_give_up",
        quote!(key = "stock:{sku}", ttl_ms = 10_000, action = GiveUp),
        quote! {
            /// Takes `qty` items of `sku` out of stock.
            #[tracing::instrument(skip(qty))]
            pub async fn deduct(sku: &str, qty: u32) -> Result<u32, AppError> {
                let left = stock(sku).await? - qty;
                Ok(left)
            }
        },
        unwrapped,
    );
}

#[test]
fn options_value_and_constants() {
    assert_snapshot(
        "options_and_constants",
        quote!(
            key = "report:{day}",
            options = REPORT_LOCK,
            ttl_ms = config::TTL_MS,
            retry = 2
        ),
        quote! {
            /// Builds the day's report once across all servers.
            async fn nightly_report(day: Date) -> Result<(), JobError> {
                build_report(day).await
            }
        },
        unwrapped,
    );
}

#[test]
fn method_with_self_field_and_client() {
    assert_snapshot(
        "method_self_client",
        quote!(
            key = "account:{self.id}:{currency}",
            client = self.locks,
            retry = 3,
            sleep_ms = 50
        ),
        quote! {
            pub(crate) async fn transfer(&self, currency: Currency, amount: u64) -> Result<(), BankError> {
                #![allow(clippy::cast_possible_truncation)]
                self.ledger.debit(amount).await?;
                Ok(())
            }
        },
        |method| quote!(impl Account { #method }),
    );
}

#[test]
fn generic_fn_with_crate_path() {
    assert_snapshot(
        "generic_crate_path",
        quote!(
            key = "job:{{{kind}}}:{id}",
            crate = "my_locks",
            ttl_ms = 86_400_000
        ),
        quote! {
            async fn run_job<'a, K, I: Display>(kind: &'a K, id: I, payload: impl AsRef<[u8]>) -> anyhow::Result<Report<'a, K>>
            where
                K: Display + Sync,
            {
                execute(kind, payload.as_ref()).await
            }
        },
        unwrapped,
    );
}

#[test]
fn field_path() {
    assert_snapshot(
        "field_path",
        quote!(
            key = "order:{order.id}:line:{order.lines.0}",
            action = Continue
        ),
        quote! {
            async fn ship(order: &Order, mut tries: u8) -> AppResult<Shipment> {
                tries += 1;
                carrier::book(order, tries).await
            }
        },
        unwrapped,
    );
}

#[test]
fn impl_trait_in_the_result_and_client_reference() {
    assert_snapshot(
        "impl_trait_result",
        quote!(
            key = "report:{self}",
            client = &state.locks,
            crate = my_locks::reexport
        ),
        quote! {
            async fn render(self, state: &AppState) -> Result<impl Display + use<>, LockError> {
                Ok(self.title)
            }
        },
        |method| quote!(impl Report { #method }),
    );
}

#[test]
fn lease_control() {
    assert_snapshot(
        "lease_control",
        quote!(
            key = "report:{day}",
            ttl_ms = 10_000,
            action = GiveUp,
            renew = true,
            on_lost = Continue,
            min_hold_ms = 60_000,
            max_hold_ms = 3_600_000
        ),
        quote! {
            async fn nightly_report(day: Date) -> Result<(), JobError> {
                build_report(day).await
            }
        },
        unwrapped,
    );
}

#[test]
fn waiting() {
    assert_snapshot(
        "waiting",
        quote!(
            key = "ticket:{event}",
            sleep_ms = 100,
            retry = 20,
            wait_ms = 5_000,
            fair = true,
            min_replicas = 1
        ),
        quote! {
            async fn book(event: EventId) -> Result<Ticket, BookingError> {
                reserve(event).await
            }
        },
        unwrapped,
    );
}

#[test]
fn read_lock() {
    assert_snapshot(
        "read_lock",
        quote!(key = "catalog:{id}", mode = Read),
        quote! {
            /// Shows an item; readers of one item do not wait for each other.
            async fn show(id: u32) -> Result<Item, AppError> {
                catalog::get(id).await
            }
        },
        unwrapped,
    );
}

#[test]
fn semaphore() {
    assert_snapshot(
        "semaphore",
        quote!(key = "exports", permits = 3),
        quote! {
            /// Exports a report; three at most at once.
            async fn export(report: Report) -> Result<(), AppError> {
                report.write().await
            }
        },
        unwrapped,
    );
}

#[test]
fn segmented_runs_again() {
    assert_snapshot(
        "segmented_runs_again",
        quote!(key = "stock:{sku}", shards = 8),
        quote! {
            /// Sells one unit, from whichever shard still has stock.
            async fn buy(sku: &Sku) -> Result<u32, ShopError> {
                match stock::take(sku, current_shard()).await? {
                    Some(left) => Ok(left),
                    None => Err(fencelock::shard_exhausted().await.into()),
                }
            }
        },
        unwrapped,
    );
}

#[test]
fn segmented() {
    assert_snapshot(
        "segmented",
        quote!(key = "stock:{sku}", shards = 16),
        quote! {
            /// Takes one item out of one of the item's 16 stock shards.
            async fn take(sku: Sku) -> Result<(), AppError> {
                stock::take(sku, current_shard()).await
            }
        },
        unwrapped,
    );
}

#[test]
fn several_keys() {
    assert_snapshot(
        "several_keys",
        quote!(keys = ["acct:{from}", "acct:{to}"], wait_ms = 5_000),
        quote! {
            /// Moves `amount` from one account to another.
            async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), BankError> {
                ledger::transfer(from, to, amount, current_tokens()).await
            }
        },
        unwrapped,
    );
}

#[test]
fn single_flight() {
    assert_snapshot(
        "single_flight",
        quote!(key = "report:{day}", action = Share, wait_ms = 30_000),
        quote! {
            /// The day's report, computed once however many ask for it at the same time.
            async fn report(day: u32) -> Result<Report, ReportError> {
                build_report(day).await
            }
        },
        unwrapped,
    );
}

#[test]
fn only_documented_functions_gain_the_lock_line() {
    let lock_line = "Runs while holding the distributed lock";
    let expanded = |attrs: TokenStream| {
        expand::redis_lock(
            quote!(key = "job:{id}"),
            quote! { #attrs pub async fn job(id: u32) -> Result<(), E> { Ok(()) } },
        )
        .to_string()
    };
    for undocumented in [
        quote!(),
        quote!(#[doc(alias = "take")]),
        quote!(#[doc(hidden)]),
    ] {
        let output = expanded(undocumented);
        assert!(!output.contains(lock_line), "{output}");
    }
    assert!(expanded(quote!(#[doc = " Takes a job."])).contains(lock_line));
}

#[test]
fn the_lock_line_names_counts_written_as_expressions() {
    let lock_line = |attr: TokenStream| {
        let output = expand::redis_lock(
            attr,
            quote! {
                /// Exports.
                async fn export() -> Result<(), E> { Ok(()) }
            },
        );
        let file: syn::File = syn::parse2(output).expect("the expansion is valid Rust syntax");
        let docs = prettyplease::unparse(&file);
        let line = docs
            .lines()
            .find(|line| line.contains("Runs while holding"));
        line.expect("a lock line").to_owned()
    };
    assert_eq!(
        lock_line(quote!(
            key = "exports",
            permits = limits::EXPORTS,
            ttl_ms = TTL
        )),
        "/// Runs while holding one of `limits::EXPORTS` permits of the distributed semaphore `exports` (`#[redis_lock]`, lease `TTL` ms)."
    );
    assert_eq!(
        lock_line(quote!(
            key = "stock",
            shards = config.shards * 2,
            options = BASE
        )),
        "/// Runs while holding one of the shards of the distributed segmented lock `stock` (`#[redis_lock]`, lease set at run time)."
    );
    assert_eq!(
        lock_line(quote!(key = "catalog", mode = Write, ttl_ms = 1_000)),
        "/// Runs while holding the distributed write lock of `catalog` (`#[redis_lock]`, lease 1_000 ms)."
    );
}

/// Review finding: a field named by a keyword (`{order.type}`) was emitted as `order.type`,
/// which does not parse; it is `order.r#type`, as its struct declares it.
#[test]
fn a_field_named_by_a_keyword_is_emitted_raw() {
    let expanded = expand::redis_lock(
        quote!(key = "order:{order.type}:{order.gen}"),
        quote!(
            async fn f(order: &Order) -> Result<(), E> {}
        ),
    );
    let file: syn::File = syn::parse2(expanded).expect("the expansion is valid Rust syntax");
    let expanded = prettyplease::unparse(&file);
    assert!(expanded.contains("order.r#type"), "{expanded}");
    assert!(expanded.contains("order.r#gen"), "{expanded}");
}
