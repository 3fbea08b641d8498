package tokenizer

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rllm-org/rllm-go/internal/boundedio"
)

// Resolve finds the directory holding a tokenizer named by ref: either a
// directory path, or a model id ("Qwen/Qwen3-8B") looked up in the
// Hugging Face hub cache at hubCache (…/huggingface/hub, laid out as
// models--ORG--NAME/snapshots/REV/). It never downloads anything.
//
// In the cache, the snapshot refs/main points at wins; otherwise the most
// recently modified snapshot that has a tokenizer.json.
func Resolve(ref, hubCache string) (string, error) {
	if ref == "" {
		return "", errorf("no tokenizer given: pass a directory holding tokenizer.json or a model id from the Hugging Face cache")
	}
	if st, err := os.Stat(ref); err == nil {
		if !st.IsDir() {
			if filepath.Base(ref) == TokenizerFile {
				return filepath.Dir(ref), nil
			}
			return "", errorf("tokenizer %s is a file: pass the directory holding %s", ref, TokenizerFile)
		}
		if _, err := os.Stat(filepath.Join(ref, TokenizerFile)); err != nil {
			return "", errorf("no %s in %s: point the tokenizer at a directory holding a Hugging Face %s", TokenizerFile, ref, TokenizerFile)
		}
		return ref, nil
	}
	org, name, ok := strings.Cut(ref, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") || strings.HasPrefix(ref, ".") {
		return "", errorf("tokenizer %q is neither a directory nor a model id like ORG/NAME", ref)
	}
	if hubCache == "" {
		return "", errorf("tokenizer %q is not a directory and no Hugging Face cache is known: pass a directory, or set HF_HOME", ref)
	}
	model := filepath.Join(hubCache, "models--"+org+"--"+name)
	snapshots := filepath.Join(model, "snapshots")
	if ref, err := boundedio.ReadFile(context.Background(), filepath.Join(model, "refs", "main"), 4<<10); err == nil {
		dir := filepath.Join(snapshots, strings.TrimSpace(string(ref)))
		if _, err := os.Stat(filepath.Join(dir, TokenizerFile)); err == nil {
			return dir, nil
		}
	}
	entries, err := os.ReadDir(snapshots)
	if err != nil {
		return "", errorf("model %s is not in the Hugging Face cache %s (rllm never downloads): download it first, e.g. `hf download %s tokenizer.json tokenizer_config.json`", ref, hubCache, ref)
	}
	type snap struct {
		dir  string
		unix int64
	}
	var found []snap
	for _, e := range entries {
		dir := filepath.Join(snapshots, e.Name())
		st, err := os.Stat(filepath.Join(dir, TokenizerFile))
		if err != nil {
			continue
		}
		found = append(found, snap{dir, st.ModTime().UnixNano()})
	}
	if len(found) == 0 {
		return "", errorf("model %s is in the Hugging Face cache %s but no snapshot has %s: download it, e.g. `hf download %s tokenizer.json tokenizer_config.json`", ref, hubCache, TokenizerFile, ref)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].unix > found[j].unix })
	return found[0].dir, nil
}

// HubCacheDir computes the Hugging Face hub cache directory the way
// huggingface_hub does, from values the caller reads from the environment:
// HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub,
// else HOME/.cache/huggingface/hub. getenv is os.Getenv or a test fake.
func HubCacheDir(getenv func(string) string) string {
	if d := getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	if d := getenv("HOME"); d != "" {
		return filepath.Join(d, ".cache", "huggingface", "hub")
	}
	return ""
}
