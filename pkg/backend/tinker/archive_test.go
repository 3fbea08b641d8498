package tinker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/internal/faketinker"
)

type tarEntry struct {
	name string
	typ  byte
	body string
	link string
}

func makeTar(t testing.TB, gz bool, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Linkname: e.link}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

var adapterFiles = []tarEntry{{name: "adapter_config.json", body: `{"peft_type": "LORA"}`}, {name: "adapter_model.safetensors", body: "weights"}}

func TestExportAdapterArchives(t *testing.T) {
	good := makeTar(t, true, adapterFiles...)
	nested := makeTar(t, false, tarEntry{name: "ckpt/", typ: tar.TypeDir}, tarEntry{name: "ckpt/adapter_config.json", body: "{}"}, tarEntry{name: "ckpt/adapter_model.safetensors", body: "w"})
	cases := []struct {
		name    string
		archive []byte
		max     int64
		want    string // error substring; "" means success
	}{
		{"gzip tarball", good, 0, ""},
		{"plain tar in a subdirectory", nested, 0, ""},
		{"path traversal", makeTar(t, true, append(adapterFiles, tarEntry{name: "../../evil", body: "x"})...), 0, "leaves the export directory"},
		{"absolute path", makeTar(t, true, tarEntry{name: "/etc/evil", body: "x"}), 0, "not a plain relative path"},
		{"symlink", makeTar(t, true, append(adapterFiles, tarEntry{name: "link", typ: tar.TypeSymlink, link: "/etc/passwd"})...), 0, "link or special file"},
		{"hard link", makeTar(t, true, append(adapterFiles, tarEntry{name: "hl", typ: tar.TypeLink, link: "adapter_config.json"})...), 0, "link or special file"},
		{"too large", good, 10, "more than 10 bytes"},
		{"unpacks too large", makeTar(t, true, tarEntry{name: "adapter_model.safetensors", body: strings.Repeat("0", 5000)}), 1000, "more than 1000 bytes"},
		{"not an adapter", makeTar(t, true, tarEntry{name: "README", body: "hi"}), 0, "not a PEFT adapter"},
		{"no weights", makeTar(t, true, adapterFiles[0]), 0, "no adapter_model.safetensors"},
		{"truncated", good[:len(good)/2], 0, ""},
		{"not an archive", []byte("<html>signed URL expired</html>"), 0, "not a readable tar"},
		{"duplicate entry", makeTar(t, true, append(adapterFiles, adapterFiles[0])...), 0, "file exists"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, faketinker.Options{}, nil)
			ctx := context.Background()
			snap, err := r.b.PublishSampler(ctx, "s1").Result(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r.srv.Inject(faketinker.Fault{Path: "download", Kind: faketinker.FaultArchive, Body: tc.archive})
			out := filepath.Join(t.TempDir(), "adapter")
			err = r.b.Client().ExportAdapter(ctx, snap.(*Sampler).Path(), out, tc.max)
			if tc.name == "truncated" {
				if err == nil {
					t.Fatal("a truncated archive was accepted")
				}
			} else if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
					if _, err := os.Stat(filepath.Join(out, f)); err != nil {
						t.Error(err)
					}
				}
				return
			} else if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want %q", err, tc.want)
			}
			if _, serr := os.Stat(out); serr == nil {
				t.Errorf("a refused archive left %s behind", out)
			}
			if _, serr := os.Stat(filepath.Join(filepath.Dir(out), "..", "evil")); serr == nil {
				t.Error("path traversal wrote outside")
			}
			entries, _ := os.ReadDir(filepath.Dir(out))
			if len(entries) != 0 {
				t.Errorf("leftovers: %v", entries)
			}
		})
	}
}

func TestExportRealArchiveAndErrors(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	snap, err := r.b.PublishSampler(ctx, "s1").Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "a")
	r.srv.Inject(faketinker.Fault{Path: "download", Kind: faketinker.FaultStatus, Status: 503})
	if err := r.b.Client().ExportAdapter(ctx, snap.(*Sampler).Path(), out, 0); err != nil {
		t.Fatalf("a 503 on the download is retried: %v", err)
	}
	if err := r.b.Client().ExportAdapter(ctx, snap.(*Sampler).Path(), out, 0); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("exporting over a full directory: %v", err)
	}
	missing := "tinker://" + r.b.ModelID() + "/sampler_weights/nope"
	if err := r.b.Client().ExportAdapter(ctx, missing, filepath.Join(t.TempDir(), "b"), 0); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "no archive of") {
		t.Errorf("a missing checkpoint: %v", err)
	}
	if _, err := r.b.Client().ArchiveURL(ctx, "tinker://x/../y"); err == nil {
		t.Error("a bad path accepted")
	}
}

func TestCheckpointFile(t *testing.T) {
	dir := t.TempDir()
	c := Checkpoint{WeightsPath: "tinker://m1/weights/global_step_2", SamplerPath: "tinker://m1/sampler_weights/global_step_2", BaseModel: "Qwen/Qwen3-8B", BaseURL: "http://localhost:8000"}
	if err := WriteCheckpoint(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCheckpoint(dir)
	if err != nil || got != c {
		t.Fatalf("read %+v, %v", got, err)
	}
	for _, bad := range []string{
		`{"weights_path": "s3://x", "base_model": "m"}`,
		`{"weights_path": "tinker://m/weights/a", "sampler_path": "tinker://m/weights/b", "base_model": "m"}`,
		`{"weights_path": "tinker://m/weights/a", "api_key": "k"}`,
		`not json`,
	} {
		if _, err := ParseCheckpoint("x/tinker.json", []byte(bad)); err == nil || exitCode(err) != 2 {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := ReadCheckpoint(t.TempDir()); err == nil || exitCode(err) != 2 {
		t.Errorf("missing file: %v", err)
	}
}

// The API key never reaches the run directory: tinker.json and an
// exported adapter hold paths and weights only.
func TestAPIKeyNeverWritten(t *testing.T) {
	r := newRig(t, faketinker.Options{}, nil)
	ctx := context.Background()
	w, err := r.b.SaveState(ctx, "global_step_1").Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := r.b.PublishSampler(ctx, "global_step_1").Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	step := filepath.Join(run, "global_step_1")
	if err := WriteCheckpoint(step, Checkpoint{WeightsPath: w, SamplerPath: snap.(*Sampler).Path(), BaseModel: faketinker.BaseModel, BaseURL: r.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Client().ExportAdapter(ctx, snap.(*Sampler).Path(), filepath.Join(run, "adapter"), 0); err != nil {
		t.Fatal(err)
	}
	files := 0
	filepath.WalkDir(run, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(testKey)) {
			t.Errorf("%s holds the API key", p)
		}
		return nil
	})
	if files < 3 {
		t.Errorf("only %d files written", files)
	}
}
