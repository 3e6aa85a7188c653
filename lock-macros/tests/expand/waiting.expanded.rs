async fn book(event: EventId) -> Result<Ticket, BookingError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("ticket:"),
            ::fencelock::__private::KeyPart::value(&event),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("ticket:{event}")
        .retry(20)
        .sleep_ms(100)
        .wait_ms(5000)
        .fair(true)
        .min_replicas(1);
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<Result<Ticket, BookingError>>::new())
            .ending()
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
                    let __fencelock_fake_return: Result<Ticket, BookingError> = loop {};
                    return __fencelock_fake_return;
                }
                { reserve(event).await }
            },
        )
        .await
}
