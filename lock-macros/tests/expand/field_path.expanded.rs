async fn ship(order: &Order, mut tries: u8) -> AppResult<Shipment> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("order:"),
            ::fencelock::__private::KeyPart::value(&order.id),
            ::fencelock::__private::KeyPart::Text(":line:"),
            ::fencelock::__private::KeyPart::value(&order.lines.0),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("order:{order.id}:line:{order.lines.0}")
        .action(::fencelock::__private::Action::Continue);
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<AppResult<Shipment>>::new()).ending()
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
                    let __fencelock_fake_return: AppResult<Shipment> = loop {};
                    return __fencelock_fake_return;
                }
                {
                    tries += 1;
                    carrier::book(order, tries).await
                }
            },
        )
        .await
}
