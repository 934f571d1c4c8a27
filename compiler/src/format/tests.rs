//! Unit tests of the formatter: what it normalises, what it keeps, and its errors.

use super::*;

#[track_caller]
fn fmt_ok(text: &str) -> String {
    format_kdl(text).unwrap_or_else(|e| panic!("{e}: {e:?}\n{text}"))
}

/// `messy` formats to `want`, and `want` is a fixed point.
#[track_caller]
fn formats_to(messy: &str, want: &str) {
    assert_eq!(fmt_ok(messy), want, "formatting\n{messy}");
    assert_eq!(fmt_ok(want), want, "not idempotent on\n{want}");
}

#[test]
fn indentation_and_spacing_are_normalised() {
    formats_to(
        "fwc 1\ninput   policy=drop {\n        allow \"ssh\"    proto=tcp port = 22\n\t  deny \"x\"\n}\n",
        "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n    deny \"x\"\n}\n",
    );
    formats_to("a{\nb{\nc\n}\n}", "a {\n    b {\n        c\n    }\n}\n");
    formats_to("host \"x\" {labels a=b}\n", "host \"x\" { labels a=b }\n");
    formats_to("a {\n  b {\n  c } }\n", "a {\n    b {\n        c } }\n");
    formats_to("a {\n    b {\n        c\n} }\n", "a {\n    b {\n        c\n} }\n");
    formats_to("a { }\n", "a {}\n");
    formats_to("a ; b;c\n", "a; b;c\n");
    formats_to("a  \t  \r\nb   \r\n", "a\nb\n");
}

#[test]
fn line_end_and_block_comments_are_kept() {
    formats_to(
        "// head\nfwc 1 // version\n\ninput {\n  // before\n  allow \"a\" /* inline */ proto=tcp   // why\n  /* block\n     over lines */\n  deny \"b\"\n  // last in block\n}\n// tail\n",
        "// head\nfwc 1 // version\n\ninput {\n    // before\n    allow \"a\" /* inline */ proto=tcp   // why\n    /* block\n     over lines */\n    deny \"b\"\n    // last in block\n}\n// tail\n",
    );
    formats_to("a //trailing spaces   \n", "a //trailing spaces\n");
    // Aligned end-of-line comments stay aligned (a tab counts as one space).
    formats_to("ab    // one\nabcd  // two\na\t// three\n", "ab    // one\nabcd  // two\na // three\n");
}

#[test]
fn slashdash_of_node_arg_prop_and_children_is_kept() {
    formats_to(
        "/-input {\n  allow \"a\"\n}\nforward {\n   /- allow \"old\"\n   allow \"b\" /-proto=tcp /- \"arg\" port=1\n}\nset \"s\" /-{\n - \"x\"\n}\n",
        "/-input {\n    allow \"a\"\n}\nforward {\n    /- allow \"old\"\n    allow \"b\" /-proto=tcp /- \"arg\" port=1\n}\nset \"s\" /-{\n    - \"x\"\n}\n",
    );
    // A slashdash on its own line comments out the node on the next one.
    formats_to("a {\n/-\nb\n}\n", "a {\n    /-\n        b\n}\n");
}

#[test]
fn blank_lines_between_groups_are_kept_and_runs_collapse_to_one() {
    formats_to("\n\na\n\n\n\nb\nc\n\n\n", "a\n\nb\nc\n");
    formats_to("a {\n\n  b\n\n  c\n\n}\n", "a {\n    b\n\n    c\n}\n");
}

#[test]
fn quoting_and_values_are_never_respelled() {
    let text = "set \"office\" \"203.0.113.0/24\"\nallow \"x\" proto=tcp port=\"80,443\" dev=eth1 log=#true n=0x1F r=#\"raw \"q\" \\n\"# rr=##\"a\"#b\"##\n";
    formats_to(text, text);
    formats_to("a \"edge-1\" edge-1 (ty)\"v\" (ty) 1\n", "a \"edge-1\" edge-1 (ty)\"v\" (ty) 1\n");
}

