package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Two writers of one dataset at once keep both splits (without the lock
// one dataset.json overwrote the other: 8 of 8 tries lost a split).
func TestConcurrentRegisterKeepsBothSplits(t *testing.T) {
	tmp := t.TempDir()
	var rows strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&rows, `{"question": "q%d", "ground_truth": "%d"}`+"\n", i, i)
	}
	f := write(t, filepath.Join(tmp, "rows.jsonl"), rows.String())
	ctx := context.Background()
	for try := range 8 {
		c, _ := Open(filepath.Join(tmp, fmt.Sprint("reg", try)))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, split := range []string{"train", "test"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = c.Register(ctx, "ds", split, f, false)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		in, err := c.Show("ds")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(in.SplitNames(), ","); got != "test,train" {
			t.Fatalf("try %d: splits %s after two concurrent registers, want test,train", try, got)
		}
	}
}

// A crafted dataset.json cannot make rm or Path touch a file outside the
// dataset's directory; a damaged one can be removed and does not break
// List for the others.
func TestCraftedAndDamagedDatasetJSON(t *testing.T) {
	tmp := t.TempDir()
	c, _ := Open(filepath.Join(tmp, "reg"))
	ctx := context.Background()
	f := write(t, filepath.Join(tmp, "rows.jsonl"), `{"question": "q"}`+"\n")
	if _, err := c.Register(ctx, "good", "train", f, false); err != nil {
		t.Fatal(err)
	}
	victim := write(t, filepath.Join(tmp, "victim.txt"), "keep me")
	for _, name := range []string{"evil", "broken"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(c.Dir, "evil", "dataset.json"), `{"name":"evil","splits":{"train":{"file":"../../victim.txt","rows":1},"test":{"file":"test.parquet","rows":1}}}`)
	write(t, filepath.Join(c.Dir, "broken", "dataset.json"), `{"name": "broken", "spl`)

	if err := c.Remove(ctx, "evil", "train"); err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Fatalf("rm evil --split train: %v, want it refused as damaged", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the victim file is gone: %v", err)
	}
	if _, err := c.Path("evil:train"); err == nil {
		t.Fatal("Path followed the crafted file name")
	}
	list, err := c.List()
	if err != nil {
		t.Fatalf("List with damaged datasets: %v", err)
	}
	var names []string
	for _, in := range list {
		names = append(names, fmt.Sprintf("%s damaged=%v", in.Name, in.Damaged != ""))
	}
	if got := strings.Join(names, ","); got != "broken damaged=true,evil damaged=true,good damaged=false" {
		t.Fatalf("List: %s", got)
	}
	for _, name := range []string{"broken", "evil"} {
		if err := c.Remove(ctx, name, ""); err != nil {
			t.Fatalf("rm %s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(c.Dir, name)); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", name, err)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the victim file is gone: %v", err)
	}
}

// A registered file that changed is marked by Show and refused by Path.
func TestChecksumChanged(t *testing.T) {
	tmp := t.TempDir()
	c, _ := Open(filepath.Join(tmp, "reg"))
	f := write(t, filepath.Join(tmp, "rows.jsonl"), `{"question": "q"}`+"\n")
	sp, err := c.Register(context.Background(), "ds", "train", f, false)
	if err != nil || len(sp.SHA256) != 64 {
		t.Fatalf("%+v %v", sp, err)
	}
	in, _ := c.Show("ds")
	if in.Splits["train"].Changed {
		t.Fatal("marked changed right after registering")
	}
	p, err := c.Path("ds")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if in, _ := c.Show("ds"); !in.Splits["train"].Changed {
		t.Fatal("Show did not notice the changed file")
	}
	if _, err := c.Path("ds"); err == nil || !strings.Contains(err.Error(), "changed since it was registered") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("Path: %v", err)
	}
}

func TestFollowXDG(t *testing.T) {
	for _, tc := range []struct{ dir, xdg, want string }{
		{DefaultDir, "/x/data", "/x/data/rllm/datasets"},
		{DefaultDir, "", DefaultDir},
		{DefaultDir, "relative/path", DefaultDir}, // the spec says to ignore it
		{"/my/datasets", "/x/data", "/my/datasets"},
	} {
		if got := FollowXDG(tc.dir, tc.xdg); got != tc.want {
			t.Errorf("FollowXDG(%q, %q) = %q, want %q", tc.dir, tc.xdg, got, tc.want)
		}
	}
}
