package tool

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// fakeWS answers every Exec with res, recording the requests.
type fakeWS struct {
	res  sandbox.Result
	err  error
	reqs []sandbox.ExecRequest
}

func (f *fakeWS) Exec(_ context.Context, req sandbox.ExecRequest) (sandbox.Result, error) {
	f.reqs = append(f.reqs, req)
	return f.res, f.err
}
func (f *fakeWS) CopyIn(context.Context, string, []sandbox.File) error    { return nil }
func (f *fakeWS) ReadFile(context.Context, string, int64) ([]byte, error) { return nil, nil }
func (f *fakeWS) KillAll(context.Context) error                           { return nil }
func (f *fakeWS) ID() string                                              { return "fake" }
func (f *fakeWS) Close(context.Context) error                             { return nil }

func TestBash(t *testing.T) {
	expired := errors.New("time is over")
	for _, tc := range []struct {
		name     string
		args     string
		res      sandbox.Result
		werr     error
		deadline time.Duration // from now; 0: none
		want     string
		isErr    bool
		err      error
	}{
		{name: "ok", args: `{"command": "ls"}`, res: sandbox.Result{Stdout: []byte("a\nb")}, want: "a\nb\n[exit status 0]"},
		{name: "fails", args: `{"command": "false"}`, res: sandbox.Result{ExitCode: 1, Stderr: []byte("nope\n")}, want: "nope\n[exit status 1: nope]", isErr: true},
		{name: "stdout then stderr", args: `{"command": "x"}`, res: sandbox.Result{Stdout: []byte("out"), Stderr: []byte("err")}, want: "out\nerr\n[exit status 0]"},
		{name: "limit", args: `{"command": "yes"}`, res: sandbox.Result{ExitCode: 137, Limit: sandbox.LimitOutput, Stdout: []byte("y\n")}, want: "y\n[output limit exceeded]", isErr: true},
		{name: "not json", args: `ls`, want: "arguments must be a JSON object", isErr: true},
		{name: "empty command", args: `{"command": " "}`, want: "the command is empty", isErr: true},
		{name: "time over", args: `{"command": "ls"}`, deadline: -time.Second, err: expired},
		{name: "killed at the deadline", args: `{"command": "sleep 9"}`, res: sandbox.Result{Limit: sandbox.LimitWallTime, ExitCode: 137}, deadline: time.Nanosecond, err: expired},
		{name: "the workspace failing is an error", args: `{"command": "ls"}`, werr: errors.New("daemon gone"), err: errors.New("daemon gone")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := &fakeWS{res: tc.res, err: tc.werr}
			w := Workspace{WS: ws, Dir: "/app", Env: []string{"A=1"}, Expired: expired}
			if tc.deadline != 0 {
				w.Deadline = time.Now().Add(tc.deadline)
			}
			b := (&Bash{Params: BashParams{TimeoutS: 5, MaxOutputChars: 1000}}).Bind(w)
			time.Sleep(time.Millisecond)
			res, err := b.Call(context.Background(), tc.args)
			if tc.err != nil {
				if err == nil || err.Error() != tc.err.Error() {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Text, tc.want) || res.IsError != tc.isErr {
				t.Fatalf("%+v, want %q error=%v", res, tc.want, tc.isErr)
			}
			if len(ws.reqs) == 1 {
				r := ws.reqs[0]
				if r.Dir != "/app" || r.Command[0] != "bash" || r.Env[0] != "A=1" || r.Limits.WallTime != 5*time.Second || r.Limits.OutputBytes == 0 {
					t.Errorf("request %+v", r)
				}
			}
		})
	}
	// Unbound: an error result, never a run on the host.
	res, err := (&Bash{Params: BashParams{TimeoutS: 5, MaxOutputChars: 100}}).Call(context.Background(), `{"command": "ls"}`)
	if err != nil || !res.IsError || !strings.Contains(res.Text, "no workspace") {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestSetBind(t *testing.T) {
	s, err := Open(context.Background(), Config{Builtin: []string{"calculator", "bash"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.NeedsWorkspace(); len(got) != 1 || got[0] != "bash" {
		t.Fatalf("%v", got)
	}
	if got := WorkspaceTools([]string{"python", "bash", "calculator"}); len(got) != 1 || got[0] != "bash" {
		t.Fatalf("%v", got)
	}
	ws := &fakeWS{res: sandbox.Result{Stdout: []byte("hi")}}
	b := s.Bind(Workspace{WS: ws, Dir: "/"})
	res, err := b.Call(context.Background(), "bash", `{"command": "echo hi"}`)
	if err != nil || !strings.Contains(res.Text, "hi") || len(ws.reqs) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// The shared set stays unbound, and the calculator is shared.
	if res, _ := s.Call(context.Background(), "bash", `{"command": "echo hi"}`); !res.IsError {
		t.Errorf("the shared set was bound: %+v", res)
	}
	if res, _ := b.Call(context.Background(), "calculator", `{"expression": "1+1"}`); res.Text != "2" {
		t.Errorf("%+v", res)
	}
}
