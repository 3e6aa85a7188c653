/// Sells one unit, from whichever shard still has stock.
///
/// Runs while holding one of 8 shards of the distributed segmented lock `stock:{sku}` (`#[redis_lock]`, lease 30_000 ms).
async fn buy(sku: &Sku) -> Result<u32, ShopError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("stock:"),
            ::fencelock::__private::KeyPart::value(&sku),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("stock:{sku}");
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<Result<u32, ShopError>>::new()).ending()
    };
    let __fencelock_kind = ::fencelock::__private::LockKind::Segmented {
        shards: 8,
    };
    let mut __fencelock_runs = ::fencelock::__private::ShardRuns::new(
        __fencelock_kind,
        __fencelock_options,
    );
    loop {
        let __fencelock_output = __fencelock_ending
            .run_locked(
                ::core::clone::Clone::clone(&__fencelock_client),
                __fencelock_runs.key(&__fencelock_key),
                __fencelock_kind,
                __fencelock_runs.options(),
                async {
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
                        let __fencelock_fake_return: Result<u32, ShopError> = loop {};
                        return __fencelock_fake_return;
                    }
                    {
                        match stock::take(sku, current_shard()).await? {
                            Some(left) => Ok(left),
                            None => Err(fencelock::shard_exhausted().await.into()),
                        }
                    }
                },
            )
            .await;
        if let ::core::option::Option::Some(__fencelock_output) = __fencelock_runs
            .finished(__fencelock_output)
        {
            break __fencelock_output;
        }
    }
}
