//! Collects every error of one `#[redis_lock]` use, so that the user sees them
//! all in one compile instead of one per fix.

/// The errors found so far, combined into one `syn::Error`.
#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    /// Records `error` next to the ones found before.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Returns the value of `result`, or records its error and returns `None`.
    pub(crate) fn collect<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// Returns `value` if no error was recorded, else all recorded errors.
    ///
    /// Stages return `None` only after recording why, so a `None` without an
    /// error is a bug in this crate, reported as such rather than as a panic.
    pub(crate) fn finish<T>(self, value: Option<T>) -> syn::Result<T> {
        match (self.combined, value) {
            (Some(error), _) => Err(error),
            (None, Some(value)) => Ok(value),
            (None, None) => Err(syn::Error::new(
                proc_macro2::Span::call_site(),
                "internal error in `#[redis_lock]`: a check failed without saying why; please report it",
            )),
        }
    }
}
