package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakehub"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// parquetOf writes rows as a parquet file (pkg/dataset, on parquet-go)
// and returns its bytes.
func parquetOf(t testing.TB, rows []episode.Task) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.parquet")
	if err := dataset.Write(context.Background(), p, rows, dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const gsmCard = `---
dataset_info:
- config_name: main
  features:
  - name: question
    dtype: string
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
---
# GSM8K
`

func gsmRows(n int) []episode.Task {
	var out []episode.Task
	for i := range n {
		out = append(out, episode.Task{"question": "How many? " + itoa(int64(i)), "answer": "Think.\n#### " + itoa(int64(i*3))})
	}
	return out
}

// gsmHub is a fake Hub holding openai/gsm8k as the Hub lays it out.
func gsmHub(t testing.TB) (*fakehub.Hub, string) {
	h := fakehub.New()
	t.Cleanup(h.Close)
	commit := h.Commit("openai/gsm8k", "main", map[string]fakehub.File{
		".gitattributes":                        {Data: []byte("*.parquet filter=lfs\n")},
		"README.md":                             {Data: []byte(gsmCard)},
		"main/train-00000-of-00001.parquet":     {Data: parquetOf(t, gsmRows(5)), LFS: true},
		"main/test-00000-of-00001.parquet":      {Data: parquetOf(t, gsmRows(2)), LFS: true},
		"socratic/train-00000-of-00001.parquet": {Data: parquetOf(t, gsmRows(1)), LFS: true},
	})
	return h, commit
}

func client(h *fakehub.Hub, cache string) *Client {
	return &Client{Endpoint: h.URL(), CacheDir: cache, Backoff: time.Millisecond, MaxRetryAfter: 10 * time.Millisecond}
}

func TestPullCatalogDatasetIntoHFCache(t *testing.T) {
	h, commit := gsmHub(t)
	cache := t.TempDir()
	c := client(h, cache)
	e, _ := Builtin().Lookup("gsm8k")
	p, err := c.Pull(context.Background(), FromEntry(e, ""))
	if err != nil {
		t.Fatal(err)
	}
	if p.Commit != commit || len(p.Splits["train"]) != 5 || len(p.Splits["test"]) != 2 {
		t.Fatalf("%+v", p)
	}
	if got := p.Splits["train"][4]; got["ground_truth"] != "12" || got["question"] != "How many? 4" || got["data_source"] != "gsm8k" {
		t.Fatalf("row %v", got)
	}
	// huggingface_hub's layout: refs, blobs by sha256, relative symlinks.
	dir := filepath.Join(cache, "datasets--openai--gsm8k")
	if b, _ := os.ReadFile(filepath.Join(dir, "refs", "main")); string(b) != commit {
		t.Fatalf("refs/main %q", b)
	}
	snap := filepath.Join(dir, "snapshots", commit, "main", "train-00000-of-00001.parquet")
	target, err := os.Readlink(snap)
	if err != nil || !strings.HasPrefix(target, "../../../blobs/") || len(filepath.Base(target)) != 64 {
		t.Fatalf("symlink %q %v", target, err)
	}
	readme, _ := os.Readlink(filepath.Join(dir, "snapshots", commit, "README.md"))
	if readme != "../../blobs/"+fakehub.GitSHA1([]byte(gsmCard)) {
		t.Fatalf("README link %q", readme)
	}
	if _, err := os.Stat(filepath.Join(cache, ".locks", "datasets--openai--gsm8k", filepath.Base(target)+".lock")); err != nil {
		t.Fatalf("lock file: %v", err)
	}
	// A second pull downloads nothing: HEADs only.
	gets := h.CDNGets.Load()
	if _, err := c.Pull(context.Background(), FromEntry(e, "test")); err != nil {
		t.Fatal(err)
	}
	if h.CDNGets.Load() != gets {
		t.Fatalf("second pull downloaded %d files", h.CDNGets.Load()-gets)
	}
	// Offline: no request at all.
	heads := h.Heads.Load()
	off := &Client{CacheDir: cache, Offline: true, Endpoint: "http://127.0.0.1:1"}
	p2, err := off.Pull(context.Background(), FromEntry(e, "train"))
	if err != nil || len(p2.Splits["train"]) != 5 || p2.Commit != commit {
		t.Fatalf("offline: %v %+v", err, p2)
	}
	if h.Heads.Load() != heads {
		t.Fatal("offline pull made requests")
	}
}

// A cache filled by Python (huggingface_hub's hf_hub_download) is used
// as it is: laid out here by hand as that code lays it out.
func TestUsesCachePythonFilled(t *testing.T) {
	h, commit := gsmHub(t)
	cache := t.TempDir()
	dir := filepath.Join(cache, "datasets--openai--gsm8k")
	put := func(path string, data []byte, etag string) {
		os.MkdirAll(filepath.Join(dir, "blobs"), 0o755)
		os.WriteFile(filepath.Join(dir, "blobs", etag), data, 0o644)
		link := filepath.Join(dir, "snapshots", commit, path)
		os.MkdirAll(filepath.Dir(link), 0o755)
		rel, _ := filepath.Rel(filepath.Dir(link), filepath.Join(dir, "blobs", etag))
		if err := os.Symlink(rel, link); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "refs"), 0o755)
	os.WriteFile(filepath.Join(dir, "refs", "main"), []byte(commit), 0o644)
	put("README.md", []byte(gsmCard), fakehub.GitSHA1([]byte(gsmCard)))
	train := parquetOf(t, gsmRows(5))
	put("main/train-00000-of-00001.parquet", train, sha256hex(train))
	h.Commit("openai/gsm8k", "main", map[string]fakehub.File{"README.md": {Data: []byte(gsmCard)}, "main/train-00000-of-00001.parquet": {Data: train, LFS: true}})
	commit2 := h.Commit("openai/gsm8k", "main", map[string]fakehub.File{"README.md": {Data: []byte(gsmCard)}, "main/train-00000-of-00001.parquet": {Data: train, LFS: true}})
	if commit2 != commit {
		// the fake's commit is a hash of the content: rebuild the snapshot name
		os.Rename(filepath.Join(dir, "snapshots", commit), filepath.Join(dir, "snapshots", commit2))
		os.WriteFile(filepath.Join(dir, "refs", "main"), []byte(commit2), 0o644)
	}
	e, _ := Builtin().Lookup("gsm8k")
	p, err := client(h, cache).Pull(context.Background(), FromEntry(e, "train"))
	if err != nil || len(p.Splits["train"]) != 5 {
		t.Fatalf("%v %+v", err, p)
	}
	if h.CDNGets.Load() != 0 {
		t.Fatalf("%d downloads of cached files", h.CDNGets.Load())
	}
}