#[test]
fn multi_line_strings_and_continuations_keep_their_content() {
    let ml = "a {\n    b \"\"\"\n  two\n    lines\n  \"\"\"\n    c #\"\"\"\n raw \"\"\" inside?\n \"\"\"#\n}\n";
    formats_to(ml, ml);
    formats_to("a {\nb \"\"\"\n  x\n  \"\"\" c=1\n}\n", "a {\n    b \"\"\"\n  x\n  \"\"\" c=1\n}\n");
    formats_to("allow \"a\" \\\nproto=tcp \\ // why\n   port=22\nb\n", "allow \"a\" \\\n    proto=tcp \\ // why\n    port=22\nb\n");
    formats_to("a \"x\\\n    y\" b\n", "a \"x\\\n    y\" b\n");
}

#[test]
fn unusual_whitespace_and_bom() {
    formats_to("\u{feff}a\u{a0}b\u{2028}c\r\nd\re\n", "\u{feff}a b\nc\nd\ne\n");
    assert_eq!(fmt_ok(""), "");
    assert_eq!(fmt_ok("  \n\n "), "");
    assert_eq!(fmt_ok("// only a comment"), "// only a comment\n");
}

#[test]
fn invalid_kdl_is_a_syntax_error_with_its_position() {
    let text = "fwc 1\ninput {\n    allow \"x\" log=true\n}\n";
    let Err(FormatError::Syntax(problems)) = format_kdl(text) else { panic!("expected a syntax error") };
    assert!(!problems.is_empty());
    let mut map = SourceMap::default();
    let id = map.add("fwc.kdl", text);
    let diags = FormatError::Syntax(problems).diagnostics(&map, id);
    let loc = diags.0[0].location.as_ref().expect("a location");
    assert_eq!((loc.file.as_str(), loc.line), ("fwc.kdl", 3), "{diags:?}");
}

#[test]
fn limits_apply_before_parsing() {
    let deep = format!("fwc 1\n{}{}\n", "a {".repeat(1500), "}".repeat(1500));
    assert!(matches!(format_kdl(&deep), Err(FormatError::Limit(hit)) if hit.message.contains("nested")));
    let comments = format!("fwc 1\n{}{}\n", "/*".repeat(5000), "*/".repeat(5000));
    assert!(matches!(format_kdl(&comments), Err(FormatError::Limit(_))));
}

/// Deterministic mutations of a corpus text (byte deletions, duplications and insertions of
/// KDL's special characters): formatting never panics, and whatever it accepts it keeps
/// (verified inside `format_kdl`) and is idempotent on.
#[test]
fn mutated_input_never_panics_and_what_is_accepted_is_stable() {
    let seed_text = "// c\nfwc 1 /* b */\n\nhost \"h\" {\n    labels a=b // e\n}\n/-set \"s\" { - \"x\" }\nallow \"a\" \\\n    port=\"1\" r=#\"q\"# m=\"\"\"\n  z\n  \"\"\"\n";
    let specials = ["{", "}", "\"", "#", "/", "*", "-", "\\", "\n", " ", ";", "=", "(", ")", "\"\"\"", "é", "\r"];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut accepted = 0;
    for _ in 0..1500 {
        let mut text = seed_text.to_string();
        for _ in 0..1 + next(3) {
            let mut at = next(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            match next(3) {
                0 => {
                    let end = (at + 1 + next(4)).min(text.len());
                    let end = (end..=text.len()).find(|&e| text.is_char_boundary(e)).unwrap_or(text.len());
                    text.replace_range(at..end, "");
                }
                1 => text.insert_str(at, specials[next(specials.len())]),
                _ => {
                    let end = (at + next(8)).min(text.len());
                    let end = (end..=text.len()).find(|&e| text.is_char_boundary(e)).unwrap_or(text.len());
                    let piece = text[at..end].to_string();
                    text.insert_str(at, &piece);
                }
            }
        }
        if let Ok(out) = format_kdl(&text) {
            accepted += 1;
            assert_eq!(format_kdl(&out).as_ref(), Ok(&out), "not idempotent on {text:?}");
        }
    }
    eprintln!("{accepted} of 1500 mutated texts were valid KDL");
    assert!(accepted > 100, "the mutations should leave many texts valid, got {accepted}");
}

#[test]
fn block_comment_lines_lose_trailing_blanks_and_crlf_but_keep_their_indentation() {
    formats_to("/* a  \r\n     b\t\r\n   */\nx\n", "/* a\n     b\n   */\nx\n");
}
