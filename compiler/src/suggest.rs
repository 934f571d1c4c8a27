//! "Did you mean …?": the closest known word to a misspelt one, for hints in diagnostics. A
//! leaf module (it imports nothing of the compiler) so every stage can use it.

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo
/// (at most a third of the word's length, and at least 2 edits allowed).
pub fn did_you_mean<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(2);
    candidates.map(|c| (strsim::levenshtein(word, c), c)).filter(|(d, _)| *d <= limit).min().map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn suggests_close_words_only() {
        let props = ["proto", "port", "bandwidth", "listen"];
        assert_eq!(did_you_mean("prot", props.iter().copied()), Some("proto"));
        assert_eq!(did_you_mean("bandwith", props.iter().copied()), Some("bandwidth"));
        assert_eq!(did_you_mean("zzzzzz", props.iter().copied()), None);
    }
}
