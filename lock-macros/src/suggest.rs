//! "Did you mean" suggestions for misspelled names.

/// The candidate closest to `written`, if it is close enough to be a likely typo: at most
/// about a third of its letters differ (ignoring case).
pub(crate) fn closest<'a>(
    written: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let written = written.to_lowercase();
    candidates
        .into_iter()
        .map(|candidate| (distance(&written, &candidate.to_lowercase()), candidate))
        .filter(|&(distance, candidate)| distance <= candidate.len().div_ceil(3))
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// The Levenshtein distance between `a` and `b`, in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, a_char) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, &b_char) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != b_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_name_and_strangers_find_none() {
        let names = ["ttl_ms", "retry", "sleep_ms", "wait_ms"];
        assert_eq!(closest("ttl_sm", names), Some("ttl_ms"));
        assert_eq!(closest("retyr", names), Some("retry"));
        assert_eq!(closest("Sleep_Ms", names), Some("sleep_ms"));
        assert_eq!(closest("shards", names), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