func TestCorruptAndPartialBlobsFetchedAgain(t *testing.T) {
	h, _ := gsmHub(t)
	cache := t.TempDir()
	c := client(h, cache)
	e, _ := Builtin().Lookup("gsm8k")
	if _, err := c.Pull(context.Background(), FromEntry(e, "train")); err != nil {
		t.Fatal(err)
	}
	blobs, _ := filepath.Glob(filepath.Join(cache, "datasets--openai--gsm8k", "blobs", "*"))
	for _, b := range blobs {
		data, _ := os.ReadFile(b)
		data[len(data)/2] ^= 1
		os.WriteFile(b, data, 0o644)
	}
	gets := h.CDNGets.Load()
	p, err := c.Pull(context.Background(), FromEntry(e, "train"))
	if err != nil || len(p.Splits["train"]) != 5 || h.CDNGets.Load() == gets {
		t.Fatalf("corrupt blob not fetched again: %v", err)
	}
	// A partial .incomplete from a cut run is resumed with Range.
	for _, b := range blobs {
		data, _ := os.ReadFile(b)
		os.Remove(b)
		os.WriteFile(b+".incomplete", data[:len(data)/2], 0o644)
	}
	before := h.CDNBytes.Load()
	if _, err := c.Pull(context.Background(), FromEntry(e, "train")); err != nil {
		t.Fatal(err)
	}
	if got := h.CDNBytes.Load() - before; got == 0 || got > int64(len(parquetOf(t, gsmRows(5)))) {
		t.Fatalf("resumed %d bytes", got)
	}
	// A CDN that corrupts every transfer: refused, never used.
	os.RemoveAll(cache)
	h.Corrupt.Store(true)
	_, err = c.Pull(context.Background(), FromEntry(e, "train"))
	if err == nil || !strings.Contains(err.Error(), "does not match its ETag twice") {
		t.Fatalf("err %v", err)
	}
}

func TestResumesCutDownloads(t *testing.T) {
	h := fakehub.New()
	t.Cleanup(h.Close)
	rows := make([]episode.Task, 4000)
	for i := range rows {
		rows[i] = episode.Task{"question": strings.Repeat("x", 100) + itoa(int64(i)), "answer": "#### 1"}
	}
	data := parquetOf(t, rows)
	h.Commit("o/big", "main", map[string]fakehub.File{"data/train-00000-of-00001.parquet": {Data: data, LFS: true}})
	h.CutAfter = int64(len(data) / 5)
	c := client(h, t.TempDir())
	c.Retries = 3
	p, err := c.Pull(context.Background(), Source{Name: "o/big", Repo: "o/big"})
	if err != nil || len(p.Splits["train"]) != 4000 {
		t.Fatalf("%v", err)
	}
	if h.CDNGets.Load() < 5 {
		t.Fatalf("%d GETs for a file cut in five", h.CDNGets.Load())
	}
	// Cut every time before a byte arrives: bounded retries, one line.
	h.CutAfter = 1
	c2 := client(h, t.TempDir())
	c2.Retries = 2
	_, err = c2.Pull(context.Background(), Source{Name: "o/big", Repo: "o/big"})
	if err == nil || !strings.Contains(err.Error(), "failed 3 times") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err %v", err)
	}
}

