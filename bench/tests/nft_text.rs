//! The compiler's `nftables.json` (compact, a command per line, an element per line) is still
//! the form the runtime's element-list readers take: its sets and maps split off as text
//! (element diffs of big sets) and a big document is stored in chunks of element lines.

#[test]
fn the_compilers_text_splits_into_element_lists_and_chunks() {
    let tree = fwc_bench::generate(4000);
    let (art, _) = fwc_compiler::compile(&tree, None, None).expect("the generated repository compiles");
    let text = art.nftables.text();
    assert!(text.starts_with("{\"nftables\":[\n") && text.ends_with("\n]}\n"));
    assert!(text.lines().all(|l| !l.starts_with("   ")), "no indentation beyond an element's two spaces");
    let split = fwc_runtime::backend::nft::lazy::split(text).expect("the compiler's text splits");
    let with_elems = art.nftables["nftables"].as_array().unwrap().iter().filter(|c| ["set", "map"].iter().any(|k| c["add"][k]["elem"].as_array().is_some_and(|e| !e.is_empty()))).count();
    assert_eq!(split.raw.len(), with_elems);
    for r in &split.raw {
        let want = &art.nftables["nftables"][r.item]["add"][r.kind.as_str()]["elem"];
        let got = fwc_runtime::backend::nft::lazy::parse_elements(&text[r.range.clone()]).expect("element lines parse");
        assert_eq!(&serde_json::Value::Array(got), want, "{}", r.name);
    }
    assert!(text.len() > 1 << 20, "big enough to be stored in chunks");
    let pieces = fwc_runtime::state::parts::cut(text).expect("stored in chunks");
    assert_eq!(pieces.iter().map(|(_, p)| *p).collect::<String>(), text);
}
