package catalog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func write(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRegisterListShowRemove(t *testing.T) {
	tmp := t.TempDir()
	c, err := Open(filepath.Join(tmp, "reg"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	train := write(t, filepath.Join(tmp, "train.jsonl"), `{"question": "1+1", "ground_truth": "2"}`+"\n"+`{"question": "2+2", "ground_truth": "4", "level": 1}`+"\n")
	test := write(t, filepath.Join(tmp, "test.csv"), "question,ground_truth\n3+3,6\n")
	if _, err := c.Register(ctx, "mini", "train", train, false); err != nil {
		t.Fatal(err)
	}
	sp, err := c.Register(ctx, "mini", "test", test, false)
	if err != nil || sp.Rows != 1 || strings.Join(sp.Columns, ",") != "ground_truth,question" {
		t.Fatalf("%+v %v", sp, err)
	}
	// Converted once to parquet, readable as any dataset.
	rows, err := dataset.ReadAll(ctx, filepath.Join(c.Dir, "mini", "train.parquet"), dataset.Options{})
	if err != nil || len(rows) != 2 || rows[1]["level"] == nil {
		t.Fatalf("%v %v", rows, err)
	}
	if _, err := c.Register(ctx, "mini", "train", train, false); err == nil || !strings.Contains(err.Error(), "already has a train split; pass --force") {
		t.Fatalf("err %v", err)
	}
	if _, err := c.Register(ctx, "mini", "train", train, true); err != nil {
		t.Fatal(err)
	}
	list, err := c.List()
	if err != nil || len(list) != 1 || strings.Join(list[0].SplitNames(), ",") != "test,train" || list[0].Splits["train"].Rows != 2 {
		t.Fatalf("%+v %v", list, err)
	}
	for _, tt := range []struct{ ref, want string }{
		{"mini:train", "train.parquet"}, {"mini:test", "test.parquet"},
	} {
		if p, err := c.Path(tt.ref); err != nil || filepath.Base(p) != tt.want {
			t.Errorf("%s: %s %v", tt.ref, p, err)
		}
	}
	if _, err := c.Path("mini"); err == nil || !strings.Contains(err.Error(), "dataset mini has splits test, train; name one as mini:SPLIT") {
		t.Errorf("err %v", err)
	}
	if err := c.Remove(ctx, "mini", "test"); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Path("mini"); err != nil || filepath.Base(p) != "train.parquet" {
		t.Errorf("only split: %s %v", p, err)
	}
	if err := c.Remove(ctx, "mini", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Show("mini"); err == nil || !usererr.Is(err) || !strings.Contains(err.Error(), `no dataset "mini" is registered`) {
		t.Fatalf("err %v", err)
	}
}

func TestBadInput(t *testing.T) {
	tmp := t.TempDir()
	c, _ := Open(tmp)
	ctx := context.Background()
	empty := write(t, filepath.Join(tmp, "empty.jsonl"), "")
	for _, tt := range []struct{ name, split, file, want string }{
		{"../evil", "train", empty, `dataset "../evil" is not a valid name`},
		{"ok", "a/b", empty, `split "a/b" is not a valid name`},
		{"ok", "train", empty, "has no rows; nothing to register"},
		{"ok", "train", filepath.Join(tmp, "missing.jsonl"), "missing.jsonl"},
	} {
		_, err := c.Register(ctx, tt.name, tt.split, tt.file, false)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s/%s: %v, want %q", tt.name, tt.split, err, tt.want)
		}
	}
	if _, err := Open(""); err == nil {
		t.Error("empty dir accepted")
	}
}

func TestResolveFiles(t *testing.T) {
	tmp := t.TempDir()
	c, _ := Open(filepath.Join(tmp, "reg"))
	ctx := context.Background()
	f := write(t, filepath.Join(tmp, "rows.jsonl"), `{"question": "q"}`+"\n")
	c.Register(ctx, "qa", "train", f, false)
	c.Register(ctx, "qa", "test", f, false)
	t.Chdir(tmp)
	write(t, "plainfile", `{"question": "q"}`+"\n")
	got, err := ResolveFiles(c.Dir, "data.train_files", []string{"qa", "qa:test", f, "plainfile", "missing/file.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(c.Dir, "qa", "train.parquet"), filepath.Join(c.Dir, "qa", "test.parquet"), f, "plainfile", "missing/file.jsonl"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	got, _ = ResolveFiles(c.Dir, "data.val_files", []string{"qa"})
	if filepath.Base(got[0]) != "test.parquet" {
		t.Fatalf("val: %v", got)
	}
	_, err = ResolveFiles(c.Dir, "data.train_files", []string{"gsm8k"})
	if err == nil || !usererr.Is(err) || !strings.Contains(err.Error(), `data.train_files: "gsm8k" is neither a file nor a dataset registered in`) {
		t.Fatalf("err %v", err)
	}
	_, err = ResolveFiles(c.Dir, "data.train_files", []string{"qa:dev"})
	if err == nil || !strings.Contains(err.Error(), "dataset qa has no dev split; it has: test, train") {
		t.Fatalf("err %v", err)
	}
}