func TestRateLimitRetryAfter(t *testing.T) {
	h, _ := gsmHub(t)
	h.RateLimit.Store(3)
	e, _ := Builtin().Lookup("gsm8k")
	if _, err := client(h, t.TempDir()).Pull(context.Background(), FromEntry(e, "test")); err != nil {
		t.Fatal(err)
	}
	h.RateLimit.Store(100)
	c := client(h, t.TempDir())
	c.Retries = 2
	_, err := c.Pull(context.Background(), FromEntry(e, "test"))
	if err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("err %v", err)
	}
}

type fullDisk struct {
	f    *os.File
	left int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) > d.left {
		n, _ := d.f.Write(p[:d.left])
		d.left = 0
		return n, &os.PathError{Op: "write", Path: d.f.Name(), Err: syscall.ENOSPC}
	}
	d.left -= len(p)
	return d.f.Write(p)
}
func (d *fullDisk) Close() error { return d.f.Close() }

func TestBadInput(t *testing.T) {
	h, _ := gsmHub(t)
	h.Tokens = []string{"hf_good", "hf_other"}
	h.Commit("org/private", "main", map[string]fakehub.File{"train.jsonl": {Data: []byte(`{"question":"q","answer":"a"}` + "\n")}})
	h.SetAccess("org/private", true, false, "hf_good")
	h.Commit("org/gated", "main", map[string]fakehub.File{"train.jsonl": {Data: []byte(`{"question":"q","answer":"a"}` + "\n")}})
	h.SetAccess("org/gated", false, true, "hf_good")
	h.Commit("org/notparquet", "main", map[string]fakehub.File{"data/train.parquet": {Data: []byte("<html>not parquet</html>"), LFS: true}})
	gsm, _ := Builtin().Lookup("gsm8k")
	for _, tt := range []struct {
		name, token string
		src         Source
		want        string
	}{
		{"no such repo", "", Source{Name: "x", Repo: "org/nope"}, "dataset org/nope was not found on " + h.URL() + "; check the name, or set HF_TOKEN if it is private"},
		{"no such repo, token", "hf_good", Source{Name: "x", Repo: "org/nope"}, "dataset org/nope was not found on " + h.URL() + ", or your token cannot read it"},
		{"private, no token", "", Source{Name: "x", Repo: "org/private"}, "set HF_TOKEN if it is private"},
		{"private, granted", "hf_good", Source{Name: "x", Repo: "org/private"}, ""},
		{"gated, no token", "", Source{Name: "x", Repo: "org/gated"}, "dataset org/gated is gated: accept its terms at " + h.URL() + "/datasets/org/gated, then set HF_TOKEN"},
		{"gated, not granted", "hf_other", Source{Name: "x", Repo: "org/gated"}, "your token has not been granted access: accept its terms at " + h.URL() + "/datasets/org/gated"},
		{"invalid token", "hf_wrong", Source{Name: "x", Repo: "openai/gsm8k"}, "refused the token (401): HF_TOKEN (or the token file) is invalid or expired"},
		{"no revision", "", Source{Name: "x", Repo: "openai/gsm8k", Revision: "v9"}, `dataset openai/gsm8k has no revision "v9"`},
		{"no config", "", Source{Name: "x", Repo: "openai/gsm8k", Configs: []string{"mian"}}, `dataset openai/gsm8k has no config "mian"; did you mean main?; it has: main, socratic`},
		{"no split", "", Source{Name: "x", Repo: "openai/gsm8k", Split: "tets"}, `dataset openai/gsm8k (config main) has no split "tets"; did you mean test?; its splits: train, test`},
		{"missing column", "", Source{Name: "gsm8k", Repo: "openai/gsm8k", Split: "test", Fields: FieldMap{"question": "questoin"}}, `field question reads column "questoin", which the dataset does not have (columns: answer, question); did you mean "question"?`},
		{"bad field map", "", Source{Name: "gsm8k", Repo: "openai/gsm8k", Fields: FieldMap{"q": "answer | re:(("}}, "bad regex"},
		{"not parquet", "", Source{Name: "org/notparquet", Repo: "org/notparquet"}, "data/train.parquet (org/notparquet at "},
		{"catalog ok", "", FromEntry(gsm, "test"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := client(h, t.TempDir())
			c.Token = tt.token
			_, err := c.Pull(context.Background(), tt.src)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !usererr.Is(err) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err %v\nwant %q", err, tt.want)
			}
			if tt.token != "" && strings.Contains(err.Error(), tt.token) {
				t.Fatal("the token is printed")
			}
		})
	}
	if h.AuthOnCDN.Load() != 0 {
		t.Fatalf("the token went to the CDN %d times", h.AuthOnCDN.Load())
	}
}

