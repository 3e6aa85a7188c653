/// Takes `qty` items of `sku` out of stock.
///
/// Runs while holding the distributed lock `stock:{sku}` (`#[redis_lock]`, lease 10_000 ms).
#[tracing::instrument(skip(qty))]
pub async fn deduct(sku: &str, qty: u32) -> Result<u32, AppError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("stock:"),
            ::fencelock::__private::KeyPart::value(&sku),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("stock:{sku}")
        .ttl_ms(10000)
        .action(::fencelock::__private::Action::GiveUp);
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<Result<u32, AppError>>::new()).ending()
    };
    __fencelock_ending
        .run_locked(
            __fencelock_client,
            __fencelock_key,
            ::fencelock::__private::LockKind::Mutex,
            __fencelock_options,
            async move {
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
                    let __fencelock_fake_return: Result<u32, AppError> = loop {};
                    return __fencelock_fake_return;
                }
                {
                    let left = stock(sku).await? - qty;
                    Ok(left)
                }
            },
        )
        .await
}
