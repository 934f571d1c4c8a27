#!/bin/sh
# Fill the import corpus (default /work/corpus) with the originals MANIFEST.tsv names, each
# taken from its public repository at the recorded commit. The originals are never committed:
# only the manifest is. A repository is read from $FWC_MIRRORS/<owner>+<name>/repo when such a
# mirror exists, else cloned from GitHub into $CORPUS/.git-cache.
#   sh bench/import/fill.sh [CORPUS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
corpus=${1:-/work/corpus}
mirrors=${FWC_MIRRORS:-/work/.mirror}
mkdir -p "$corpus"
tab=$(printf '\t')

repo_dir() { # owner/name commit -> a git directory holding that commit
    m="$mirrors/$(echo "$1" | tr / +)/repo"
    [ -d "$m/.git" ] && m="$m/.git"
    if [ -d "$m" ] && git -C "$m" cat-file -e "$2^{commit}" 2>/dev/null; then echo "$m"; return; fi
    c="$corpus/.git-cache/$(echo "$1" | tr / +)"
    if [ ! -d "$c" ]; then git clone -q --bare --filter=blob:none "https://github.com/$1" "$c" >&2; fi
    git -C "$c" cat-file -e "$2^{commit}" 2>/dev/null || git -C "$c" fetch -q origin "$2" >&2
    echo "$c"
}

grep -v '^#' "$here/MANIFEST.tsv" | while IFS="$tab" read -r name kind repo paths commit; do
    [ -n "$name" ] || continue
    dest="$corpus/$name/in"
    rm -rf "$corpus/$name" && mkdir -p "$dest"
    tmp=$(mktemp -d)
    if [ "$repo" = "debian-package:ufw" ]; then
        for p in $(echo "$paths" | tr , ' '); do cp -r "$p/." "$tmp/"; done
    else
        g=$(repo_dir "$repo" "$commit")
        # shellcheck disable=SC2086
        git -C "$g" ls-tree -r --name-only "$commit" -- $(echo "$paths" | tr , ' ') | while read -r f; do
            mkdir -p "$tmp/$(dirname "$f")" && git -C "$g" show "$commit:$f" > "$tmp/$f"
        done
    fi
    case "$kind" in
    nft|iptables)
        find "$tmp" -type f -exec cp {} "$dest/" \; ;;
    ufw)
        # ufw's framework and the package's before/after rules, then the repository's files.
        mkdir -p "$dest/ufw"
        cp -r /etc/ufw/. "$dest/ufw/"
        cp /usr/share/ufw/iptables/user*.rules "$dest/ufw/" 2>/dev/null || true
        [ -f /etc/default/ufw ] && cp /etc/default/ufw "$dest/ufw/default"
        if [ -d "$tmp/etc/ufw" ]; then cp -r "$tmp/etc/ufw/." "$dest/ufw/"; else find "$tmp" -path '*ufw*' -type f ! -path '*default*' -exec cp {} "$dest/ufw/" \; ; fi
        [ -f "$tmp/etc/default/ufw" ] && cp "$tmp/etc/default/ufw" "$dest/ufw/default"
        [ -f "$tmp/default/ufw" ] && cp "$tmp/default/ufw" "$dest/ufw/default"
        ;;
    firewalld)
        mkdir -p "$dest/firewalld"
        cp -r "$tmp/$paths/." "$dest/firewalld/" ;;
    esac
    rm -rf "$tmp"
    echo "$name: $(find "$dest" -type f | wc -l) file(s)"
done
