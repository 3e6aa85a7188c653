async fn run_job<'a, K, I: Display>(
    kind: &'a K,
    id: I,
    payload: impl AsRef<[u8]>,
) -> anyhow::Result<Report<'a, K>>
where
    K: Display + Sync,
{
    let __fencelock_client = my_locks::__private::scoped_client();
    let __fencelock_key = my_locks::__private::render_key(
        &[
            my_locks::__private::KeyPart::Text("job:{"),
            my_locks::__private::KeyPart::value(&kind),
            my_locks::__private::KeyPart::Text("}:"),
            my_locks::__private::KeyPart::value(&id),
        ],
    );
    let __fencelock_options = my_locks::__private::LockOptions::new()
        .name("job:{{{kind}}}:{id}")
        .ttl_ms(86400000);
    let __fencelock_ending = {
        use my_locks::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&my_locks::__private::Ending::<anyhow::Result<Report<'a, K>>>::new()).ending()
    };
    __fencelock_ending
        .run_locked(
            __fencelock_client,
            __fencelock_key,
            my_locks::__private::LockKind::Mutex,
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
                    let __fencelock_fake_return: anyhow::Result<Report<'a, K>> = loop {};
                    return __fencelock_fake_return;
                }
                { execute(kind, payload.as_ref()).await }
            },
        )
        .await
}
