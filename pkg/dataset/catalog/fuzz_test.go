package catalog

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Any dataset.json: List, Show, Path and Remove never panic, and never
// remove a file outside the dataset's directory.
func FuzzDatasetJSON(f *testing.F) {
	f.Add(`{"name":"d","splits":{"train":{"file":"train.parquet","rows":1}}}`)
	f.Add(`{"name":"d","splits":{"train":{"file":"../../victim.txt","rows":1}}}`)
	f.Add(`{"name":"d","splits":{"../x":{"file":"../x.parquet"}}}`)
	f.Add(`{"splits":null}`)
	f.Add(`[1,2`)
	f.Fuzz(func(t *testing.T, meta string) {
		root := t.TempDir()
		victim := filepath.Join(root, "victim.txt")
		if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, _ := Open(filepath.Join(root, "reg"))
		if err := os.MkdirAll(filepath.Join(c.Dir, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.Dir, "d", "dataset.json"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
		c.List()
		c.Show("d")
		c.Path("d:train")
		c.Path("d")
		c.Remove(context.Background(), "d", "train")
		if _, err := os.Stat(victim); err != nil {
			t.Fatalf("dataset.json %q removed a file outside the registry", meta)
		}
		c.Remove(context.Background(), "d", "")
		if _, err := os.Stat(filepath.Join(c.Dir, "d")); !os.IsNotExist(err) {
			t.Fatalf("rm d of dataset.json %q left the dataset: %v", meta, err)
		}
	})
}
