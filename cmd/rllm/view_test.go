package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episodestore"
)

// rllm eval --episodes writes the records rllm view reads (gzip for a .gz
// name), and rllm view lists the file with its pass@k.
func TestEvalEpisodesInView(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "arith.jsonl")
	os.WriteFile(data, []byte(`{"question":"1+1","ground_truth":"2","data_source":"arith"}`+"\n"+`{"question":"2+3","ground_truth":"5","data_source":"arith"}`+"\n"), 0o644)
	eps := filepath.Join(dir, "runs", "eval.jsonl.gz")
	os.MkdirAll(filepath.Dir(eps), 0o755)
	var stdout, stderr bytes.Buffer
	a := testApp(&stdout, &stderr)
	if code := a.Run(context.Background(), []string{"eval", "--data", data, "--n", "2", "--episodes", eps,
		"backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=64"}); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr.String())
	}
	recs, err := episodestore.ReadAll(eps)
	if err != nil || len(recs) != 4 || recs[0].Phase != episodestore.PhaseEval || len(recs[0].Trajectories[0].Steps[0].ResponseIDs) == 0 {
		t.Fatalf("the episodes file: %d records, %v", len(recs), err)
	}
	b, _ := os.ReadFile(eps)
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Error("a .gz episodes file is not gzip")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	var out syncBuffer
	go func() {
		done <- runView(ctx, testApp(&out, io.Discard), &viewOptions{dirs: []string{filepath.Dir(eps)}, host: "127.0.0.1", port: 0, ready: func(s string) { addrc <- s }})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("rllm view did not listen")
	}
	resp, err := http.Get("http://" + addr + "/api/passk?run=0:eval.jsonl.gz&phase=eval")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		K   int `json:"k"`
		All struct {
			Tasks, Episodes int
		} `json:"all"`
	}
	json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if p.K != 2 || p.All.Tasks != 2 || p.All.Episodes != 4 {
		t.Errorf("pass@k of the eval file: %+v", p)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("rllm view after Ctrl-C: %v", err)
	}
	if !strings.Contains(out.String(), "http://127.0.0.1:") {
		t.Errorf("rllm view printed %q, not its URL", out.String())
	}
}

func TestViewErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"view", "--port", port, t.TempDir()}, "port " + port + " on 127.0.0.1 is in use"},
		{[]string{"view", filepath.Join(t.TempDir(), "missing")}, "does not exist"},
		{[]string{"view", "--port", "70000"}, "--port 70000"},
	} {
		var stderr bytes.Buffer
		code := testApp(io.Discard, &stderr).Run(context.Background(), tc.args)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line with %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