func TestFullDisk(t *testing.T) {
	h, _ := gsmHub(t)
	c := client(h, t.TempDir())
	c.openBlob = func(path string, resume bool) (blobWriter, error) {
		w, err := openIncomplete(path, resume)
		if err != nil {
			return nil, err
		}
		return &fullDisk{f: w.(*os.File), left: 100}, nil
	}
	e, _ := Builtin().Lookup("gsm8k")
	_, err := c.Pull(context.Background(), FromEntry(e, "test"))
	if err == nil || !strings.Contains(err.Error(), "no space left writing") || !strings.Contains(err.Error(), "set HF_HUB_CACHE to a larger disk") {
		t.Fatalf("err %v", err)
	}
	c.openBlob = nil // space again: the pull resumes
	if _, err := c.Pull(context.Background(), FromEntry(e, "test")); err != nil {
		t.Fatal(err)
	}
}

// A redirect to another host that would take the token never gets it.
func TestTokenNeverLeavesTheEndpoint(t *testing.T) {
	h, _ := gsmHub(t)
	h.Tokens = []string{"hf_secret"}
	evil := fakehub.New() // its CDN refuses (and counts) any Authorization
	t.Cleanup(evil.Close)
	h.RedirectTo = evil.CDN.URL
	c := client(h, t.TempDir())
	c.Token = "hf_secret"
	e, _ := Builtin().Lookup("gsm8k")
	c.Pull(context.Background(), FromEntry(e, "test"))
	if evil.AuthOnCDN.Load() != 0 {
		t.Fatal("the token was sent to another host")
	}
}

func TestConcurrentPullsShareOneDownload(t *testing.T) {
	h, _ := gsmHub(t)
	cache := t.TempDir()
	e, _ := Builtin().Lookup("gsm8k")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = client(h, cache).Pull(context.Background(), FromEntry(e, "train"))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := h.CDNGets.Load(); n != 1 {
		t.Fatalf("%d downloads of one file by 4 pulls", n)
	}
	left, _ := filepath.Glob(filepath.Join(cache, "datasets--openai--gsm8k", "blobs", "*.incomplete"))
	if len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

func TestParquetConversionAndDefaultLayout(t *testing.T) {
	h := fakehub.New()
	t.Cleanup(h.Close)
	rows := []episode.Task{{"problem": "1+1", "answer": "2"}}
	// A dataset with a loading script only: its files come from the
	// Hub's parquet conversion.
	h.Commit("o/scripted", "main", map[string]fakehub.File{"scripted.py": {Data: []byte("# a loading script")}})
	conv := h.Commit("o/scripted", "refs/convert/parquet", map[string]fakehub.File{
		"default/train/0000.parquet": {Data: parquetOf(t, rows), LFS: true},
		"default/test/0000.parquet":  {Data: parquetOf(t, rows), LFS: true},
	})
	h.Commit("o/plain", "main", map[string]fakehub.File{"test.jsonl": {Data: []byte(`{"problem":"p","answer":"1"}` + "\n")}, "data/train-00000-of-00002.csv": {Data: []byte("problem,answer\nq,2\n")}, "data/train-00001-of-00002.csv": {Data: []byte("problem,answer\nr,3\n")}})
	c := client(h, t.TempDir())
	p, err := c.Pull(context.Background(), Source{Name: "s", Repo: "o/scripted", Split: "test"})
	if err != nil || !p.Converted || p.Commit != conv || len(p.Splits["test"]) != 1 || p.Revision != ConvertedRevision {
		t.Fatalf("%v %+v", err, p)
	}
	if _, err := os.Stat(filepath.Join(c.CacheDir, "datasets--o--scripted", "refs", "refs", "convert", "parquet")); err != nil {
		t.Fatal(err)
	}
	p, err = c.Pull(context.Background(), Source{Name: "p", Repo: "o/plain"})
	if err != nil || len(p.Splits["train"]) != 2 || len(p.Splits["test"]) != 1 {
		t.Fatalf("%v %+v", err, p.Files)
	}
	u, _ := ParseURI("hf://datasets/o/plain/data/*.csv")
	p, err = c.Pull(context.Background(), FromURI(u, Builtin(), FieldMap{"question": "problem", "ground_truth": "answer | str"}))
	if err != nil || len(p.Splits["train"]) != 2 || p.Splits["train"][1]["ground_truth"] != "3" {
		t.Fatalf("%v %+v", err, p.Splits)
	}
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
