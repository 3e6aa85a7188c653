/// Shows an item; readers of one item do not wait for each other.
///
/// Runs while holding a distributed read lock of `catalog:{id}` (`#[redis_lock]`, lease 30_000 ms).
async fn show(id: u32) -> Result<Item, AppError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("catalog:"),
            ::fencelock::__private::KeyPart::value(&id),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("catalog:{id}");
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<Result<Item, AppError>>::new()).ending()
    };
    __fencelock_ending
        .run_locked(
            __fencelock_client,
            __fencelock_key,
            ::fencelock::__private::LockKind::Read,
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
                    let __fencelock_fake_return: Result<Item, AppError> = loop {};
                    return __fencelock_fake_return;
                }
                { catalog::get(id).await }
            },
        )
        .await
}
